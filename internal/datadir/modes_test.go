package datadir

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestTighten: a data dir made by hand (0755) with a database, key and
// token readable by everyone (an umask of 022) is tightened to 0600 files,
// and the directory is reported, not changed; a fresh one gets a 0600
// database before SQLite creates it.
func TestTighten(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix modes")
	}
	dir := filepath.Join(t.TempDir(), "by-hand")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	for _, name := range []string{Database, Database + "-wal", SecretKey, AdminToken, "unrelated.txt"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	warning, err := Tighten(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(warning, "mode 0755") || !strings.Contains(warning, "chmod 0700 "+dir) {
		t.Errorf("warning %q", warning)
	}
	for name, want := range map[string]os.FileMode{Database: 0o600, Database + "-wal": 0o600, SecretKey: 0o600, AdminToken: 0o600, "unrelated.txt": 0o644} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want %04o", name, fi.Mode().Perm(), err, want)
		}
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o755 {
		t.Errorf("the directory was changed to %04o", fi.Mode().Perm())
	}

	fresh := t.TempDir()
	if err := os.Chmod(fresh, 0o700); err != nil {
		t.Fatal(err)
	}
	warning, err = Tighten(fresh)
	if err != nil || warning != "" {
		t.Fatalf("a 0700 dir: %q, %v", warning, err)
	}
	if fi, err := os.Stat(filepath.Join(fresh, Database)); err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != 0 {
		t.Errorf("the new database: %v %v", fi, err)
	}
}

// TestTightenFollowsNoLink: a key that is a link is not tightened through
// it, and one swapped for a link after it was checked (chmodRegular with
// the old file's FileInfo) leaves the link's target as it was.
func TestTightenFollowsNoLink(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix modes")
	}
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.WriteFile(target, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(target, 0o644); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, SecretKey)
	if err := os.Symlink(target, key); err != nil {
		t.Fatal(err)
	}
	if _, err := Tighten(dir); err != nil {
		t.Fatal(err)
	}
	// The race: the checked file is replaced by a link before the chmod.
	checked := filepath.Join(dir, AdminToken)
	if err := os.WriteFile(checked, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(checked)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(checked); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, checked); err != nil {
		t.Fatal(err)
	}
	if err := chmodRegular(checked, fi, 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(target); fi.Mode().Perm() != 0o644 {
		t.Errorf("a link's target was changed to %04o", fi.Mode().Perm())
	}
}
