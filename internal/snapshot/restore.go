package snapshot

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// Temporary directories Restore makes inside the directory it restores.
const (
	restorePrefix = ".outpost-restore-"
	oldPrefix     = ".outpost-old-"
)

// ErrChecksum is matched (errors.Is) by the error Restore returns when the
// archive read is not the one wanted: another size or SHA-256.
var ErrChecksum = errors.New("workspace snapshot checksum mismatch")

// ErrExpands is matched (errors.Is) by the error Restore returns for an
// archive whose files add up to more than the snapshot's recorded size
// (api.SnapshotInfo.Bytes).
var ErrExpands = errors.New("workspace snapshot expands beyond its recorded size")

// ErrNoSpace is matched (errors.Is) by the error Restore returns when the
// files would not fit the free space of the workspace's file system.
var ErrNoSpace = errors.New("not enough free space to restore the workspace snapshot")

// ErrUnsafePath is matched (errors.Is) by the error Restore returns for an
// archive entry that would land outside the directory: a name with "..",
// an absolute name, a hard link to outside, or an entry under a symbolic
// link.
var ErrUnsafePath = errors.New("workspace snapshot entry escapes the workspace")

// Restore replaces the contents of dir with the snapshot read from r, which
// must be the archive want describes (want.SHA256 is required; want.Size is
// checked when set). It returns what it restored: the Size and SHA256 read,
// Files, Bytes, Skipped (entries of types it does not create) and how long
// it took. dir is created when missing.
//
// Restore extracts into a temporary directory inside dir while it hashes
// the compressed stream, and touches dir's own entries only once the whole
// archive was read and matched want: then it moves dir's entries aside,
// moves the extracted ones in and deletes the old ones. On any error dir is
// left as it was: before the moves nothing of it was touched, and a move
// that fails half-way (an entry of another user that may not be moved)
// puts back what had been moved. Extracting first, rather than downloading
// the archive to a temporary file to verify it and then extracting, reads
// and writes the data once; the temporary directory lies inside dir so that
// every move is a rename within one file system, even when dir is a mount
// point (a container's volume) whose parent cannot be written.
//
// What Restore writes is bounded before it is written: the files may add
// up to want.Bytes, the size the snapshot recorded when it was taken (an
// archive that expands beyond it is refused, ErrExpands), and their data
// must fit the space free on dir's file system, measured before the
// restore starts, less a reserve (ErrNoSpace). Blocks of zeros are not
// written but left as holes, so a sparse file comes back sparse, taking the
// space of its data only.
//
// Directories get their modes once everything is in place, so that a
// read-only tree (a Go module cache after chmod -R a-w) neither stops the
// extraction nor the moves; an old workspace's read-only directories are
// made writable to be moved aside and deleted.
//
// opts.Exclude names paths of dir that are neither removed nor replaced;
// entries of the archive under them are not extracted. opts.Limit bounds
// the archive read when want.Size is zero.
//
// Entries never leave dir: a name with a ".." element or an absolute name,
// a hard link to a path outside, or any entry whose path goes through a
// symbolic link is refused (ErrUnsafePath) and nothing is restored. A
// symbolic link itself is restored as it was archived, whatever its target
// (a Python virtualenv links bin/python to /usr/bin/python3): it is data,
// never followed while restoring. Modes keep their permission bits only;
// owners are not restored.
func Restore(ctx context.Context, r io.Reader, dir string, want api.SnapshotInfo, opts Options) (api.SnapshotInfo, error) {
	start := time.Now()
	var info api.SnapshotInfo
	if want.SHA256 == "" {
		return info, fmt.Errorf("restore snapshot into %s: no checksum to verify it against", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return info, fmt.Errorf("restore snapshot: %w", err)
	}
	tmp, err := os.MkdirTemp(dir, restorePrefix)
	if errors.Is(err, fs.ErrPermission) && makeWritable(dir) == nil {
		// The workspace itself was made read-only; its own mode is no
		// part of the snapshot.
		tmp, err = os.MkdirTemp(dir, restorePrefix)
	}
	if err != nil {
		return info, fmt.Errorf("restore snapshot: %w", err)
	}
	defer removeTree(tmp)

	x := &extractor{root: tmp, buf: make([]byte, copyBufSize), maxBytes: want.Bytes, budget: -1}
	if free, total, err := freeSpace(dir); err == nil {
		x.budget = max(free-reserve(total), 0)
		x.free = free
	}
	limit := want.Size
	if limit <= 0 {
		limit = opts.Limit
	}
	cr := &countReader{r: r, hash: sha256.New(), limit: limit}
	if err := extract(ctx, cr, x, opts, &info); err != nil {
		if cr.err != nil { // the archive's own reader failed or ran over
			err = cr.err
		}
		return info, fmt.Errorf("restore snapshot into %s: %w; the workspace was left as it was", dir, err)
	}
	info.Size = cr.n
	info.SHA256 = hex.EncodeToString(cr.hash.Sum(nil))
	if info.SHA256 != want.SHA256 || want.Size > 0 && info.Size != want.Size {
		return info, fmt.Errorf("restore snapshot into %s: %w: read %d bytes with SHA-256 %s, want %d bytes with %s; the workspace was left as it was",
			dir, ErrChecksum, info.Size, info.SHA256, want.Size, want.SHA256)
	}
	if err := swap(dir, tmp, opts); err != nil {
		return info, fmt.Errorf("restore snapshot into %s: %w", dir, err)
	}
	if err := setDirMeta(dir, x.dirs, opts); err != nil {
		return info, fmt.Errorf("restore snapshot into %s: the files are in place, but a directory's mode or time could not be set: %w", dir, err)
	}
	info.DurationMS = time.Since(start).Milliseconds()
	return info, nil
}

// dirMeta is a directory's mode and mtime, applied once the restored
// workspace is in place.
type dirMeta struct {
	rel   string // slash-separated, relative to the workspace
	mode  fs.FileMode
	mtime time.Time
}

// extract unpacks the archive read from cr into x.root and reads cr to its
// end, so that its hash covers the whole stream.
func extract(ctx context.Context, cr *countReader, x *extractor, opts Options, info *api.SnapshotInfo) error {
	dec, err := newDecoder(cr)
	if err != nil {
		return err
	}
	defer dec.Close()
	tr := tar.NewReader(dec)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		name, err := entryName(hdr.Name)
		if err != nil {
			return err
		}
		if opts.excluded(name) {
			continue
		}
		if err := x.entry(tr, hdr, name, info); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	// What follows the tar's end (zstd padding, a trailing frame) is part
	// of the archive as hashed.
	if _, err := io.CopyBuffer(io.Discard, dec, x.buf); err != nil {
		return fmt.Errorf("read archive: %w", err)
	}
	if _, err := io.CopyBuffer(io.Discard, cr, x.buf); err != nil {
		return fmt.Errorf("read archive: %w", err)
	}
	return nil
}

// setDirMeta gives the restored directories their modes and mtimes,
// children first (reverse lexical order), so that a read-only directory
// gets its mode after its entries are in. Directories that hold excluded
// paths were kept as they were (the remote's state lies under them).
func setDirMeta(dir string, dirs []dirMeta, opts Options) error {
	for _, d := range slices.Backward(dirs) {
		if opts.holdsExcluded(d.rel) {
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(d.rel))
		if err := os.Chmod(p, d.mode); err != nil {
			return err
		}
		if err := os.Chtimes(p, time.Time{}, d.mtime); err != nil {
			return err
		}
	}
	return nil
}

// entryName checks an archive entry's name and returns it cleaned.
func entryName(raw string) (string, error) {
	name := strings.TrimSuffix(raw, "/")
	if name == "" || strings.HasPrefix(name, "/") || !filepath.IsLocal(name) || slices.Contains(strings.Split(name, "/"), "..") {
		return "", fmt.Errorf("%w: %q", ErrUnsafePath, raw)
	}
	return path.Clean(name), nil
}

// extractor creates entries under root.
type extractor struct {
	root string
	buf  []byte
	dirs []dirMeta
	// checked is the last directory known to be a real directory under
	// root (no symbolic link on the way), relative: consecutive entries
	// mostly share their parent.
	checked string
	// maxBytes is the size the snapshot recorded for its files: the sum
	// of their sizes may not exceed it.
	maxBytes int64
	// bytes is the sum of the sizes of the files extracted so far.
	bytes int64
	// budget is how much data may be written (the free space less a
	// reserve), free the free space measured; -1 when unknown.
	budget, free int64
	// written is how much data was written: the files' bytes but their
	// holes.
	written int64
}

func (x *extractor) entry(tr *tar.Reader, hdr *tar.Header, name string, info *api.SnapshotInfo) error {
	target := filepath.Join(x.root, filepath.FromSlash(name))
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := x.ensureDir(name); err != nil {
			return err
		}
		x.dirs = append(x.dirs, dirMeta{rel: name, mode: fs.FileMode(hdr.Mode).Perm(), mtime: hdr.ModTime})
		return nil
	case tar.TypeReg:
		if hdr.Size > x.maxBytes-x.bytes {
			return fmt.Errorf("%w: its files hold more than the %d bytes (%s) recorded when it was taken", ErrExpands, x.maxBytes, humanBytes(x.maxBytes))
		}
		x.bytes += hdr.Size
		if err := x.ensureDir(path.Dir(name)); err != nil {
			return err
		}
		f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL|noFollow, 0o600)
		if errors.Is(err, fs.ErrExist) { // never write through what an earlier entry made
			return fmt.Errorf("%w: %q is in the archive twice", ErrUnsafePath, name)
		}
		if err != nil {
			return err
		}
		err = x.copySparse(f, tr, hdr.Size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if err := os.Chmod(target, fs.FileMode(hdr.Mode).Perm()); err != nil {
			return err
		}
		if err := os.Chtimes(target, time.Time{}, hdr.ModTime); err != nil {
			return err
		}
		info.Files++
		info.Bytes += hdr.Size
		return nil
	case tar.TypeSymlink:
		if err := x.ensureDir(path.Dir(name)); err != nil {
			return err
		}
		return os.Symlink(hdr.Linkname, target)
	case tar.TypeLink:
		src, err := entryName(hdr.Linkname)
		if err != nil {
			return err
		}
		if err := x.ensureDir(path.Dir(src)); err != nil {
			return err
		}
		srcPath := filepath.Join(x.root, filepath.FromSlash(src))
		if fi, err := os.Lstat(srcPath); err != nil || !fi.Mode().IsRegular() {
			return fmt.Errorf("%w: hard link to %q, not a file extracted before it", ErrUnsafePath, hdr.Linkname)
		}
		if err := x.ensureDir(path.Dir(name)); err != nil {
			return err
		}
		if err := os.Link(srcPath, target); err != nil {
			return err
		}
		info.Files++
		return nil
	}
	info.Skipped++ // devices, pipes: Write never archives them
	return nil
}

