package server

import (
	"github.com/outpost-sh/outpost/internal/retention"
	"github.com/outpost-sh/outpost/internal/store"
)

// Artifact retention is internal/retention's Sweeper (newRetention); what
// stays here is the answer to a download of a file it deleted.

// newRetention returns the sweep that deletes the artifacts and spilled
// output of sessions that ended longer ago than Options.ArtifactRetention.
func (s *Server) newRetention() *retention.Sweeper {
	return retention.New(retention.Options{
		Store: s.store, Artifacts: s.artifactBlobs, Output: s.outputBlobs, Lock: s.lockArtifacts,
		Retention: s.opts.ArtifactRetention, Interval: s.opts.ArtifactSweepInterval, Now: s.now, Log: s.log,
		Pruned: func(artifacts int, bytes int64) {
			s.metrics.artifactsPruned.Add(float64(artifacts))
			s.metrics.artifactBytesPruned.Add(float64(bytes))
		},
	})
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
