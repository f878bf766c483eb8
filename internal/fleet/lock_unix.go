//go:build unix

package fleet

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// TryLock takes an exclusive flock on f without waiting: false when
// another process holds it.
func TryLock(f *os.File) (bool, error) {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, unix.EWOULDBLOCK):
			return false, nil
		case errors.Is(err, unix.EINTR):
			continue
		}
		return false, err
	}
}

// Unlock releases the flock on f and closes f. The lock belongs to the
// open file description, which a child forked by another goroutine shares
// until its exec closes it: closing alone could leave the lock held for a
// moment after the holder let go, so it is released explicitly first.
func Unlock(f *os.File) {
	for {
		if err := unix.Flock(int(f.Fd()), unix.LOCK_UN); !errors.Is(err, unix.EINTR) {
			break
		}
	}
	f.Close()
}
