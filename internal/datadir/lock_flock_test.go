//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package datadir

import (
	"syscall"
	"testing"
)

// TestReleaseWhileShared: a released lock is free at once even while
// another reference to its open file description lives on — what a child
// forked by another goroutine holds until its exec.
func TestReleaseWhileShared(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	shared, err := syscall.Dup(int(l.f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(shared)
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	again, err := Acquire(dir)
	if err != nil {
		t.Fatalf("the data dir is still locked after Release while its file description is shared: %v", err)
	}
	again.Release()
}