// holeBlock is the unit of the holes Restore leaves: a block of the file,
// at an offset that is a multiple of it, holding only zeros is not written.
// File systems allocate in blocks of this size or a multiple of it.
const holeBlock = 4096

var zeroBlock [holeBlock]byte

// copySparse copies the size bytes of r to the new, empty file f, writing
// only the blocks that are not all zeros, and gives f its size: the blocks
// of zeros are holes. Each write is checked against the budget first.
func (x *extractor) copySparse(f *os.File, r io.Reader, size int64) error {
	var off int64
	for off < size {
		n, err := io.ReadFull(r, x.buf[:min(int64(len(x.buf)), size-off)])
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		chunk := x.buf[:n]
		// Write each run of blocks that are not all zeros in one piece.
		runStart, runEnd := 0, 0
		for i := 0; i < n; {
			end := min(i+holeBlock-int((off+int64(i))%holeBlock), n)
			if bytes.Equal(chunk[i:end], zeroBlock[:end-i]) {
				if err := x.writeRun(f, chunk[runStart:runEnd], off+int64(runStart)); err != nil {
					return err
				}
				runStart = end
			}
			runEnd = end
			i = end
		}
		if err := x.writeRun(f, chunk[runStart:runEnd], off+int64(runStart)); err != nil {
			return err
		}
		off += int64(n)
	}
	return f.Truncate(size) // a file that ends in a hole
}

