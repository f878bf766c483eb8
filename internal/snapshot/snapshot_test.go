package snapshot

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/outpost-sh/outpost/api"
)

func writeFile(t *testing.T, path, content string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// tree describes every entry under dir: type, mode, size, mtime, content or
// link target.
func tree(t *testing.T, dir string, exclude ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		for _, e := range exclude {
			if rel == e && d.IsDir() {
				return filepath.SkipDir
			} else if rel == e {
				return nil
			}
		}
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		var desc string
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			desc = "link " + target
		case fi.IsDir():
			desc = "dir " + fi.Mode().Perm().String() + " " + fi.ModTime().UTC().Format(time.RFC3339Nano)
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc = "file " + fi.Mode().Perm().String() + " " + fi.ModTime().UTC().Format(time.RFC3339Nano) + " " + string(b)
		default:
			desc = "other " + fi.Mode().String()
		}
		out[filepath.ToSlash(rel)] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func compareTrees(t *testing.T, got, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("%s missing after restore (want %q)", k, w)
		} else if g != w {
			t.Errorf("%s = %q, want %q", k, g, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s restored but not in the original (%q)", k, g)
		}
	}
}

func snap(t *testing.T, dir string, opts Options) ([]byte, api.SnapshotInfo) {
	t.Helper()
	var buf bytes.Buffer
	info, err := Write(context.Background(), &buf, dir, opts)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	sum := sha256.Sum256(buf.Bytes())
	if info.Size != int64(buf.Len()) || info.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("info = %+v, but the archive has %d bytes with SHA-256 %x", info, buf.Len(), sum)
	}
	return buf.Bytes(), info
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	mtime := time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)
	writeFile(t, filepath.Join(src, "a.txt"), "alpha\n", 0o644)
	writeFile(t, filepath.Join(src, "bin", "run.sh"), "#!/bin/sh\necho hi\n", 0o755)
	writeFile(t, filepath.Join(src, "deep", "er", "still", "x"), strings.Repeat("x", 300_000), 0o600)
	writeFile(t, filepath.Join(src, "ro", "file"), "read only", 0o444)
	if err := os.Chtimes(filepath.Join(src, "a.txt"), mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(src, "ro"), 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(src, "ro"), 0o755) })
	if err := os.Mkdir(filepath.Join(src, "empty"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.txt", filepath.Join(src, "rel-link")); err != nil {
		t.Fatal(err)
	}
	// A link out of the workspace is stored as a link, never followed.
	if err := os.Symlink("/etc/hostname", filepath.Join(src, "abs-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("missing", filepath.Join(src, "dangling")); err != nil {
		t.Fatal(err)
	}
	// A link to a directory is not walked into.
	elsewhere := t.TempDir()
	writeFile(t, filepath.Join(elsewhere, "not-mine.txt"), "outside", 0o644)
	if err := os.Symlink(elsewhere, filepath.Join(src, "dir-link")); err != nil {
		t.Fatal(err)
	}
	sock, err := net.Listen("unix", filepath.Join(src, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	want := tree(t, src)
	delete(want, "s.sock")

	archive, info := snap(t, src, Options{})
	if info.Files != 4 || info.Bytes != int64(6+18+300_000+9) || info.Skipped != 1 {
		t.Errorf("info = %+v, want 4 files, %d bytes, 1 skipped (the socket)", info, 6+18+300_000+9)
	}

	// Restoring onto a non-empty workspace replaces it.
	dst := t.TempDir()
	writeFile(t, filepath.Join(dst, "stale.txt"), "old", 0o644)
	writeFile(t, filepath.Join(dst, "a.txt"), "old a", 0o644)
	got, err := Restore(context.Background(), bytes.NewReader(archive), dst, info, Options{})
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(dst, "ro"), 0o755) })
	if got.SHA256 != info.SHA256 || got.Size != info.Size || got.Files != info.Files || got.Bytes != info.Bytes {
		t.Errorf("Restore = %+v, want %+v", got, info)
	}
	compareTrees(t, tree(t, dst), want)
}

// TestWriteFollowsOnlyItsRoot: a workspace reached through a link is
// archived whole.
func TestWriteFollowsOnlyItsRoot(t *testing.T) {
	t.Parallel()
	real := t.TempDir()
	writeFile(t, filepath.Join(real, "f.txt"), "content", 0o644)
	link := filepath.Join(t.TempDir(), "ws")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	_, info := snap(t, link, Options{})
	if info.Files != 1 || info.Bytes != 7 {
		t.Errorf("info = %+v, want the one file behind the link", info)
	}
}

