// Package retention deletes the files a session leaves once it has ended
// longer ago than the retention: its artifacts and their metadata, and the
// output its calls spilled past the transcript's cap. A Sweeper runs the
// sweep in the background, whichever replica runs it, since the files are
// in the shared blob stores. The store marks each session it handled
// (Session.ArtifactsPrunedAt) once its files are gone, so a sweep lists
// only sessions not handled yet, and the server answers a download of one
// of their files with 410 Gone. Sessions that have not ended are never
// listed, whatever their age; their transcripts stay.
package retention

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/internal/blob"
)

// batch is how many sessions one step of a sweep lists and then marks in
// one short write transaction, so a sweep never holds the store's single
// writer for long.
const batch = 100

// firstSweep is how long after start the first sweep runs (or the sweep
// interval, when shorter).
const firstSweep = time.Minute

// Store is what a Sweeper needs of the store.
type Store interface {
	// ListArtifactsExpired returns ids of up to limit sessions that ended
	// before endedBefore and whose files were not deleted yet.
	ListArtifactsExpired(ctx context.Context, endedBefore time.Time, limit int) ([]string, error)
	// MarkArtifactsPruned marks those of ids that ended as handled, at at.
	MarkArtifactsPruned(ctx context.Context, ids []string, at time.Time) (int, error)
}

// Options configure a Sweeper.
type Options struct {
	// Store lists the sessions to sweep and marks them handled. Required.
	Store Store
	// Artifacts holds artifacts under "<session>/<name>" and their
	// metadata under "<session>/.meta/"; Output holds spilled output
	// under "<session>/". Required.
	Artifacts, Output blob.Store
	// Lock takes the session's artifact lock, which uploads hold too, for
	// the time its artifacts are deleted. Nil takes none.
	Lock func(ctx context.Context, sessionID string) (unlock func(), err error)
	// Retention is how long after its end a session's files are kept;
	// zero or negative keeps them forever.
	Retention time.Duration
	// Interval spaces the sweeps of Run. Required when Retention is set.
	Interval time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Pruned, when set, counts each session's deleted artifacts and
	// their bytes.
	Pruned func(artifacts int, bytes int64)
	// Log gets what a sweep deleted and what it could not; nil discards.
	Log *slog.Logger
}

// Sweeper deletes the files of sessions past the retention.
type Sweeper struct {
	opts Options
}

// New returns a Sweeper with opts.
func New(opts Options) *Sweeper {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Log = cmp.Or(opts.Log, slog.New(slog.DiscardHandler))
	return &Sweeper{opts: opts}
}

// Run sweeps shortly after start and then every Interval until ctx ends.
// It does nothing when Retention keeps files forever.
func (s *Sweeper) Run(ctx context.Context) {
	if s.opts.Retention <= 0 {
		return
	}
	t := time.NewTimer(min(firstSweep, s.opts.Interval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.opts.Log.Warn("artifact retention sweep", "err", err)
		}
		t.Reset(s.opts.Interval)
	}
}

// Stats counts what one sweep deleted.
type Stats struct {
	Sessions  int   // sessions whose artifacts were deleted (or that had none)
	Artifacts int   // artifact files deleted
	Bytes     int64 // bytes of the files deleted, metadata included
	Output    int64 // bytes of spilled output deleted
}

// Sweep deletes the files of every session that ended before now minus
// the retention, in batches, and marks those sessions handled. A session
// whose files could not be deleted is left unmarked and retried by the
// next sweep.
func (s *Sweeper) Sweep(ctx context.Context) (Stats, error) {
	var st Stats
	if s.opts.Retention <= 0 {
		return st, nil
	}
	start := time.Now()
	now := s.opts.Now()
	cutoff := now.Add(-s.opts.Retention)
	defer func() {
		if st.Artifacts > 0 || st.Output > 0 {
			s.opts.Log.Info("artifact retention sweep deleted artifacts", "artifacts", st.Artifacts, "bytes", st.Bytes, "output_bytes", st.Output,
				"sessions", st.Sessions, "ended_before", cutoff.UTC().Format(time.RFC3339), "took", time.Since(start).Round(time.Millisecond))
		}
	}()
	for ctx.Err() == nil {
		ids, err := s.opts.Store.ListArtifactsExpired(ctx, cutoff, batch)
		if err != nil {
			return st, err
		}
		var done []string
		for _, id := range ids {
			if ctx.Err() != nil {
				break
			}
			n, b, err := s.DeleteArtifacts(ctx, id)
			// Count what was deleted even when a later file failed.
			st.Artifacts += n
			st.Bytes += b
			if s.opts.Pruned != nil {
				s.opts.Pruned(n, b)
			}
			if err != nil {
				s.opts.Log.Warn("artifact retention: delete artifacts", "session", id, "err", err)
				continue
			}
			ob, err := s.deleteOutput(ctx, id)
			st.Output += ob
			if err != nil {
				s.opts.Log.Warn("artifact retention: delete spilled output", "session", id, "err", err)
				continue
			}
			done = append(done, id)
		}
		// Mark even when ctx ended mid-batch: the files of done are gone.
		marked, err := s.opts.Store.MarkArtifactsPruned(context.WithoutCancel(ctx), done, now)
		st.Sessions += marked
		if err != nil {
			return st, err
		}
		// A short batch was the last; a batch of only failures would be
		// listed again at once: leave it to the next sweep.
		if len(ids) < batch || len(done) == 0 {
			break
		}
	}
	return st, ctx.Err()
}

// DeleteArtifacts removes a session's artifacts and their metadata from
// the blob store, under the session's artifact lock, and returns how many
// artifacts and bytes it held. A session without any has none.
func (s *Sweeper) DeleteArtifacts(ctx context.Context, sessionID string) (artifacts int, bytes int64, err error) {
	if s.opts.Lock != nil {
		unlock, err := s.opts.Lock(ctx, sessionID)
		if err != nil {
			return 0, 0, err
		}
		defer unlock()
	}
	infos, err := s.opts.Artifacts.List(ctx, sessionID+"/")
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
	if err := s.opts.Artifacts.DeletePrefix(ctx, sessionID+"/"); err != nil {
		// Some may be gone; count none rather than guess.
		return 0, 0, fmt.Errorf("delete artifacts of %s: %w", sessionID, err)
	}
	return artifacts, bytes, nil
}

// deleteOutput removes the output a session's calls spilled and returns
// its bytes.
func (s *Sweeper) deleteOutput(ctx context.Context, sessionID string) (int64, error) {
	infos, err := s.opts.Output.List(ctx, sessionID+"/")
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
	if err := s.opts.Output.DeletePrefix(ctx, sessionID+"/"); err != nil {
		return 0, fmt.Errorf("delete spilled output of %s: %w", sessionID, err)
	}
	return bytes, nil
}