// writeRun writes b at off unless it would take the data written past the
// budget.
func (x *extractor) writeRun(f *os.File, b []byte, off int64) error {
	if len(b) == 0 {
		return nil
	}
	if x.budget >= 0 && int64(len(b)) > x.budget-x.written {
		return fmt.Errorf("%w: its files need more than the %s free on the workspace's file system (%s of it kept free); free some space on the machine",
			ErrNoSpace, humanBytes(x.budget), humanBytes(x.free-x.budget))
	}
	if _, err := f.WriteAt(b, off); err != nil {
		return err
	}
	x.written += int64(len(b))
	return nil
}

// ensureDir makes rel a directory under root, creating what is missing,
// and refuses a path through a symbolic link or a file.
func (x *extractor) ensureDir(rel string) error {
	if rel == "." || rel == x.checked || strings.HasPrefix(x.checked, rel+"/") {
		return nil
	}
	p := x.root
	for _, el := range strings.Split(rel, "/") {
		p = filepath.Join(p, el)
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(p, 0o700); err != nil {
				return err
			}
		case err != nil:
			return err
		case fi.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("%w: %q goes through the symbolic link %q", ErrUnsafePath, rel, el)
		case !fi.IsDir():
			return fmt.Errorf("%w: %q goes through the file %q", ErrUnsafePath, rel, el)
		}
	}
	x.checked = rel
	return nil
}