func TestRestoreRefusesAnotherArchive(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "new.txt"), "new", 0o644)
	archive, info := snap(t, src, Options{})

	for name, tc := range map[string]struct {
		archive []byte
		want    api.SnapshotInfo
	}{
		"wrong checksum": {archive, api.SnapshotInfo{Size: info.Size, SHA256: strings.Repeat("0", 64), Bytes: info.Bytes}},
		"wrong size":     {archive, api.SnapshotInfo{Size: info.Size - 1, SHA256: info.SHA256, Bytes: info.Bytes}},
		"truncated":      {archive[:len(archive)/2], info},
		"trailing bytes": {append(bytes.Clone(archive), "junk"...), api.SnapshotInfo{SHA256: info.SHA256, Bytes: info.Bytes}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dst := t.TempDir()
			writeFile(t, filepath.Join(dst, "kept.txt"), "mine", 0o644)
			before := tree(t, dst)
			_, err := Restore(context.Background(), bytes.NewReader(tc.archive), dst, tc.want, Options{})
			if err == nil {
				t.Fatal("Restore accepted it")
			}
			if strings.HasPrefix(name, "wrong") && !errors.Is(err, ErrChecksum) {
				t.Errorf("err = %v, want ErrChecksum", err)
			}
			compareTrees(t, tree(t, dst), before) // left as it was, no temporary directory
		})
	}
}

func TestWriteLimit(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	random := make([]byte, 2<<20)
	rand.NewChaCha8([32]byte{1}).Read(random)
	if err := os.WriteFile(filepath.Join(src, "big"), random, 0o644); err != nil {
		t.Fatal(err)
	}
	const limit = 64 << 10
	var buf bytes.Buffer
	_, err := Write(context.Background(), &buf, src, Options{Limit: limit})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Write = %v, want ErrTooLarge", err)
	}
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Limit != limit || !strings.Contains(err.Error(), "64.0 KiB") {
		t.Errorf("err = %v (%T), want a TooLargeError naming the limit of 64 KiB", err, err)
	}
	if buf.Len() > limit {
		t.Errorf("Write wrote %d bytes, past the limit of %d", buf.Len(), limit)
	}
	// Under the limit it goes through.
	if _, err := Write(context.Background(), &bytes.Buffer{}, src, Options{Limit: 64 << 20}); err != nil {
		t.Errorf("Write under the limit: %v", err)
	}
}

func TestExclude(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "work.txt"), "work", 0o644)
	writeFile(t, filepath.Join(src, ".outpost", "state", "journal"), "source journal", 0o644)
	writeFile(t, filepath.Join(src, ".outpost", "other"), "other", 0o644)
	opts := Options{Exclude: []string{".outpost/state"}}
	archive, info := snap(t, src, opts)

	dst := t.TempDir()
	writeFile(t, filepath.Join(dst, ".outpost", "state", "journal"), "my journal", 0o644)
	writeFile(t, filepath.Join(dst, ".outpost", "stale"), "stale", 0o644)
	if _, err := Restore(context.Background(), bytes.NewReader(archive), dst, info, opts); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"work.txt": "work", ".outpost/other": "other", ".outpost/state/journal": "my journal"} {
		if b, err := os.ReadFile(filepath.Join(dst, p)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", p, b, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dst, ".outpost", "stale")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf(".outpost/stale survived the restore: %v", err)
	}
}

// craft builds an archive of the given headers (files get content "evil").
func craft(t *testing.T, hdrs ...*tar.Header) ([]byte, api.SnapshotInfo) {
	t.Helper()
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(enc)
	var files int64
	for _, h := range hdrs {
		if h.Typeflag == tar.TypeReg {
			h.Size = 4
			files++
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte("evil"))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), api.SnapshotInfo{Size: int64(buf.Len()), SHA256: hex.EncodeToString(sum[:]), Files: files, Bytes: 4 * files}
}

