// Package datadir is the layout of the directory `outpost server` keeps its
// state in — the names of what it holds — the lock a server takes on it, and
// its backups: an archive of a consistent copy of the database, made while
// a server uses it, with the secret key and the files sessions left, and the
// restore of one into an empty directory.
package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// What a data dir holds.
const (
	// Database is the embedded SQLite database (with its -wal and -shm
	// files beside it while a server has it open).
	Database = "outpost.db"
	// SecretKey is the key session secrets are sealed with, unless the
	// server is given one (OUTPOST_SECRET_KEY, --secret-key-file).
	SecretKey = "secret-key"
	// AdminToken is the admin token the first start created and printed.
	AdminToken = "admin-token"
	// Artifacts holds the files sessions uploaded, artifacts/<session>/.
	Artifacts = "artifacts"
	// Output holds call output kept past the transcript's cap,
	// output/<session>/<call>.log.
	Output = "output"
	// LockFile is locked by the server using the data dir; it holds that
	// process's id.
	LockFile = "server.lock"
)

// Lock is a process's exclusive hold on a data dir; see Acquire.
type Lock struct {
	f *os.File
}

// LockedError is Acquire's error when another process holds the lock.
type LockedError struct {
	Dir string
	// PID is the holder's process id as it wrote it, 0 if unknown.
	PID int
}

func (e *LockedError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("the data dir %s is in use by another outpost process (pid %d)", e.Dir, e.PID)
	}
	return fmt.Sprintf("the data dir %s is in use by another outpost process", e.Dir)
}

// ErrLocked matches a *LockedError with errors.Is.
var ErrLocked = errors.New("data dir in use")

// Is makes errors.Is(err, ErrLocked) hold.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// Acquire takes the lock of the data dir dir (which must exist) without
// waiting, and writes this process's id into the lock file. The lock is an
// advisory lock on an open file (flock), so it goes when the process
// exits, however it exits: a server killed with SIGKILL leaves nothing to
// clean up. Where the system has no flock, Acquire always succeeds.
func Acquire(dir string) (*Lock, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock the data dir: %w", err)
	}
	if err := flock(f); err != nil {
		f.Close()
		if errors.Is(err, errWouldBlock) {
			b, _ := os.ReadFile(path)
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			return nil, &LockedError{Dir: dir, PID: pid}
		}
		return nil, fmt.Errorf("lock the data dir: %w", err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// Release gives the lock up. The lock file stays: removing it could let two
// processes hold locks on two different files of one name.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	funlock(l.f)
	err := l.f.Close()
	l.f = nil
	return err
}
