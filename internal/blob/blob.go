// Package blob keeps large byte streams by key — workspace snapshots,
// artifacts and spilled call output — behind one small interface, Store,
// with two implementations: FS, files under a directory (the default of a
// server on SQLite, and the data dir layout servers always had), and
// Postgres, chunks in a table of the server's PostgreSQL database, so every
// replica on that database reads what any of them wrote.
//
// Every implementation streams both ways (a blob is never held whole in
// memory) and makes a Put visible only once it is complete: a reader sees
// the previous blob of its key, or none, until the new one is whole.
package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
)

// ErrTooLarge stops a Put whose stream is longer than its limit.
var ErrTooLarge = errors.New("blob: larger than the limit")

// ErrNotExist is what Get answers for a key that holds no blob; it is
// fs.ErrNotExist, so errors.Is works with either.
var ErrNotExist = fs.ErrNotExist

// Info describes a stored blob.
type Info struct {
	// Key is the blob's key.
	Key string
	// Size is its length in bytes.
	Size int64
	// SHA256 is the hex SHA-256 of its bytes; "" when the implementation
	// does not keep it (FS computes it only on Put).
	SHA256 string
}

// Store keeps blobs by key. Keys are paths of segments separated by '/'
// (see ValidKey). Every method is safe for concurrent use.
type Store interface {
	// Put streams r into the blob key, replacing any, and returns its size
	// and hex SHA-256. It stops with ErrTooLarge once more than limit bytes
	// were read. The blob becomes visible only when Put returns nil: a
	// failed or cancelled Put leaves the key as it was and nothing else
	// behind.
	Put(ctx context.Context, key string, r io.Reader, limit int64) (size int64, sum string, err error)
	// Get opens the blob key for reading (and seeking); ErrNotExist when
	// there is none. ctx bounds the reads of the returned reader.
	Get(ctx context.Context, key string) (io.ReadSeekCloser, Info, error)
	// Delete removes the blob key; an absent blob is no error.
	Delete(ctx context.Context, key string) error
	// List returns the blobs whose keys start with prefix, ordered by key.
	List(ctx context.Context, prefix string) ([]Info, error)
	// DeletePrefix removes every blob whose key starts with prefix.
	DeletePrefix(ctx context.Context, prefix string) error
}

// uploadPrefix starts the names of FS's partial uploads; no key segment
// may start with it.
const uploadPrefix = ".upload-"

// ValidKey checks key is a key every Store accepts: 1 to 512 bytes of
// segments separated by '/', each of letters, digits, '.', '_' and '-',
// none empty, "." or "..", or starting with ".upload-".
func ValidKey(key string) error {
	if key == "" || len(key) > 512 {
		return fmt.Errorf("blob key %q: must be 1 to 512 bytes", key)
	}
	for _, seg := range strings.Split(key, "/") {
		if err := validSegment(seg); err != nil {
			return fmt.Errorf("blob key %q: %w", key, err)
		}
	}
	return nil
}

func validSegment(seg string) error {
	if seg == "" || seg == "." || seg == ".." || strings.HasPrefix(seg, uploadPrefix) {
		return fmt.Errorf("segment %q is not allowed", seg)
	}
	for _, c := range []byte(seg) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return fmt.Errorf("segment %q has a character other than letters, digits, '.', '_' and '-'", seg)
		}
	}
	return nil
}

// validPrefix checks a List or DeletePrefix prefix: "" (everything) or a
// key, or a key followed by '/'.
func validPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return ValidKey(strings.TrimSuffix(prefix, "/"))
}

// ctxReader stops reading when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// seekPos is the position a Seek of a reader at pos in a blob of size
// asks for (io.Seeker's rules; past the end is allowed, before the start
// is not).
func seekPos(pos, size, offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += pos
	case io.SeekEnd:
		offset += size
	default:
		return 0, errors.New("blob: invalid whence")
	}
	if offset < 0 {
		return 0, errors.New("blob: negative position")
	}
	return offset, nil
}
