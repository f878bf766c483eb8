package server

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/internal/store"
)

// Artifact retention: a background sweep deletes the artifacts of sessions
// that ended (a final status, which a session never leaves) longer ago than
// Options.ArtifactRetention: their blobs and metadata in the blob store
// (artifacts/<session>/, blobs.go), whichever replica runs the sweep. The store marks each such session
// (Session.ArtifactsPrunedAt) once its files are gone, so a sweep only lists
// sessions it has not handled, and a download of one of its artifacts
// answers 410 Gone instead of 404. The transcript's artifact events stay as
// history. Sessions that have not ended are never listed, whatever their
// age. The output the session's calls spilled past the transcript's cap
// (gateway.Output) goes with its artifacts: GET …/output/{seq} then answers 410
// too.

// artifactPruneBatch is how many sessions one step of a sweep lists and
// then marks in one short write transaction, so a sweep never holds the
// store's single writer for long.
const artifactPruneBatch = 100

// artifactFirstSweep is how long after start the first sweep runs (or the
// sweep interval, when shorter).
const artifactFirstSweep = time.Minute

// retainArtifacts runs the retention sweep shortly after start and then
// every ArtifactSweepInterval until ctx ends. It does nothing when
// retention is 0 (artifacts are kept forever).
func (s *Server) retainArtifacts(ctx context.Context) {
	if s.opts.ArtifactRetention <= 0 {
		return
	}
	t := time.NewTimer(min(artifactFirstSweep, s.opts.ArtifactSweepInterval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := s.pruneArtifacts(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("artifact retention sweep", "err", err)
		}
		t.Reset(s.opts.ArtifactSweepInterval)
	}
}

// pruneStats counts what one sweep deleted.
type pruneStats struct {
	Sessions  int   // sessions whose artifacts were deleted (or that had none)
	Artifacts int   // artifact files deleted
	Bytes     int64 // bytes of the files deleted, metadata included
	Output    int64 // bytes of spilled output deleted
}

// pruneArtifacts deletes the artifacts of every session that ended before
// now minus the retention, in batches, and marks those sessions pruned. A
// session whose files could not be deleted is left unmarked and retried by
// the next sweep.
func (s *Server) pruneArtifacts(ctx context.Context) (pruneStats, error) {
	var st pruneStats
	if s.opts.ArtifactRetention <= 0 {
		return st, nil
	}
	start := time.Now()
	now := s.now()
	cutoff := now.Add(-s.opts.ArtifactRetention)
	defer func() {
		if st.Artifacts > 0 || st.Output > 0 {
			s.log.Info("artifact retention sweep deleted artifacts", "artifacts", st.Artifacts, "bytes", st.Bytes, "output_bytes", st.Output,
				"sessions", st.Sessions, "ended_before", cutoff.UTC().Format(time.RFC3339), "took", time.Since(start).Round(time.Millisecond))
		}
	}()
	for ctx.Err() == nil {
		ids, err := s.store.ListArtifactsExpired(ctx, cutoff, artifactPruneBatch)
		if err != nil {
			return st, err
		}
		var done []string
		for _, id := range ids {
			if ctx.Err() != nil {
				break
			}
			n, b, err := s.deleteArtifactsOf(ctx, id)
			// Count what was deleted even when a later file failed.
			st.Artifacts += n
			st.Bytes += b
			s.metrics.artifactsPruned.Add(float64(n))
			s.metrics.artifactBytesPruned.Add(float64(b))
			if err != nil {
				s.log.Warn("artifact retention: delete artifacts", "session", id, "err", err)
				continue
			}
			ob, err := s.deleteSpilledOutputOf(ctx, id)
			st.Output += ob
			if err != nil {
				s.log.Warn("artifact retention: delete spilled output", "session", id, "err", err)
				continue
			}
			done = append(done, id)
		}
		// Mark even when ctx ended mid-batch: the files of done are gone.
		marked, err := s.store.MarkArtifactsPruned(context.WithoutCancel(ctx), done, now)
		st.Sessions += marked
		if err != nil {
			return st, err
		}
		// A short batch was the last; a batch of only failures would be
		// listed again at once: leave it to the next sweep.
		if len(ids) < artifactPruneBatch || len(done) == 0 {
			break
		}
	}
	return st, ctx.Err()
}

// deleteArtifactsOf removes a session's artifacts and their metadata from
// the blob store and returns how many artifacts and bytes it held. A
// session without any has none.
func (s *Server) deleteArtifactsOf(ctx context.Context, sessionID string) (artifacts int, bytes int64, err error) {
	unlock, err := s.lockArtifacts(ctx, sessionID)
	if err != nil {
		return 0, 0, err
	}
	defer unlock()
	infos, err := s.artifactBlobs.List(ctx, sessionID+"/")
	if err != nil {
		return 0, 0, fmt.Errorf("list artifacts of %s: %w", sessionID, err)
	}
	for _, in := range infos {
		bytes += in.Size
		// Artifacts are the session's own keys; metadata is under .meta/.
		if !strings.Contains(strings.TrimPrefix(in.Key, sessionID+"/"), "/") {
			artifacts++
		}
	}
	if err := s.artifactBlobs.DeletePrefix(ctx, sessionID+"/"); err != nil {
		// Some may be gone; count none rather than guess.
		return 0, 0, fmt.Errorf("delete artifacts of %s: %w", sessionID, err)
	}
	return artifacts, bytes, nil
}

// deleteSpilledOutputOf removes the output a session's calls spilled and
// returns its bytes.
func (s *Server) deleteSpilledOutputOf(ctx context.Context, sessionID string) (int64, error) {
	infos, err := s.outputBlobs.List(ctx, sessionID+"/")
	if err != nil {
		return 0, fmt.Errorf("list spilled output of %s: %w", sessionID, err)
	}
	if len(infos) == 0 {
		return 0, nil
	}
	var bytes int64
	for _, in := range infos {
		bytes += in.Size
	}
	if err := s.outputBlobs.DeletePrefix(ctx, sessionID+"/"); err != nil {
		return 0, fmt.Errorf("delete spilled output of %s: %w", sessionID, err)
	}
	return bytes, nil
}

// artifactGone is the error of a download of an artifact that is not
// stored: 410 Gone when the retention sweep deleted the session's
// artifacts, else 404.
func artifactGone(sess store.Session, name string) error {
	if sess.ArtifactsPrunedAt != nil {
		return errHTTPGone("Session %s's artifacts were deleted by the retention policy on %s; artifact %q is no longer available.",
			sess.ID, sess.ArtifactsPrunedAt.UTC().Format("2006-01-02 15:04 UTC"), name)
	}
	return errNotFound("Session %s has no artifact %q.", sess.ID, name)
}
