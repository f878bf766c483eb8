package snapshot

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// copyBufSize is the buffer each file is copied through.
const copyBufSize = 256 << 10

// Write streams a snapshot of dir into w: a tar of every entry under dir
// (dir itself not included), compressed with zstd. It returns the archive's
// Size and SHA256 (of the bytes written to w), the number of regular files
// and their total size (Files, Bytes), the number of entries skipped
// (sockets, devices, named pipes) and how long it took.
//
// dir may be a symbolic link to the workspace; links under it are
// archived as links. Files are read in lexical order of their paths, one at a time. A file
// that disappears while Write runs is left out; one that grows is archived
// with the size it had when it was reached, one that shrinks is an error.
//
// When the archive would exceed opts.Limit, Write stops before writing the
// part that would cross it and returns a *TooLargeError (ErrTooLarge); w
// then holds an incomplete archive the caller must discard.
func Write(ctx context.Context, w io.Writer, dir string, opts Options) (api.SnapshotInfo, error) {
	start := time.Now()
	var info api.SnapshotInfo
	h := sha256.New()
	cw := &countWriter{w: w, hash: h, limit: opts.Limit}
	enc, err := newEncoder(cw)
	if err != nil {
		return info, fmt.Errorf("snapshot %s: %w", dir, err)
	}
	tw := tar.NewWriter(enc)
	buf := make([]byte, copyBufSize)
	// dir itself may be a link to the workspace (a mount elsewhere): it is
	// followed, nothing under it is.
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	walkErr := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path != dir {
				return nil // gone since its directory was listed
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if path == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if opts.excluded(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		return writeEntry(tw, path, rel, fi, buf, &info)
	})
	if walkErr == nil {
		walkErr = tw.Close()
	}
	if walkErr == nil {
		walkErr = enc.Close()
	} else {
		enc.Reset(io.Discard) // free the encoder's goroutine without writing more to w
		_ = enc.Close()
	}
	if walkErr != nil {
		if tl := (*TooLargeError)(nil); errors.As(walkErr, &tl) {
			return info, tl
		}
		return info, fmt.Errorf("snapshot %s: %w", dir, walkErr)
	}
	info.Size = cw.n
	info.SHA256 = hex.EncodeToString(h.Sum(nil))
	info.DurationMS = time.Since(start).Milliseconds()
	return info, nil
}

// writeEntry writes the header of one entry and, for a regular file, its
// contents.
func writeEntry(tw *tar.Writer, path, rel string, fi fs.FileInfo, buf []byte, info *api.SnapshotInfo) error {
	hdr := &tar.Header{
		Name:    rel,
		Mode:    int64(fi.Mode().Perm()),
		ModTime: fi.ModTime(),
		Format:  tar.FormatPAX, // sub-second mtimes and long names
	}
	mode := fi.Mode()
	switch {
	case mode.IsRegular():
		hdr.Typeflag = tar.TypeReg
		hdr.Size = fi.Size()
	case mode.IsDir():
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
	case mode&fs.ModeSymlink != 0:
		target, err := os.Readlink(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = target
	default: // socket, device, named pipe: nothing a restore could use
		info.Skipped++
		return nil
	}
	if hdr.Typeflag != tar.TypeReg {
		return tw.WriteHeader(hdr)
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.CopyBuffer(tw, io.LimitReader(f, hdr.Size), buf)
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	if n < hdr.Size {
		return fmt.Errorf("%s shrank from %d to %d bytes while it was archived", rel, hdr.Size, n)
	}
	info.Files++
	info.Bytes += n
	return nil
}

// countWriter passes writes to w and hash, counting them, and refuses the
// write that would take the total past limit (when limit > 0).
type countWriter struct {
	w     io.Writer
	hash  io.Writer
	n     int64
	limit int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	if c.limit > 0 && c.n+int64(len(p)) > c.limit {
		return 0, &TooLargeError{Limit: c.limit}
	}
	n, err := c.w.Write(p)
	c.hash.Write(p[:n])
	c.n += int64(n)
	return n, err
}
