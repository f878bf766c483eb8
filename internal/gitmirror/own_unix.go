//go:build unix

package gitmirror

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// ownedByMe reports whether the worker's user owns fi.
func ownedByMe(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

// takeBack makes the directory at path (not a link) the worker's.
func takeBack(path string) error {
	return os.Lchown(path, os.Geteuid(), os.Getegid())
}

// readPlain reads at most limit bytes of path when it is a regular file
// with one link, opened without following a symbolic link or blocking on
// a FIFO; nil without error when there is no file.
func readPlain(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !fi.Mode().IsRegular() || !ok || st.Nlink != 1 {
		return nil, fmt.Errorf("%s is not a plain file", path)
	}
	return io.ReadAll(io.LimitReader(f, limit))
}
