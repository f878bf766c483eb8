package worker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// lockFile is the file in the data dir that the running worker holds
// locked (flock) for its whole life, with its pid inside.
const lockFile = "lock"

// ErrDataDirInUse is returned by Run when another running worker holds the
// data dir.
var ErrDataDirInUse = errors.New("worker data dir in use")

// dataDirInUseError names the data dir and the worker holding it.
type dataDirInUseError struct {
	dir string
	pid int // 0: unknown
}

func (e *dataDirInUseError) Error() string {
	holder := "another worker"
	if e.pid > 0 {
		holder = fmt.Sprintf("another worker (pid %d)", e.pid)
	}
	return fmt.Sprintf("the worker data dir %s is in use by %s: two workers must never share one. "+
		"Run this worker in a directory of its own (each workspace gets its own data dir), or give it another with --data-dir DIR",
		e.dir, holder)
}

func (e *dataDirInUseError) Unwrap() error { return ErrDataDirInUse }

// dirLock is a lock held on a data dir until release.
type dirLock struct{ f *os.File }

// lockDataDir locks dir (created if needed) for this process and writes
// its pid into the lock file, or returns a *dataDirInUseError naming the
// holder. The lock goes with the process, however it ends.
func lockDataDir(dir string) (*dirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create worker data dir: %w", err)
	}
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the worker's lock file: %w", err)
	}
	held, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if !held {
		b, _ := os.ReadFile(path)
		f.Close()
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return nil, &dataDirInUseError{dir: dir, pid: pid}
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dirLock{f: f}, nil
}

// release unlocks; the pid stays in the file, which only a lock holder
// trusts.
func (l *dirLock) release() {
	if l != nil {
		l.f.Close()
	}
}