// reserve is the free space a restore leaves on a file system of total
// bytes: 2%, at most 1 GiB, so that restoring a workspace does not fill the
// disk its machine runs on.
func reserve(total int64) int64 {
	return min(total/50, 1<<30)
}

// swap moves dir's entries (but tmp and the excluded paths) aside, tmp's
// entries into dir, and deletes the old ones. When a move fails it moves
// back what it had moved, so that dir is as it was.
func swap(dir, tmp string, opts Options) error {
	old, err := os.MkdirTemp(dir, oldPrefix)
	if err != nil {
		return fmt.Errorf("%w; the workspace was left as it was", err)
	}
	m := &mover{dir: dir, tmp: tmp, old: old, opts: opts, skip: map[string]bool{filepath.Base(tmp): true, filepath.Base(old): true}}
	err = m.moveOut("")
	if err != nil {
		err = fmt.Errorf("move the old workspace aside: %w", err)
	} else if err = m.moveIn(""); err != nil {
		err = fmt.Errorf("move the restored workspace in: %w", err)
	}
	if err != nil {
		if uerr := m.undo(); uerr != nil {
			return fmt.Errorf("%w; putting the workspace back failed too (what is missing from it is in %s): %v", err, old, uerr)
		}
		_ = removeTree(old) // empty but for the directories made for kept ones
		return fmt.Errorf("%w; the workspace was put back as it was", err)
	}
	// The workspace is restored; an old entry that cannot be deleted stays
	// in old, which is from now on part of the workspace.
	_ = removeTree(old)
	return nil
}

// mover moves a workspace's entries aside and a restored one's in, and
// remembers each move to undo it.
type mover struct {
	dir, tmp, old string
	opts          Options
	skip          map[string]bool // top-level names not to move: tmp's and old's
	out           []movedOut      // dir → old, in order
	in            []string        // tmp → dir, in order
}

// movedOut is an entry moved from dir to old; mode, when set, is the mode
// it had before it was made writable to be moved.
type movedOut struct {
	rel  string
	mode fs.FileMode
}