func TestRestoreRefusesPathTraversal(t *testing.T) {
	t.Parallel()
	for name, hdrs := range map[string][]*tar.Header{
		"dot-dot":       {{Name: "../outside.txt", Typeflag: tar.TypeReg}},
		"inner dot-dot": {{Name: "a/../../outside.txt", Typeflag: tar.TypeReg}},
		"absolute":      {{Name: "/OUTSIDE/outside.txt", Typeflag: tar.TypeReg}},
		"through a symlink": {
			{Name: "out", Typeflag: tar.TypeSymlink, Linkname: "/OUTSIDE"},
			{Name: "out/outside.txt", Typeflag: tar.TypeReg},
		},
		"through a relative symlink": {
			{Name: "up", Typeflag: tar.TypeSymlink, Linkname: "../.."},
			{Name: "up/outside.txt", Typeflag: tar.TypeReg},
		},
		"file over a symlink": {
			{Name: "f", Typeflag: tar.TypeSymlink, Linkname: "/OUTSIDE/outside.txt"},
			{Name: "f", Typeflag: tar.TypeReg},
		},
		"hard link out":      {{Name: "h", Typeflag: tar.TypeLink, Linkname: "../outside.txt"}},
		"hard link absolute": {{Name: "h", Typeflag: tar.TypeLink, Linkname: "/OUTSIDE/outside.txt"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			outside := filepath.Join(base, "outside")
			writeFile(t, filepath.Join(outside, "outside.txt"), "untouched", 0o644)
			dst := filepath.Join(base, "ws", "dir")
			writeFile(t, filepath.Join(dst, "kept.txt"), "mine", 0o644)
			for _, h := range hdrs {
				h.Name = strings.ReplaceAll(h.Name, "/OUTSIDE", outside)
				h.Linkname = strings.ReplaceAll(h.Linkname, "/OUTSIDE", outside)
			}
			archive, info := craft(t, hdrs...)
			before := tree(t, dst)
			_, err := Restore(context.Background(), bytes.NewReader(archive), dst, info, Options{})
			if !errors.Is(err, ErrUnsafePath) {
				t.Fatalf("Restore = %v, want ErrUnsafePath", err)
			}
			if b, _ := os.ReadFile(filepath.Join(outside, "outside.txt")); string(b) != "untouched" {
				t.Errorf("the file outside was changed: %q", b)
			}
			for _, p := range []string{filepath.Join(base, "ws", "outside.txt"), filepath.Join(base, "outside.txt")} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s was created", p)
				}
			}
			compareTrees(t, tree(t, dst), before)
		})
	}
}

func TestRestoreCancelled(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "f"), "x", 0o644)
	archive, info := snap(t, src, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dst := t.TempDir()
	if _, err := Restore(ctx, bytes.NewReader(archive), dst, info, Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Restore = %v, want context.Canceled", err)
	}
	if _, err := Write(ctx, &bytes.Buffer{}, src, Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Write = %v, want context.Canceled", err)
	}
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestGitRepositoryRoundTrip: a repository with a commit, a modified file,
// a staged change, an untracked file, a stash and a local branch comes back
// with the same status, branches, stash and contents.
func TestGitRepositoryRoundTrip(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	ws := t.TempDir()
	repo := filepath.Join(ws, "repos", "app")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, repo, "init", "-q", "-b", "main")
	writeFile(t, filepath.Join(repo, "main.go"), "package main\n", 0o644)
	writeFile(t, filepath.Join(repo, "README"), "readme\n", 0o644)
	git(t, repo, "add", ".")
	git(t, repo, "commit", "-q", "-m", "first")
	git(t, repo, "branch", "feature")
	writeFile(t, filepath.Join(repo, "README"), "stashed change\n", 0o644)
	git(t, repo, "stash", "-q")
	writeFile(t, filepath.Join(repo, "main.go"), "package main\n\nfunc main() {}\n", 0o644) // modified
	writeFile(t, filepath.Join(repo, "staged.go"), "package main // staged\n", 0o644)
	git(t, repo, "add", "staged.go")
	writeFile(t, filepath.Join(repo, "untracked.txt"), "untracked\n", 0o644)
	writeFile(t, filepath.Join(ws, "notes", "outside-repo.md"), "notes\n", 0o644)

	status := git(t, repo, "status", "--porcelain=v1", "--branch")
	branches := git(t, repo, "branch", "--list")
	stash := git(t, repo, "stash", "list")
	want := tree(t, ws)
	archive, info := snap(t, ws, Options{})

	dst := filepath.Join(t.TempDir(), "elsewhere")
	if _, err := Restore(context.Background(), bytes.NewReader(archive), dst, info, Options{}); err != nil {
		t.Fatal(err)
	}
	compareTrees(t, tree(t, dst), want) // byte for byte, .git included
	repo2 := filepath.Join(dst, "repos", "app")
	if got := git(t, repo2, "status", "--porcelain=v1", "--branch"); got != status {
		t.Errorf("git status after restore:\n%s\nwant:\n%s", got, status)
	}
	if !strings.Contains(status, "M main.go") || !strings.Contains(status, "A  staged.go") || !strings.Contains(status, "?? untracked.txt") {
		t.Errorf("the test's repository is not in the state it means to test:\n%s", status)
	}
	if got := git(t, repo2, "branch", "--list"); got != branches {
		t.Errorf("branches = %q, want %q", got, branches)
	}
	if got := git(t, repo2, "stash", "list"); got != stash || stash == "" {
		t.Errorf("stash = %q, want %q", got, stash)
	}
	if got := git(t, repo2, "stash", "show", "-p"); !strings.Contains(got, "+stashed change") {
		t.Errorf("stash show = %q", got)
	}
	git(t, repo2, "fsck", "--no-progress")
}
