//go:build linux || darwin

package snapshot

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/outpost-sh/outpost/api"
)

// diskUsage is the space the file at path takes on its disk.
func diskUsage(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// fileSum is the SHA-256 of the file at path.
func fileSum(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// makeSparse creates a file of size bytes holding data at each offset of
// at, holes elsewhere.
func makeSparse(t *testing.T, path string, size int64, at map[int64][]byte) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for off, b := range at {
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
}

func randomBytes(n int, seed byte) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{seed}).Read(b)
	return b
}

// TestSparseFileRoundTrip: a file of 256 MiB with a few KiB of data in
// holes comes back with the same contents and the same few KiB on disk, not
// 256 MiB of zeros; so does one that ends in a hole. (Write still reads and
// compresses the zeros, so a larger file only makes the test slower.)
func TestSparseFileRoundTrip(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	const big = 1 << 28
	makeSparse(t, filepath.Join(src, "disk.img"), big, map[int64][]byte{
		0:               randomBytes(4096, 1),
		128<<20 + 100:   randomBytes(3000, 2), // across a block boundary
		big - 1000:      randomBytes(1000, 3), // the very end
		200<<20 + 65536: {0, 0, 0, 1},         // one byte that is not zero
	})
	makeSparse(t, filepath.Join(src, "tail-hole"), 64<<20, map[int64][]byte{10: []byte("head")})
	writeFile(t, filepath.Join(src, "dense.txt"), strings.Repeat("dense\n", 10_000), 0o644)
	for _, name := range []string{"disk.img", "tail-hole"} {
		if u := diskUsage(t, filepath.Join(src, name)); u > 1<<20 {
			t.Skipf("this file system does not keep holes (%s uses %d bytes)", name, u)
		}
	}

	archive, info := snap(t, src, Options{})
	if want := int64(big + 64<<20 + 60_000); info.Bytes != want || info.Files != 3 {
		t.Errorf("info = %+v, want 3 files of %d bytes", info, want)
	}
	t.Logf("%d bytes of files (%d of data) archived in %d bytes", info.Bytes, 4096+3000+1000+4+4+60_000, info.Size)

	dst := t.TempDir()
	got, err := Restore(context.Background(), bytes.NewReader(archive), dst, info, Options{})
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if got.Bytes != info.Bytes || got.Files != info.Files {
		t.Errorf("Restore = %+v, want %+v", got, info)
	}
	for _, name := range []string{"disk.img", "tail-hole", "dense.txt"} {
		s, d := filepath.Join(src, name), filepath.Join(dst, name)
		if fileSum(t, d) != fileSum(t, s) {
			t.Errorf("%s differs after the restore", name)
		}
		ss, _ := os.Stat(s)
		ds, _ := os.Stat(d)
		if ss.Size() != ds.Size() {
			t.Errorf("%s: %d bytes, want %d", name, ds.Size(), ss.Size())
		}
		t.Logf("%s: %d bytes, %d on disk before, %d after", name, ss.Size(), diskUsage(t, s), diskUsage(t, d))
		if name != "dense.txt" && diskUsage(t, d) > 1<<20 {
			t.Errorf("%s takes %d bytes on disk after the restore, want its few KiB of data (%d before)", name, diskUsage(t, d), diskUsage(t, s))
		}
	}
}

// archiveOf builds an archive of regular files with the given contents, in
// order, and describes it as recorded with files and bytes.
func archiveOf(t *testing.T, files []string, contents [][]byte, recordFiles, recordBytes int64) ([]byte, api.SnapshotInfo) {
	t.Helper()
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(enc)
	for i, name := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(contents[i]))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(contents[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), api.SnapshotInfo{Size: int64(buf.Len()), SHA256: hex.EncodeToString(sum[:]), Files: recordFiles, Bytes: recordBytes}
}

