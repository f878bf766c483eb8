package egress

import (
	"context"
	"os/exec"
	"strings"
	"testing"
)

// TestTUNNotInheritedByAConcurrentChild: a process the worker starts while
// a session's TUN device is being opened (another session's sandbox, a
// git command) must not inherit the descriptor. One that did could read
// that session's traffic and write packets into its namespace. The hook
// starts the child at the first moment the descriptor exists, the worst
// moment another goroutine's fork could come.
func TestTUNNotInheritedByAConcurrentChild(t *testing.T) {
	needWorld(t)
	var fds string
	var runErr error
	tunOpened = func(int) {
		out, err := exec.Command("sh", "-c", "ls -l /proc/self/fd/").CombinedOutput()
		fds, runErr = string(out), err
	}
	defer func() { tunOpened = func(int) {} }()
	ns, err := NewNamespace(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if runErr != nil {
		t.Fatalf("list the child's descriptors: %v: %s", runErr, fds)
	}
	if strings.Contains(fds, "/dev/net/tun") {
		t.Fatalf("a child started as the TUN device was opened holds it:\n%s", fds)
	}
}
