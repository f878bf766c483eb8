package remote

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// defaultShell is PowerShell when a working one is installed, else cmd.exe.
func defaultShell(ctx context.Context) string {
	if powerShellWorks(ctx) {
		return "powershell"
	}
	return "cmd"
}

// powerShellProbe is whether powershell answers its major version; it is
// asked once per remote.
var powerShellProbe struct {
	once sync.Once
	ok   bool
}

// powerShellWorks reports whether powershell on PATH prints its major
// version as a number. A stub that prints nothing and exits 0 (Wine ships
// one) is not PowerShell.
func powerShellWorks(ctx context.Context) bool {
	powerShellProbe.once.Do(func() {
		path, err := exec.LookPath("powershell")
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, path, "-NoProfile", "-NonInteractive", "-Command", "$PSVersionTable.PSVersion.Major").Output()
		if err != nil {
			return
		}
		_, err = strconv.Atoi(strings.TrimSpace(string(out)))
		powerShellProbe.ok = err == nil
	})
	return powerShellProbe.ok
}

// cmdShell runs line with cmd.exe /d /s /c "line". cmd does not parse its
// command line by the C runtime's rules that Go's argument quoting follows,
// so the line is passed verbatim: with /s, cmd strips the outer quotes and
// runs the rest as typed.
func cmdShell(ctx context.Context, path, line string) *exec.Cmd {
	if comspec := os.Getenv("ComSpec"); comspec != "" && strings.EqualFold(path, comspec) {
		path = comspec
	}
	cmd := exec.CommandContext(ctx, path)
	cmd.SysProcAttr = &syscall.SysProcAttr{CmdLine: `/d /s /c "` + line + `"`}
	return cmd
}
