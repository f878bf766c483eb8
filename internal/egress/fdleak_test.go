//go:build linux

package egress

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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

// TestEngineLeavesNoDescriptors: a session's namespace and engine, started
// and stopped, leave this process with the descriptors it had. A worker
// serves sessions for months; one descriptor kept per session (the
// eventfd that stops the read loop) would end it.
func TestEngineLeavesNoDescriptors(t *testing.T) {
	needWorld(t)
	ctx := context.Background()
	count := func() map[string]int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]int{}
		for _, e := range ents {
			target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
			if err != nil {
				continue // the directory's own descriptor, closed already
			}
			if i := strings.IndexByte(target, '['); i >= 0 {
				target = target[:i] // socket:[inode] and the like: count by kind
			}
			kinds[target]++
		}
		return kinds
	}
	// One session first, so whatever the runtime and the test hosts open
	// once (netpoll, resolver sockets) is there before the count.
	cycle := func() {
		ns, err := NewNamespace(ctx)
		if err != nil {
			t.Fatal(err)
		}
		eng, err := Serve(ctx, ns, Config{Policy: benchPolicy(), Resolver: theWorld.resolver})
		if err != nil {
			t.Fatal(err)
		}
		s := &session{ns: ns, eng: eng}
		c, err := s.dial("tcp", hostPort(hostWeb4, 7000))
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte{1})
		io.ReadFull(c, make([]byte, 1))
		c.Close()
		eng.Close()
		ns.Close()
	}
	cycle()
	before := count()
	for range 5 {
		cycle()
	}
	after := count()
	// Pipes are left out: os/exec's, for the ip command, close on their
	// own schedule.
	for _, kind := range []string{"anon_inode:", "/dev/net/tun", "net:", "socket:"} {
		if n := after[kind]; n > before[kind] {
			t.Errorf("%d more descriptors of kind %q after 5 sessions (before %v, after %v)", n-before[kind], kind, before, after)
		}
	}
}
