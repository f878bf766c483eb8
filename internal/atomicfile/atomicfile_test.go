package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A symlink at path is replaced, never written through.
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("the link's target became %q", b)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("path is %v, want a regular file of mode 0600", fi.Mode())
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Errorf("path holds %q", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("the directory holds %d entries, want the file and the target (no temporary file left)", len(entries))
	}
	// A directory that does not exist: an error naming the path, nothing made.
	if err := Write(filepath.Join(dir, "missing", "f"), []byte("x"), 0o600); err == nil {
		t.Error("Write into a missing directory succeeded")
	}
}

// TestWriteFunc: streamed content lands whole; when the writer fails the
// file that was there stays as it was, its error comes back as it is, and
// no temporary file is left.
func TestWriteFunc(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := WriteFunc(path, 0o600, func(w io.Writer) error {
		if _, err := io.WriteString(w, "half"); err != nil {
			return err
		}
		return boom
	})
	if err != boom {
		t.Errorf("WriteFunc = %v, want the writer's error as it is", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("after a failed write the file holds %q, want the old content", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the directory holds %d entries, want the file alone (no temporary file left)", len(entries))
	}
	err = WriteFunc(path, 0o600, func(w io.Writer) error {
		_, err := io.Copy(w, strings.NewReader("new, streamed"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the file: %v, %v; want mode 0600", fi, err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new, streamed" {
		t.Errorf("the file holds %q", b)
	}
}
