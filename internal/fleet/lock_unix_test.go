//go:build unix

package fleet

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestUnlockWhileShared: a lock released with Unlock is free at once even
// while another reference to its open file description lives on — what a
// child forked by another goroutine holds until its exec.
func TestUnlockWhileShared(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if held, err := TryLock(f); err != nil || !held {
		t.Fatalf("first lock: %v %v", held, err)
	}
	shared, err := unix.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(shared)
	Unlock(f)

	g, err := os.OpenFile(path, os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if held, err := TryLock(g); err != nil || !held {
		t.Errorf("the lock is still held after Unlock while its file description is shared: %v %v", held, err)
	}
}
