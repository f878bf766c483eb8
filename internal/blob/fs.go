package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// FS is a Store in a directory: the blob key is the file Dir/key (its '/'
// separating directories), written under a temporary name beside it
// (".upload-…") and renamed into place once complete and synced.
type FS struct {
	// Dir is the root directory; it is created when needed.
	Dir string
}

var _ Store = FS{}

func (b FS) path(key string) (string, error) {
	if err := ValidKey(key); err != nil {
		return "", err
	}
	return filepath.Join(b.Dir, filepath.FromSlash(key)), nil
}

// Put implements Store.
func (b FS) Put(ctx context.Context, key string, r io.Reader, limit int64) (int64, string, error) {
	p, err := b.path(key)
	if err != nil {
		return 0, "", err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return 0, "", fmt.Errorf("create blob dir: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(p), uploadPrefix+"*")
	if err != nil {
		return 0, "", fmt.Errorf("create blob %s: %w", key, err)
	}
	defer func() {
		if f != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(ctxReader{ctx, r}, limit+1))
	if err != nil {
		return n, "", fmt.Errorf("write blob %s: %w", key, err)
	}
	if n > limit {
		return n, "", ErrTooLarge
	}
	if err := f.Sync(); err != nil {
		return n, "", fmt.Errorf("sync blob %s: %w", key, err)
	}
	if err := f.Close(); err != nil {
		return n, "", fmt.Errorf("close blob %s: %w", key, err)
	}
	name := f.Name()
	f = nil
	if err := os.Rename(name, p); err != nil {
		_ = os.Remove(name)
		return n, "", fmt.Errorf("store blob %s: %w", key, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// Get implements Store. The Info it returns has no SHA256.
func (b FS) Get(_ context.Context, key string) (io.ReadSeekCloser, Info, error) {
	p, err := b.path(key)
	if err != nil {
		return nil, Info{}, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, Info{}, err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, Info{}, err
	}
	if !st.Mode().IsRegular() {
		_ = f.Close()
		return nil, Info{}, fmt.Errorf("blob %s: %w", key, ErrNotExist)
	}
	return f, Info{Key: key, Size: st.Size()}, nil
}

// Delete implements Store.
func (b FS) Delete(_ context.Context, key string) error {
	p, err := b.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete blob %s: %w", key, err)
	}
	return nil
}

// List implements Store. The Infos it returns have no SHA256.
func (b FS) List(_ context.Context, prefix string) ([]Info, error) {
	if err := validPrefix(prefix); err != nil {
		return nil, err
	}
	base := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		base = prefix[:i]
	}
	root := filepath.Join(b.Dir, filepath.FromSlash(base))
	var out []Info
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // the directory, or a file gone meanwhile
			}
			return err
		}
		if strings.HasPrefix(d.Name(), uploadPrefix) || !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(b.Dir, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) || ValidKey(key) != nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // gone meanwhile
		}
		out = append(out, Info{Key: key, Size: info.Size()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list blobs %q: %w", prefix, err)
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// DeletePrefix implements Store. A prefix ending in '/' removes that whole
// directory, uploads in progress in it included.
func (b FS) DeletePrefix(ctx context.Context, prefix string) error {
	if err := validPrefix(prefix); err != nil {
		return err
	}
	if prefix != "" && strings.HasSuffix(prefix, "/") {
		dir := filepath.Join(b.Dir, filepath.FromSlash(path.Clean(prefix)))
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("delete blobs %q: %w", prefix, err)
		}
		return nil
	}
	infos, err := b.List(ctx, prefix)
	if err != nil {
		return err
	}
	for _, in := range infos {
		if err := b.Delete(ctx, in.Key); err != nil {
			return err
		}
	}
	return nil
}
