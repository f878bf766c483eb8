package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// Workspace snapshots: a remote uploads its archive (PUT api.SnapshotPath)
// while its session is being suspended by its claim, and the remote of a
// resumed session downloads it (GET). The archives live in a blob store;
// their metadata (store.Snapshot) in the store, written only once an upload
// is complete and checksummed.

// DefaultMaxSnapshotBytes is the largest snapshot a server stores unless
// Options.MaxSnapshotBytes says otherwise: 10 GiB.
const DefaultMaxSnapshotBytes int64 = 10 << 30

// DefaultSnapshotTTL is how long a suspended session's snapshot is kept
// unless Options.SnapshotTTL says otherwise.
const DefaultSnapshotTTL = 7 * 24 * time.Hour

// blobStore keeps snapshot archives by key. The file store in the data dir
// is the one implementation today; one in PostgreSQL (large objects) or an
// object store can take its place for several replicas.
type blobStore interface {
	// Put streams r into the blob key, stopping with errTooLarge past limit
	// bytes, and returns its size and hex SHA-256. A failed Put leaves no
	// blob behind.
	Put(ctx context.Context, key string, r io.Reader, limit int64) (size int64, sum string, err error)
	// Get opens the blob key; fs.ErrNotExist when absent.
	Get(ctx context.Context, key string) (io.ReadCloser, int64, error)
	// Delete removes the blob key; an absent blob is no error.
	Delete(ctx context.Context, key string) error
}

// errTooLarge stops a Put past its limit.
var errTooLarge = errors.New("the snapshot is larger than the limit")

