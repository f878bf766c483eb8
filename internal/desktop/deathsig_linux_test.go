package desktop

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/waitfor"
)

// envDesktopOwner runs the test binary as a desktop's owner, a remote in
// small: it starts a desktop, prints Xvfb's pid and the display, and waits
// to be killed.
const envDesktopOwner = "OUTPOST_TEST_DESKTOP_OWNER"

// TestDisplayDiesWithItsOwner: a process that started a desktop and is
// killed (a remote killed with its process group by a worker, or one that
// crashed) takes its display along: Xvfb, in a process group of its own,
// does not go on serving the session's screen, and removes its socket.
func TestDisplayDiesWithItsOwner(t *testing.T) {
	if os.Getenv(envDesktopOwner) == "1" {
		d, err := Start(context.Background(), Options{Width: 320, Height: 240, WindowManager: "none"})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(d.xvfb.Process.Pid, strings.TrimPrefix(d.Display(), ":"))
		select {}
	}
	if XvfbPath() == "" {
		t.Skip("Xvfb is not installed (apt-get install xvfb)")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDisplayDiesWithItsOwner$")
	cmd.Env = append(os.Environ(), envDesktopOwner+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	var pid int
	var num string
	if _, serr := fmt.Sscan(line, &pid, &num); err != nil || serr != nil {
		t.Fatalf("the owner did not start a desktop: %q (%v)", line, err)
	}
	defer func() {
		if running(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}()
	if !running(pid) {
		t.Fatalf("Xvfb (pid %d) is not running while its owner runs", pid)
	}
	// As a worker kills a remote that outstays its grace: the owner's
	// whole process group.
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitfor.Within(t, 10*time.Second, "Xvfb to end with its owner", func() bool { return !running(pid) })
	socket := "/tmp/.X11-unix/X" + num
	waitfor.Within(t, 10*time.Second, "Xvfb's socket to go", func() bool {
		_, err := os.Stat(socket)
		return os.IsNotExist(err)
	})
}

// running reports whether pid is a process that has not exited (a zombie
// whose parent never reaps it has).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}
