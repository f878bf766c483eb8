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
	once    sync.Once
	ok      bool
	version string // the major version it answered
	stub    bool   // a powershell is on PATH but answered no version
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
		v := strings.TrimSpace(string(out))
		if _, aerr := strconv.Atoi(v); err != nil || aerr != nil {
			powerShellProbe.stub = true
			return
		}
		powerShellProbe.ok, powerShellProbe.version = true, v
	})
	return powerShellProbe.ok
}

// PowerShellVersion is the major version of the PowerShell exec runs, ""
// when there is none; stub is set when a powershell on PATH answered no
// version (Wine's prints nothing), so exec runs cmd.exe.
func PowerShellVersion(ctx context.Context) (version string, stub bool) {
	powerShellWorks(ctx)
	return powerShellProbe.version, powerShellProbe.stub
}

// ConPTYAvailable is nil when this Windows has the pseudo console that
// persistent shells run on (Windows 10 1809, Server 2019 and later), else
// why not.
func ConPTYAvailable() error { return conPTYAvailable() }

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