// blobKey is a key a blobStore accepts: a file name, never a path.
var blobKey = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,200}$`)

// fileBlobs is a blobStore in a directory: one file per key, written under
// a temporary name and renamed once complete.
type fileBlobs struct{ dir string }

func (b fileBlobs) path(key string) (string, error) {
	if !blobKey.MatchString(key) || key == "." || key == ".." {
		return "", fmt.Errorf("blob key %q is not a file name", key)
	}
	return filepath.Join(b.dir, key), nil
}

func (b fileBlobs) Put(ctx context.Context, key string, r io.Reader, limit int64) (int64, string, error) {
	p, err := b.path(key)
	if err != nil {
		return 0, "", err
	}
	if err := os.MkdirAll(b.dir, 0o700); err != nil {
		return 0, "", fmt.Errorf("create blob dir: %w", err)
	}
	f, err := os.CreateTemp(b.dir, ".upload-*")
	if err != nil {
		return 0, "", fmt.Errorf("create blob: %w", err)
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
		return n, "", errTooLarge
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

func (b fileBlobs) Get(_ context.Context, key string) (io.ReadCloser, int64, error) {
	p, err := b.path(key)
	if err != nil {
		return nil, 0, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}

func (b fileBlobs) Delete(_ context.Context, key string) error {
	p, err := b.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
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

// snapshotCap is the largest snapshot the server stores for a session of
// one outpost, and whose limit it is.
type snapshotCap struct {
	bytes int64
	// outpost names the outpost whose max_snapshot_bytes it is; "" when
	// it is the server's --max-snapshot-bytes.
	outpost string
}

// tooLarge is the sentence refusing a snapshot of size (for people) over l.
func (l snapshotCap) tooLarge(size string) string {
	if l.outpost == "" {
		return fmt.Sprintf("The snapshot (%s) is larger than this server's limit of %s per snapshot: make the workspace smaller (delete build output, caches) or raise the limit (outpost server --max-snapshot-bytes).",
			size, byteSize(l.bytes))
	}
	return fmt.Sprintf("The snapshot (%s) is larger than outpost %s's limit of %s per snapshot (its max_snapshot_bytes): make the workspace smaller (delete build output, caches) or raise the outpost's limit (PATCH /v1/outposts/%s with max_snapshot_bytes; 0 for the server's).",
		size, l.outpost, byteSize(l.bytes), l.outpost)
}

// snapshotLimit is the limit for the sessions of outpost outpostID: its
// max_snapshot_bytes when set and below the server's, else the server's.
func (s *Server) snapshotLimit(ctx context.Context, outpostID string) (snapshotCap, error) {
	server := snapshotCap{bytes: s.opts.MaxSnapshotBytes}
	if outpostID == "" {
		return server, nil
	}
	o, err := s.store.GetOutpost(ctx, outpostID)
	if errors.Is(err, store.ErrNotFound) {
		return server, nil
	}
	if err != nil {
		return snapshotCap{}, fmt.Errorf("get outpost %s for its snapshot limit: %w", outpostID, err)
	}
	if o.MaxSnapshotBytes <= 0 || o.MaxSnapshotBytes >= server.bytes {
		return server, nil
	}
	return snapshotCap{bytes: o.MaxSnapshotBytes, outpost: o.Name}, nil
}

// putSnapshot takes the archive of a session being suspended by the
// caller's claim (PUT api.SnapshotPath).
func (s *Server) putSnapshot(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	ct, e, err := s.connectClaim(ctx, r)
	if err != nil {
		return err
	}
	op := s.suspends.get(ct.SessionID)
	if op == nil || op.epoch != ct.Epoch {
		return errConflict("Session %s is not being suspended by this remote's claim: a snapshot is taken only when the server asks for one.", ct.SessionID)
	}
	lim, err := s.snapshotLimit(ctx, e.OutpostID)
	if err != nil {
		op.setUpload(snapshotUpload{err: "The server could not read the snapshot limit.", status: http.StatusInternalServerError})
		return err
	}
	limit := lim.bytes
	tooLarge := func(size string) error {
		msg := lim.tooLarge(size)
		op.setUpload(snapshotUpload{err: msg, status: http.StatusRequestEntityTooLarge})
		return &httpError{http.StatusRequestEntityTooLarge, api.CodeTooLarge, msg}
	}
	if r.ContentLength > limit {
		return tooLarge(byteSize(r.ContentLength))
	}
	size, sum, err := s.blobs.Put(ctx, op.key, r.Body, limit)
	switch {
	case errors.Is(err, errTooLarge):
		return tooLarge("more than " + byteSize(limit))
	case err != nil:
		op.setUpload(snapshotUpload{err: "The server could not store the snapshot.", status: http.StatusInternalServerError})
		return fmt.Errorf("store snapshot of %s: %w", ct.SessionID, err)
	}
	op.setUpload(snapshotUpload{size: size, sha256: sum})
	writeJSON(w, http.StatusCreated, api.SnapshotInfo{Size: size, SHA256: sum})
	return nil
}

// getSnapshot streams a resumed session's snapshot to the remote of its
// claim (GET api.SnapshotPath).
func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	ct, _, err := s.connectClaim(ctx, r)
	if err != nil {
		return err
	}
	sn, err := s.store.GetSnapshot(ctx, ct.SessionID)
	if errors.Is(err, store.ErrNotFound) {
		return errNotFound("Session %s has no snapshot.", ct.SessionID)
	}
	if err != nil {
		return fmt.Errorf("get snapshot of %s: %w", ct.SessionID, err)
	}
	body, size, err := s.blobs.Get(ctx, sn.BlobKey)
	if errors.Is(err, fs.ErrNotExist) {
		return errHTTPGone("The snapshot of session %s is no longer kept.", ct.SessionID)
	}
	if err != nil {
		return fmt.Errorf("open snapshot of %s: %w", ct.SessionID, err)
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/zstd")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.Header().Set("X-Outpost-Snapshot-Sha256", sn.SHA256)
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, body); err != nil && ctx.Err() == nil {
		s.log.Warn("send snapshot", "session", ct.SessionID, "err", err)
	}
	return nil
}

// gatewayHandler adapts a handler of the gateway's HTTP side, which
// authenticates with connect tokens rather than API tokens.
func (s *Server) gatewayHandler(h func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	}
}

// byteSize writes n bytes for people.
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
