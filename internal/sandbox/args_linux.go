package sandbox

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ArgsFile returns an anonymous in-memory file (memfd) holding args,
// NUL-separated and read from the start, for bwrap's --args FD: arguments
// that carry secrets (a connect token in --setenv) never appear on a
// command line that ps shows, nor in a file on disk. The caller passes it
// to bwrap (exec.Cmd.ExtraFiles) and closes it once bwrap has started.
func ArgsFile(args []string) (*os.File, error) {
	fd, err := unix.MemfdCreate("outpost-bwrap-args", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("create bwrap's argument file: %w", err)
	}
	f := os.NewFile(uintptr(fd), "bwrap-args")
	for _, a := range args {
		if _, err := f.WriteString(a + "\x00"); err != nil {
			f.Close()
			return nil, fmt.Errorf("write bwrap's arguments: %w", err)
		}
	}
	if _, err := f.Seek(0, 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("write bwrap's arguments: %w", err)
	}
	return f, nil
}
