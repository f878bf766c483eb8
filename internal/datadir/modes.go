package datadir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// Tighten keeps the data dir's database to its owner: it creates the
// database file mode 0600 before SQLite does (SQLite gives its -wal and
// -shm files the database's mode, and would create it with the umask's,
// usually 0644), and takes group and other access off a database, its
// -wal and -shm, the secret key and the admin token made by hand or by an
// older version. It does not change the directory itself, which a person
// may have made for a reason; it returns a warning, a sentence with the
// fix, when the directory lets other users in. Windows has no Unix modes:
// there it does nothing.
func Tighten(dir string) (warning string, err error) {
	if runtime.GOOS == "windows" {
		return "", nil
	}
	db := filepath.Join(dir, Database)
	f, err := os.OpenFile(db, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case err == nil:
		if err := f.Close(); err != nil {
			return "", fmt.Errorf("create %s: %w", db, err)
		}
	case !errors.Is(err, fs.ErrExist):
		return "", fmt.Errorf("create %s: %w", db, err)
	}
	for _, name := range []string{Database, Database + "-wal", Database + "-shm", SecretKey, AdminToken} {
		p := filepath.Join(dir, name)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) || err == nil && !fi.Mode().IsRegular() {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("check %s: %w", p, err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			if err := chmodRegular(p, fi, fi.Mode().Perm()&0o700); err != nil {
				return "", fmt.Errorf("make %s readable by its owner only: %w", p, err)
			}
		}
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("check %s: %w", dir, err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Sprintf("the data dir %s is mode %04o: other users of this machine can see what it holds besides the database (artifacts, spilled output); make it the server's alone with chmod 0700 %s", dir, perm, dir), nil
	}
	return "", nil
}
