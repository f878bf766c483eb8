package snapshot

import (
	"archive/tar"
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
// moves the extracted ones in and deletes the old ones. On any error before
// that dir is left as it was. Extracting first, rather than downloading the
// archive to a temporary file to verify it and then extracting, reads and
// writes the data once; the temporary directory lies inside dir so that
// every move is a rename within one filesystem, even when dir is a mount
// point (a container's volume) whose parent cannot be written.
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
	if err != nil {
		return info, fmt.Errorf("restore snapshot: %w", err)
	}
	defer os.RemoveAll(tmp)

	limit := want.Size
	if limit <= 0 {
		limit = opts.Limit
	}
	cr := &countReader{r: r, hash: sha256.New(), limit: limit}
	if err := extract(ctx, cr, tmp, opts, &info); err != nil {
		if cr.err != nil { // the archive's own reader failed or ran over
			err = cr.err
		}
		return info, fmt.Errorf("restore snapshot into %s: %w", dir, err)
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
	info.DurationMS = time.Since(start).Milliseconds()
	return info, nil
}

// dirMeta is a directory's mode and mtime, applied once its children are in.
type dirMeta struct {
	path  string
	mode  fs.FileMode
	mtime time.Time
}

// extract unpacks the archive read from cr into root and reads cr to its
// end, so that its hash covers the whole stream.
func extract(ctx context.Context, cr *countReader, root string, opts Options, info *api.SnapshotInfo) error {
	dec, err := newDecoder(cr)
	if err != nil {
		return err
	}
	defer dec.Close()
	tr := tar.NewReader(dec)
	x := &extractor{root: root, buf: make([]byte, copyBufSize)}
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
	// Children first (reverse lexical order), so a read-only directory
	// gets its mode after its entries are in.
	for _, d := range slices.Backward(x.dirs) {
		if err := os.Chmod(d.path, d.mode); err != nil {
			return err
		}
		if err := os.Chtimes(d.path, time.Time{}, d.mtime); err != nil {
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
}

func (x *extractor) entry(tr *tar.Reader, hdr *tar.Header, name string, info *api.SnapshotInfo) error {
	target := filepath.Join(x.root, filepath.FromSlash(name))
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := x.ensureDir(name); err != nil {
			return err
		}
		x.dirs = append(x.dirs, dirMeta{path: target, mode: fs.FileMode(hdr.Mode).Perm(), mtime: hdr.ModTime})
		return nil
	case tar.TypeReg:
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
		n, err := io.CopyBuffer(f, tr, x.buf)
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
		info.Bytes += n
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

// swap moves dir's entries (but tmp and the excluded paths) aside, tmp's
// entries into dir, and deletes the old ones.
func swap(dir, tmp string, opts Options) error {
	old, err := os.MkdirTemp(dir, oldPrefix)
	if err != nil {
		return err
	}
	skip := map[string]bool{filepath.Base(tmp): true, filepath.Base(old): true}
	if err := moveOut(dir, old, "", opts, skip); err != nil {
		return fmt.Errorf("move the old workspace aside (what was moved is in %s): %w", old, err)
	}
	if err := moveIn(tmp, dir, "", opts); err != nil {
		return fmt.Errorf("move the restored workspace in (the old one is in %s): %w", old, err)
	}
	return os.RemoveAll(old)
}

// moveOut moves the entries of dir/rel into old/rel, descending into the
// directories that hold excluded paths.
func moveOut(dir, old, rel string, opts Options, skip map[string]bool) error {
	entries, err := os.ReadDir(filepath.Join(dir, rel))
	if err != nil {
		return err
	}
	for _, e := range entries {
		if rel == "" && (skip[e.Name()] || strings.HasPrefix(e.Name(), restorePrefix) || strings.HasPrefix(e.Name(), oldPrefix)) {
			continue
		}
		r := path.Join(rel, e.Name())
		if opts.excluded(r) {
			continue
		}
		if e.IsDir() && opts.holdsExcluded(r) {
			if err := os.MkdirAll(filepath.Join(old, r), 0o700); err != nil {
				return err
			}
			if err := moveOut(dir, old, r, opts, nil); err != nil {
				return err
			}
			continue
		}
		if err := os.Rename(filepath.Join(dir, r), filepath.Join(old, r)); err != nil {
			return err
		}
	}
	return nil
}

// moveIn moves the entries of tmp/rel into dir/rel, merging into the
// directories moveOut kept (those holding excluded paths).
func moveIn(tmp, dir, rel string, opts Options) error {
	entries, err := os.ReadDir(filepath.Join(tmp, rel))
	if err != nil {
		return err
	}
	for _, e := range entries {
		r := path.Join(rel, e.Name())
		if opts.excluded(r) {
			continue
		}
		dst := filepath.Join(dir, r)
		if fi, err := os.Lstat(dst); err == nil {
			if fi.IsDir() && e.IsDir() {
				if err := moveIn(tmp, dir, r, opts); err != nil {
					return err
				}
			}
			continue // a kept directory stays what it is
		}
		if err := os.Rename(filepath.Join(tmp, r), dst); err != nil {
			return err
		}
	}
	return nil
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