// moveOut moves the entries of dir/rel into old/rel, descending into the
// directories that hold excluded paths.
func (m *mover) moveOut(rel string) error {
	entries, err := os.ReadDir(filepath.Join(m.dir, rel))
	if err != nil {
		return err
	}
	for _, e := range entries {
		if rel == "" && m.skip[e.Name()] {
			continue
		}
		r := path.Join(rel, e.Name())
		if m.opts.excluded(r) {
			continue
		}
		if e.IsDir() && m.opts.holdsExcluded(r) {
			if err := os.MkdirAll(filepath.Join(m.old, r), 0o700); err != nil {
				return err
			}
			if err := m.moveOut(r); err != nil {
				return err
			}
			continue
		}
		src := filepath.Join(m.dir, r)
		var mode fs.FileMode
		if e.IsDir() {
			// Moving a directory to another parent rewrites its ".."
			// entry: it must be writable (unless the mover is root).
			fi, err := e.Info()
			if err != nil {
				return err
			}
			if fi.Mode().Perm()&0o200 == 0 {
				if err := os.Chmod(src, fi.Mode().Perm()|0o700); err != nil {
					return err
				}
				mode = fi.Mode().Perm() | fs.ModeDir
			}
		}
		if err := os.Rename(src, filepath.Join(m.old, r)); err != nil {
			if mode != 0 {
				_ = os.Chmod(src, mode.Perm())
			}
			return err
		}
		m.out = append(m.out, movedOut{rel: r, mode: mode})
	}
	return nil
}

// moveIn moves the entries of tmp/rel into dir/rel, merging into the
// directories moveOut kept (those holding excluded paths). The restored
// directories are all writable yet (setDirMeta gives them their modes).
func (m *mover) moveIn(rel string) error {
	entries, err := os.ReadDir(filepath.Join(m.tmp, rel))
	if err != nil {
		return err
	}
	for _, e := range entries {
		r := path.Join(rel, e.Name())
		if m.opts.excluded(r) {
			continue
		}
		dst := filepath.Join(m.dir, r)
		if fi, err := os.Lstat(dst); err == nil {
			if fi.IsDir() && e.IsDir() {
				if err := m.moveIn(r); err != nil {
					return err
				}
			}
			continue // a kept directory stays what it is
		}
		if err := os.Rename(filepath.Join(m.tmp, r), dst); err != nil {
			return err
		}
		m.in = append(m.in, r)
	}
	return nil
}

// undo moves what moveIn moved back to tmp and what moveOut moved back to
// dir, latest first, with the modes they had.
func (m *mover) undo() error {
	var errs []error
	for _, r := range slices.Backward(m.in) {
		if err := os.Rename(filepath.Join(m.dir, r), filepath.Join(m.tmp, r)); err != nil {
			errs = append(errs, err)
		}
	}
	for _, o := range slices.Backward(m.out) {
		dst := filepath.Join(m.dir, o.rel)
		if err := os.Rename(filepath.Join(m.old, o.rel), dst); err != nil {
			errs = append(errs, err)
			continue
		}
		if o.mode != 0 {
			if err := os.Chmod(dst, o.mode.Perm()); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// makeWritable gives the directory p write and search permission for its
// owner.
func makeWritable(p string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", p)
	}
	return os.Chmod(p, fi.Mode().Perm()|0o700)
}

// removeTree removes the tree at p, making its directories writable when
// they are not (a read-only tree of the old workspace): as its owner
// unlinking what they hold needs it. The tree is Restore's own temporary
// directory, or the old workspace moved into one; nothing is followed.
func removeTree(p string) error {
	if err := os.RemoveAll(p); err == nil {
		return nil
	}
	_ = filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		// Called for a directory before it is read: made readable
		// first, its entries are listed.
		if err == nil && d.IsDir() {
			_ = os.Chmod(q, 0o700)
		}
		return nil
	})
	return os.RemoveAll(p)
}

// countReader reads from r, hashing and counting, and fails once more than
// limit bytes came (when limit > 0).
type countReader struct {
	r     io.Reader
	hash  hash.Hash
	n     int64
	limit int64
	err   error // the reader's own failure or the overrun, not io.EOF
}

func (c *countReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.r.Read(p)
	c.hash.Write(p[:n])
	c.n += int64(n)
	if c.limit > 0 && c.n > c.limit {
		c.err = fmt.Errorf("%w: the archive is longer than the %d bytes expected", ErrChecksum, c.limit)
		return n, c.err
	}
	if err != nil && err != io.EOF {
		c.err = err
	}
	return n, err
}