// TestRestoreRefusesMoreThanRecorded: an archive of a few KiB whose files
// expand past the size its record claims is refused before their data is
// written, and the workspace is left as it was.
func TestRestoreRefusesMoreThanRecorded(t *testing.T) {
	t.Parallel()
	bomb := bytes.Repeat([]byte("A"), 256<<20)
	for name, tc := range map[string]struct {
		files    []string
		contents [][]byte
		bytes    int64
	}{
		"one file":           {[]string{"bomb"}, [][]byte{bomb}, 4},
		"the sum of several": {[]string{"a", "b", "c"}, [][]byte{[]byte("aaaa"), []byte("bbbb"), bomb[:1<<20]}, 8 + 1<<19},
		"recorded as empty":  {[]string{"bomb"}, [][]byte{bomb}, 0},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			archive, want := archiveOf(t, tc.files, tc.contents, int64(len(tc.files)), tc.bytes)
			dst := t.TempDir()
			writeFile(t, filepath.Join(dst, "kept.txt"), "mine", 0o644)
			before := tree(t, dst)
			_, err := Restore(context.Background(), bytes.NewReader(archive), dst, want, Options{})
			if !errors.Is(err, ErrExpands) {
				t.Fatalf("Restore of %d bytes recorded as %d = %v, want ErrExpands", len(archive), tc.bytes, err)
			}
			if !strings.Contains(err.Error(), "left as it was") {
				t.Errorf("the error does not say what became of the workspace: %v", err)
			}
			compareTrees(t, tree(t, dst), before)
		})
	}
}

// mountTmpfs mounts a tmpfs of size bytes on a new directory, for tests run
// as root; it skips the test otherwise.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small file system needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// used is the space taken on the file system holding dir.
func used(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks-st.Bfree) * int64(st.Bsize)
}

