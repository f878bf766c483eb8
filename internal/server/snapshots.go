package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/blob"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/suspend"
)

// Workspace snapshots: a remote uploads its archive (PUT api.SnapshotPath)
// while its session is being suspended by its claim, and the remote of a
// resumed session downloads it (GET). The archives live in a blob store;
// their metadata (store.Snapshot) in the store, written only once an upload
// is complete and checksummed. Keys are those of s.blobs, the blob store's
// snapshots/ (blobs.go), so any replica serves any snapshot.

// DefaultMaxSnapshotBytes is the largest snapshot a server stores unless
// Options.MaxSnapshotBytes says otherwise: 10 GiB.
const DefaultMaxSnapshotBytes int64 = 10 << 30

// DefaultSnapshotTTL is how long a suspended session's snapshot is kept
// unless Options.SnapshotTTL says otherwise.
const DefaultSnapshotTTL = 7 * 24 * time.Hour

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
			size, api.ByteSize(l.bytes))
	}
	return fmt.Sprintf("The snapshot (%s) is larger than outpost %s's limit of %s per snapshot (its max_snapshot_bytes): make the workspace smaller (delete build output, caches) or raise the outpost's limit (PATCH /v1/outposts/%s with max_snapshot_bytes; 0 for the server's).",
		size, l.outpost, api.ByteSize(l.bytes), l.outpost)
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
	op := s.suspends.Get(ct.SessionID)
	if op == nil || op.Epoch != ct.Epoch {
		return errConflict("Session %s is not being suspended by this remote's claim: a snapshot is taken only when the server asks for one.", ct.SessionID)
	}
	lim, err := s.snapshotLimit(ctx, e.OutpostID)
	if err != nil {
		op.SetUpload(suspend.Upload{Err: "The server could not read the snapshot limit.", Status: http.StatusInternalServerError})
		return err
	}
	limit := lim.bytes
	tooLarge := func(size string) error {
		msg := lim.tooLarge(size)
		op.SetUpload(suspend.Upload{Err: msg, Status: http.StatusRequestEntityTooLarge})
		return &httpError{http.StatusRequestEntityTooLarge, api.CodeTooLarge, msg}
	}
	if r.ContentLength > limit {
		return tooLarge(api.ByteSize(r.ContentLength))
	}
	body := &bodyReader{r: r.Body}
	size, sum, err := s.blobs.Put(ctx, op.Key, body, limit)
	switch {
	case errors.Is(err, blob.ErrTooLarge):
		return tooLarge("more than " + api.ByteSize(limit))
	case err != nil && body.err != nil:
		// The remote's upload broke off (its archive failed: a file it
		// cannot read): its suspended frame says why.
		msg := fmt.Sprintf("The remote of session %s stopped its upload before the end of the snapshot (%v).", ct.SessionID, body.err)
		op.SetUpload(suspend.Upload{Err: msg, Status: http.StatusBadGateway})
		return &httpError{http.StatusBadRequest, api.CodeBadRequest, msg}
	case err != nil:
		op.SetUpload(suspend.Upload{Err: "The server could not store the snapshot.", Status: http.StatusInternalServerError})
		return fmt.Errorf("store snapshot of %s: %w", ct.SessionID, err)
	}
	op.SetUpload(suspend.Upload{Size: size, SHA256: sum})
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
	body, info, err := s.blobs.Get(ctx, sn.BlobKey)
	if errors.Is(err, blob.ErrNotExist) {
		return errHTTPGone("The snapshot of session %s is no longer kept.", ct.SessionID)
	}
	if err != nil {
		return fmt.Errorf("open snapshot of %s: %w", ct.SessionID, err)
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/zstd")
	w.Header().Set("Content-Length", strconv.FormatInt(info.Size, 10))
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

// bodyReader remembers the error, other than io.EOF, of reading a request
// body: a Put that fails with one failed on the sender's side.
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF && b.err == nil {
		b.err = err
	}
	return n, err
}
