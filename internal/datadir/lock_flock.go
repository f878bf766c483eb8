//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package datadir

import (
	"errors"
	"os"
	"syscall"
)

var errWouldBlock = syscall.EWOULDBLOCK

// flock takes an exclusive flock on f, failing with errWouldBlock when
// another open file holds one.
func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// funlock releases the flock on f. The lock belongs to the open file
// description, which a child forked by another goroutine shares until its
// exec closes it: closing alone could leave it held for a moment.
func funlock(f *os.File) {
	for {
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); !errors.Is(err, syscall.EINTR) {
			return
		}
	}
}
