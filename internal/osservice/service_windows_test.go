//go:build windows

package osservice

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"
)

// TestEscapeWindowsArgMatchesSyscall: the Linux-testable quoting is the
// one Windows itself (syscall.EscapeArg) writes, and the command line
// splits back into the same words.
func TestEscapeWindowsArgMatchesSyscall(t *testing.T) {
	words := []string{``, `plain`, `C:\Program Files\o.exe`, `C:\dir\`, `C:\my dir\`, `say "hi"`, `a\"b`, "tab\there"}
	for _, w := range words {
		if got, want := EscapeWindowsArg(w), syscall.EscapeArg(w); got != want {
			t.Errorf("EscapeWindowsArg(%q) = %s; syscall.EscapeArg: %s", w, got, want)
		}
	}
	s := testService()
	got, err := windows.DecomposeCommandLine(s.CommandLine())
	if err != nil {
		t.Fatal(err)
	}
	if want := append([]string{s.Executable}, s.Args...); !slices.Equal(got, want) {
		t.Errorf("the command line splits into %q; want %q", got, want)
	}
}

// TestServiceHandlerStop: Stop cancels the worker's context (its graceful
// stop) and the service ends cleanly, with StopPending reported while the
// worker winds down.
func TestServiceHandlerStop(t *testing.T) {
	stopped := make(chan struct{})
	h := &serviceHandler{run: func(ctx context.Context) int {
		<-ctx.Done()
		close(stopped)
		return 1 // a worker cut short may exit non-zero; a stop asked for is no failure
	}}
	req := make(chan svc.ChangeRequest, 1)
	status := make(chan svc.Status, 16)
	type result struct {
		specific bool
		code     uint32
	}
	done := make(chan result, 1)
	go func() {
		s, c := h.Execute(nil, req, status)
		done <- result{s, c}
	}()
	waitState(t, status, svc.Running)
	req <- svc.ChangeRequest{Cmd: svc.Stop}
	waitState(t, status, svc.StopPending)
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not cancel the worker's context")
	}
	select {
	case r := <-done:
		if r.specific || r.code != 0 {
			t.Errorf("a stop asked for ended with (%v, %d); want a clean stop", r.specific, r.code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Execute did not return after the worker ended")
	}
}

// TestServiceHandlerFailure: a worker that exits with an error on its own
// ends the service with a service-specific error, which the manager's
// recovery actions restart.
func TestServiceHandlerFailure(t *testing.T) {
	h := &serviceHandler{run: func(context.Context) int { return 3 }}
	req := make(chan svc.ChangeRequest)
	status := make(chan svc.Status, 16)
	specific, code := h.Execute(nil, req, status)
	if !specific || code != 3 || h.code != 3 {
		t.Errorf("Execute = (%v, %d), code %d; want (true, 3), 3", specific, code, h.code)
	}
}

func waitState(t *testing.T, status <-chan svc.Status, want svc.State) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case s := <-status:
			if s.State == want {
				return
			}
		case <-deadline:
			t.Fatalf("the service never reported state %d", want)
		}
	}
}

// TestWriteSecretFile: the token file's access list names LocalSystem and
// the administrators only, inherits nothing, and the file holds the data.
func TestWriteSecretFile(t *testing.T) {
	dir, err := os.MkdirTemp("", "secret")
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir: Wine answers os.RemoveAll with "Invalid function".
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "worker.token")
	if err := WriteSecretFile(path, []byte("tok\n")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "tok\n" {
		t.Fatalf("read back %q, %v", b, err)
	}
	sd, err := windows.GetNamedSecurityInfo(path, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		t.Fatal(err)
	}
	sddl := sd.String()
	if !strings.HasPrefix(sddl, "D:P") || strings.Count(sddl, "(") != 2 ||
		!strings.Contains(sddl, "(A;;FA;;;SY)") || !strings.Contains(sddl, "(A;;FA;;;BA)") {
		t.Errorf("access list %s; want protected, LocalSystem and the administrators only (%s)", sddl, secretFileDACL)
	}
}
