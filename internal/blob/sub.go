package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Sub returns the Store of the blobs of s under prefix, which must end in
// '/': its key k is s's key prefix+k.
func Sub(s Store, prefix string) Store {
	if !strings.HasSuffix(prefix, "/") || ValidKey(strings.TrimSuffix(prefix, "/")) != nil {
		panic(fmt.Sprintf("blob: Sub prefix %q is not a key followed by '/'", prefix))
	}
	return sub{s, prefix}
}

type sub struct {
	s      Store
	prefix string
}

func (b sub) Put(ctx context.Context, key string, r io.Reader, limit int64) (int64, string, error) {
	if err := ValidKey(key); err != nil {
		return 0, "", err
	}
	return b.s.Put(ctx, b.prefix+key, r, limit)
}

func (b sub) Get(ctx context.Context, key string) (io.ReadSeekCloser, Info, error) {
	if err := ValidKey(key); err != nil {
		return nil, Info{}, err
	}
	r, info, err := b.s.Get(ctx, b.prefix+key)
	info.Key = strings.TrimPrefix(info.Key, b.prefix)
	return r, info, err
}

func (b sub) Delete(ctx context.Context, key string) error {
	if err := ValidKey(key); err != nil {
		return err
	}
	return b.s.Delete(ctx, b.prefix+key)
}

func (b sub) List(ctx context.Context, prefix string) ([]Info, error) {
	if err := validPrefix(prefix); err != nil {
		return nil, err
	}
	infos, err := b.s.List(ctx, b.prefix+prefix)
	for i := range infos {
		infos[i].Key = strings.TrimPrefix(infos[i].Key, b.prefix)
	}
	return infos, err
}

func (b sub) DeletePrefix(ctx context.Context, prefix string) error {
	if err := validPrefix(prefix); err != nil {
		return err
	}
	return b.s.DeletePrefix(ctx, b.prefix+prefix)
}

// Writer is a Put fed by writes rather than a reader, for bytes that
// arrive piece by piece (an artifact's chunks, a call's spilled output).
// Its Put runs in a goroutine of its own, which Commit and Abort wait for;
// every Writer must end with one of them.
type Writer struct {
	pw   *io.PipeWriter
	done chan struct{}
	// Set by the Put before done closes.
	size int64
	sum  string
	err  error
}

// errCommitted ends the pipe of a Writer whose Put returned.
var errCommitted = errors.New("blob: the writer's put has ended")

// NewWriter starts a Put of key into s with limit, fed by the Writer's
// writes; ctx bounds the Put.
func NewWriter(ctx context.Context, s Store, key string, limit int64) *Writer {
	pr, pw := io.Pipe()
	w := &Writer{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.size, w.sum, w.err = s.Put(ctx, key, pr, limit)
		if w.err != nil {
			pr.CloseWithError(w.err) // later writes fail at once
		} else {
			pr.CloseWithError(errCommitted)
		}
	}()
	return w
}

// Write hands p to the Put, blocking until it has read all of p; it fails
// with the Put's error once the Put failed.
func (w *Writer) Write(p []byte) (int, error) { return w.pw.Write(p) }

// Commit ends the bytes and waits for the Put: the blob is stored when it
// returns nil.
func (w *Writer) Commit() (size int64, sum string, err error) {
	_ = w.pw.Close()
	<-w.done
	return w.size, w.sum, w.err
}

// Abort fails the Put with reason and waits for it: nothing is stored.
func (w *Writer) Abort(reason error) {
	_ = w.pw.CloseWithError(reason)
	<-w.done
}

// Move moves every blob under prefix from src to dst (Put into dst, then
// Delete from src) and returns how many blobs and bytes it moved. A blob
// that fails stops the move; what was moved stays moved, and a move again
// goes on from there.
func Move(ctx context.Context, dst, src Store, prefix string) (n int, bytes int64, err error) {
	infos, err := src.List(ctx, prefix)
	if err != nil {
		return 0, 0, err
	}
	for _, in := range infos {
		r, info, err := src.Get(ctx, in.Key)
		if errors.Is(err, ErrNotExist) {
			continue // deleted meanwhile
		}
		if err != nil {
			return n, bytes, err
		}
		size, _, err := dst.Put(ctx, in.Key, r, info.Size)
		r.Close()
		if err != nil {
			return n, bytes, fmt.Errorf("move blob %s: %w", in.Key, err)
		}
		if err := src.Delete(ctx, in.Key); err != nil {
			return n, bytes, fmt.Errorf("move blob %s: %w", in.Key, err)
		}
		n++
		bytes += size
	}
	return n, bytes, nil
}
