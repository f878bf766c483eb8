package remote

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

func TestReadWriteFile(t *testing.T) {
	dir := t.TempDir()
	tc := newTestCall(t, dir, nil)
	ctx := context.Background()

	var wr api.WriteFileResult
	if err := tc.run(t, ctx, api.ToolWriteFile, api.WriteFileArgs{Path: "a/b/c.txt", Content: "hello\n"}, &wr); err != nil {
		t.Fatal(err)
	}
	if wr.Bytes != 6 {
		t.Errorf("bytes = %d", wr.Bytes)
	}
	var rr api.ReadFileResult
	if err := tc.run(t, ctx, api.ToolReadFile, api.ReadFileArgs{Path: filepath.Join(dir, "a/b/c.txt")}, &rr); err != nil {
		t.Fatal(err)
	}
	if rr.Content != "hello\n" || rr.Size != 6 {
		t.Errorf("read = %+v", rr)
	}

	if err := tc.run(t, ctx, api.ToolReadFile, api.ReadFileArgs{Path: "missing"}, nil); err == nil {
		t.Error("reading a missing file succeeded")
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 11<<20); err != nil {
		t.Fatal(err)
	}
	if err := tc.run(t, ctx, api.ToolReadFile, api.ReadFileArgs{Path: "big"}, nil); err == nil || !strings.Contains(err.Error(), "10 MiB") {
		t.Errorf("reading 11 MiB: err = %v", err)
	}
}

func TestWriteFileIsAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.sh")
	if err := os.WriteFile(path, []byte("old"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A reader holding the old file keeps seeing it whole: the new content
	// goes to a new file renamed over the old one.
	old, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()

	tc := newTestCall(t, dir, nil)
	if err := tc.run(t, context.Background(), api.ToolWriteFile, api.WriteFileArgs{Path: "f.sh", Content: "new content"}, nil); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 64)
	n, _ := old.Read(b)
	if string(b[:n]) != "old" {
		t.Errorf("old reader sees %q", b[:n])
	}
	if got, _ := os.ReadFile(path); string(got) != "new content" {
		t.Errorf("file = %q", got)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o755 {
		t.Errorf("mode = %v, want 0755 kept", st.Mode())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want no temporary files left", len(entries))
	}
}

func TestEditFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.txt")
	if err := os.WriteFile(path, []byte("one\ntwo\nthree two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tc := newTestCall(t, dir, nil)
	ctx := context.Background()

	err := tc.run(t, ctx, api.ToolEditFile, api.EditFileArgs{Path: "f.txt", Old: "four", New: "x"}, nil)
	if err == nil || !strings.Contains(err.Error(), "0 matches") {
		t.Errorf("0 matches: err = %v", err)
	}
	err = tc.run(t, ctx, api.ToolEditFile, api.EditFileArgs{Path: "f.txt", Old: "two", New: "x"}, nil)
	if err == nil || !strings.Contains(err.Error(), "matches 2 times") {
		t.Errorf("2 matches: err = %v", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "one\ntwo\nthree two\n" {
		t.Errorf("a failed edit changed the file: %q", got)
	}
	var res api.EditFileResult
	if err := tc.run(t, ctx, api.ToolEditFile, api.EditFileArgs{Path: "f.txt", Old: "three two", New: "3"}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Line != 3 {
		t.Errorf("line = %d, want 3", res.Line)
	}
	if got, _ := os.ReadFile(path); string(got) != "one\ntwo\n3\n" {
		t.Errorf("file = %q", got)
	}
}

func TestListDir(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"b.txt", "a.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("12345"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "c"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.txt", filepath.Join(dir, "d")); err != nil {
		t.Fatal(err)
	}
	tc := newTestCall(t, dir, nil)
	var res api.ListDirResult
	if err := tc.run(t, context.Background(), api.ToolListDir, api.ListDirArgs{}, &res); err != nil {
		t.Fatal(err)
	}
	want := []api.DirEntry{
		{Name: "a.txt", Type: "file", Size: 5},
		{Name: "b.txt", Type: "file", Size: 5},
		{Name: "c", Type: "dir"},
		{Name: "d", Type: "symlink"},
	}
	if len(res.Entries) != len(want) {
		t.Fatalf("entries = %+v", res.Entries)
	}
	for i := range want {
		if res.Entries[i] != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, res.Entries[i], want[i])
		}
	}
}

func TestEditFileDiff(t *testing.T) {
	t.Parallel()
	before := "a\nb\nc\nd\nfoo bar\ne\nf\ng\nh\n"
	i := strings.Index(before, "foo")
	after := before[:i] + "baz\nqux" + before[i+3:]
	got := editDiff("x.txt", before, after, i, 3, 7)
	want := "--- a/x.txt\n+++ b/x.txt\n@@ -2,7 +2,8 @@\n b\n c\n d\n-foo bar\n+baz\n+qux bar\n e\n f\n g\n"
	if got != want {
		t.Fatalf("diff:\n%s\nwant:\n%s", got, want)
	}
	// Against git's own diff of the same change.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a"), []byte(before), 0o600)
	os.WriteFile(filepath.Join(dir, "b"), []byte(after), 0o600)
	out, _ := exec.Command("git", "diff", "--no-index", "--no-color", filepath.Join(dir, "a"), filepath.Join(dir, "b")).Output()
	if !strings.Contains(string(out), "@@ -2,7 +2,8 @@") {
		t.Fatalf("git's hunk header differs:\n%s", out)
	}
}