// TestRestoreChecksFreeSpace: a snapshot whose data does not fit the free
// space of the workspace's file system is refused with ErrNoSpace, the
// workspace left as it was and nothing left behind; one whose files are
// larger than the free space but mostly holes fits.
func TestRestoreChecksFreeSpace(t *testing.T) {
	t.Parallel()
	fsDir := mountTmpfs(t, "16m")
	ws := filepath.Join(fsDir, "ws")
	writeFile(t, filepath.Join(ws, "kept.txt"), "mine", 0o644)
	before := tree(t, ws)
	usedBefore := used(t, fsDir)

	src := t.TempDir()
	writeFile(t, filepath.Join(src, "big.bin"), strings.Repeat("not a hole ", 3<<20), 0o644) // 33 MiB
	archive, info := snap(t, src, Options{})
	_, err := Restore(context.Background(), bytes.NewReader(archive), ws, info, Options{})
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Restore of %d bytes of files into 16 MiB = %v, want ErrNoSpace", info.Bytes, err)
	}
	if !strings.Contains(err.Error(), "free") || !strings.Contains(err.Error(), "left as it was") {
		t.Errorf("the error does not say what is missing and what became of the workspace: %v", err)
	}
	compareTrees(t, tree(t, ws), before)
	if u := used(t, fsDir); u > usedBefore+64<<10 {
		t.Errorf("the refused restore left %d bytes behind", u-usedBefore)
	}

	sparse := t.TempDir()
	const huge = 256 << 20
	makeSparse(t, filepath.Join(sparse, "huge.img"), huge, map[int64][]byte{huge / 2: []byte("data")})
	archive, info = snap(t, sparse, Options{})
	if _, err := Restore(context.Background(), bytes.NewReader(archive), ws, info, Options{}); err != nil {
		t.Fatalf("Restore of a 256 MiB file of holes into 16 MiB: %v", err)
	}
	f, err := os.Open(filepath.Join(ws, "huge.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 4)
	if fi, err := f.Stat(); err != nil || fi.Size() != huge {
		t.Errorf("huge.img after the restore: %v, %v", fi, err)
	}
	if _, err := f.ReadAt(b, huge/2); err != nil || string(b) != "data" {
		t.Errorf("huge.img holds %q at its middle (%v)", b, err)
	}
}

// roTree makes a read-only tree under dir as `chmod -R a-w` leaves a Go
// module cache.
func roTree(t *testing.T, dir string) {
	t.Helper()
	writeFile(t, filepath.Join(dir, "cache", "download", "example.com", "m", "@v", "v1.0.0.zip"), "zip", 0o644)
	writeFile(t, filepath.Join(dir, "example.com", "m@v1.0.0", "go.mod"), "module example.com/m\n", 0o644)
	writeFile(t, filepath.Join(dir, "example.com", "m@v1.0.0", "sub", "m.go"), "package m\n", 0o644)
	if err := os.Symlink("m@v1.0.0", filepath.Join(dir, "example.com", "latest")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chmod", "-R", "a-w", dir).CombinedOutput(); err != nil {
		t.Fatalf("chmod -R a-w: %v: %s", err, out)
	}
}

// TestReadOnlyTreeRoundTrip: a workspace holding a read-only tree (a Go
// module cache) is restored, unprivileged, over a workspace that holds one
// too, with every mode as it was.
func TestReadOnlyTreeRoundTrip(t *testing.T) {
	t.Parallel()
	u := asUnprivileged(t)
	src := u.dir(t)
	writeFile(t, filepath.Join(src, "main.go"), "package main\n", 0o644)
	roTree(t, filepath.Join(src, "gomod"))
	want := tree(t, src)
	archive, info := snap(t, src, Options{})

	dst := u.dir(t)
	writeFile(t, filepath.Join(dst, "old.txt"), "from before", 0o644)
	roTree(t, filepath.Join(dst, "gomod"))
	roTree(t, filepath.Join(dst, "other-cache"))
	u.own(t, dst)
	got, errText := u.restore(t, archive, dst, info)
	if errText != "" {
		t.Fatalf("Restore as uid %d: %s", u.uid, errText)
	}
	if got.Files != info.Files {
		t.Errorf("Restore = %+v, want %+v", got, info)
	}
	compareTrees(t, tree(t, dst), want)
	if fi, err := os.Stat(filepath.Join(dst, "gomod", "example.com", "m@v1.0.0")); err != nil || fi.Mode().Perm() != 0o555 {
		t.Errorf("the read-only directory came back as %v (%v)", fi.Mode(), err)
	}
}

// TestFailedRestorePutsTheWorkspaceBack: a restore that fails half-way
// through replacing the workspace (an entry it may not move: a directory of
// another user) puts back what it had moved, and leaves nothing of its own.
func TestFailedRestorePutsTheWorkspaceBack(t *testing.T) {
	t.Parallel()
	u := asUnprivileged(t)
	if u.bin == "" {
		t.Skip("needs root to give the workspace a directory of another user")
	}
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "new.txt"), "from the snapshot", 0o644)
	archive, info := snap(t, src, Options{})

	dst := u.dir(t)
	writeFile(t, filepath.Join(dst, "a-first.txt"), "mine", 0o644)
	roTree(t, filepath.Join(dst, "a-gomod"))
	writeFile(t, filepath.Join(dst, "c-last.txt"), "mine too", 0o644)
	u.own(t, dst)
	// b-locked is root's: nobody can neither move it nor make it writable.
	writeFile(t, filepath.Join(dst, "b-locked", "f"), "root's", 0o644)
	before := tree(t, dst)

	_, errText := u.restore(t, archive, dst, info)
	if errText == "" {
		t.Fatal("Restore replaced a workspace holding a directory it may not move")
	}
	if !strings.Contains(errText, "put back as it was") {
		t.Errorf("the error does not say the workspace was put back: %s", errText)
	}
	compareTrees(t, tree(t, dst), before)
	if entries, _ := os.ReadDir(dst); len(entries) != 4 {
		t.Errorf("%d entries in the workspace after the failed restore, want the 4 it had", len(entries))
	}
}

// TestKeepsRestoreLookalikes: top-level entries named like Restore's
// temporary directories are the workspace's: archived and restored.
func TestKeepsRestoreLookalikes(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	writeFile(t, filepath.Join(src, oldPrefix+"notes", "n.txt"), "notes", 0o644)
	writeFile(t, filepath.Join(src, restorePrefix+"123"), "a file", 0o644)
	writeFile(t, filepath.Join(src, "work.txt"), "work", 0o644)
	want := tree(t, src)
	archive, info := snap(t, src, Options{})
	if info.Files != 3 {
		t.Errorf("info = %+v, want 3 files", info)
	}
	dst := t.TempDir()
	writeFile(t, filepath.Join(dst, oldPrefix+"stale"), "stale", 0o644)
	if _, err := Restore(context.Background(), bytes.NewReader(archive), dst, info, Options{}); err != nil {
		t.Fatal(err)
	}
	compareTrees(t, tree(t, dst), want)
}
