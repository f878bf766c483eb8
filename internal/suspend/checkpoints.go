package suspend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/blob"
	"github.com/outpost-sh/outpost/internal/gateway"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/loop"
	"github.com/outpost-sh/outpost/internal/store"
)

// Conns lists the remotes connected to this server (the gateway's Hub).
type Conns interface {
	List() []*gateway.Conn
}

// Checkpoints takes periodic checkpoints (outpost server
// --snapshot-interval), which make a machine that dies without suspending
// lose less. Every Interval, a running session whose remote speaks
// protocol version 3 or later, that has run a call since its latest
// snapshot and has no call in flight, is asked for a checkpoint: calls are
// held back (gateway.CallGate) as for a suspend, the remote uploads its
// snapshot exactly as for a suspend and answers checkpointed, and keeps
// serving. The checkpoint becomes the session's one snapshot (its blob key
// names the call after which it was taken), the one it replaced is deleted
// and a snapshot event (value CheckpointValue) is recorded. A checkpoint
// that fails changes nothing; the first of a row goes to Failed, and it is
// tried again an interval later.
type Checkpoints struct {
	Ops   *Ops
	Conns Conns
	Store store.Store
	Blobs blob.Store
	Log   *slog.Logger
	Now   func() time.Time
	// Interval is how old a session's latest snapshot is when the next is
	// due; Tick how often the loop looks.
	Interval, Tick time.Duration
	// Committed follows a committed checkpoint's mutation (publish its
	// event, wake the feeds).
	Committed func(sessionID string, m store.Mutation)
	// Failed records the first of a row of failed checkpoints of a session.
	Failed func(ctx context.Context, c *gateway.Conn, err error)

	mu sync.Mutex // guards failed
	// failed holds, by session, when its latest checkpoint failed: it is
	// not tried again for an interval.
	failed map[string]time.Time
}

// Run asks for checkpoints until ctx ends; a no-op unless Interval is set.
func (cp *Checkpoints) Run(ctx context.Context) {
	if cp.Interval <= 0 {
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	loop.Every(ctx, max(cp.Tick, 10*time.Millisecond), func(ctx context.Context) { cp.round(ctx, &wg) })
}

// round starts, in wg, the checkpoints that are due.
func (cp *Checkpoints) round(ctx context.Context, wg *sync.WaitGroup) {
	now := cp.Now()
	for _, c := range cp.Conns.List() {
		if c.Version < api.SnapshotsSince || cp.Ops.Get(c.SessionID) != nil {
			continue
		}
		cp.mu.Lock()
		failedAt, failed := cp.failed[c.SessionID]
		cp.mu.Unlock()
		if failed && now.Sub(failedAt) < cp.Interval {
			continue
		}
		seq, due, err := cp.Due(ctx, c, now)
		if err != nil {
			cp.Log.Warn("checkpoint", "session", c.SessionID, "err", err)
			continue
		}
		if !due {
			continue
		}
		wg.Go(func() {
			err := cp.Take(ctx, c, seq)
			if errors.Is(err, ErrCheckpointBusy) || ctx.Err() != nil {
				return
			}
			cp.mu.Lock()
			defer cp.mu.Unlock()
			if err == nil {
				delete(cp.failed, c.SessionID)
				return
			}
			if _, again := cp.failed[c.SessionID]; !again {
				cp.Failed(ctx, c, err)
			}
			cp.Log.Warn("checkpoint failed; the session goes on", "session", c.SessionID, "err", err)
			if cp.failed == nil {
				cp.failed = map[string]time.Time{}
			}
			cp.failed[c.SessionID] = cp.Now()
		})
	}
}

// Due reports whether the session of c is due a checkpoint and the call
// after which it would be taken: it runs, has run a call since its latest
// snapshot, and that snapshot is older than the interval; and the remote of
// c did not fail to restore the snapshot.
func (cp *Checkpoints) Due(ctx context.Context, c *gateway.Conn, now time.Time) (int64, bool, error) {
	if cp.Ops.UnrestoredWhy(c.SessionID, c.Epoch) != "" {
		return 0, false, nil // its workspace is not the session's: keep the snapshot
	}
	sess, err := cp.Store.GetSession(ctx, c.SessionID)
	if err != nil {
		return 0, false, fmt.Errorf("get session: %w", err)
	}
	if sess.Status != api.StatusRunning || sess.LastSeq == 0 {
		return 0, false, nil
	}
	sn, err := cp.Store.GetSnapshot(ctx, c.SessionID)
	if errors.Is(err, store.ErrNotFound) {
		return sess.LastSeq, true, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("get snapshot: %w", err)
	}
	if seq, ok := CheckpointSeq(sn); ok && seq >= sess.LastSeq {
		return 0, false, nil // nothing ran since
	}
	return sess.LastSeq, now.Sub(sn.CreatedAt) >= cp.Interval, nil
}

// Take takes a checkpoint of the session of c after call seq, the last
// whose result the server holds: ErrCheckpointBusy when a call is in
// flight, a suspend or checkpoint is in progress or another call ended
// meanwhile.
func (cp *Checkpoints) Take(ctx context.Context, c *gateway.Conn, seq int64) error {
	op := cp.Ops.StartCheckpoint(c.SessionID, c.Epoch, CheckpointKey(c.SessionID, c.Epoch, seq))
	if op == nil {
		return ErrCheckpointBusy
	}
	defer cp.Ops.Finish(c.SessionID, op)
	if !c.Gate.PauseIfIdle() {
		return ErrCheckpointBusy
	}
	defer c.Gate.Unpause()
	if sess, err := cp.Store.GetSession(ctx, c.SessionID); err != nil || sess.LastSeq != seq || sess.Status != api.StatusRunning {
		return ErrCheckpointBusy
	}
	start := cp.Now()
	info, err := Ask(ctx, c, op, api.FrameCheckpoint)
	if err != nil {
		_ = cp.Blobs.Delete(context.WithoutCancel(ctx), op.Key)
		return err
	}
	info.DurationMS = max(info.DurationMS, cp.Now().Sub(start).Milliseconds())
	return cp.commit(ctx, c, op, info, seq)
}

// commit stores the checkpoint as the session's snapshot, records its event
// and deletes the snapshot it replaced. When the session changed meanwhile
// (it ended, its claim moved) the replaced snapshot is put back.
func (cp *Checkpoints) commit(ctx context.Context, c *gateway.Conn, op *Op, info api.SnapshotInfo, seq int64) error {
	ctx = context.WithoutCancel(ctx) // a half-stored checkpoint helps nobody
	now := cp.Now()
	prev, err := Put(ctx, cp.Store, cp.Blobs, c.SessionID, op, info, now, "checkpoint")
	if err != nil {
		return err
	}
	value, _ := json.Marshal(CheckpointValue{SnapshotInfo: info, Checkpoint: true, AfterSeq: seq})
	ok := true
	m, err := cp.Store.UpdateSession(ctx, c.SessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		if !lifecycle.RunsUnder(sess, e, op.Epoch) {
			return store.Mutation{}, fmt.Errorf("session %s changed during its checkpoint (it is %s now): %w", c.SessionID, sess.Status, ErrCheckpointBusy)
		}
		return store.Mutation{Events: []api.Event{{Type: api.EventSnapshot, Time: now.UnixMilli(), AcceptorID: c.AcceptorID, OK: &ok, Value: value,
			Reason: fmt.Sprintf("Took a checkpoint of the workspace after call %d: %s. Should the machine end without suspending, the next one restores it; changes after it would be lost.",
				seq, Taken(info))}}}, nil
	})
	if err != nil {
		UndoPut(ctx, cp.Store, cp.Blobs, cp.Log, c.SessionID, prev, op.Key)
		return err
	}
	cp.Committed(c.SessionID, m)
	DeleteReplaced(ctx, cp.Blobs, cp.Log, c.SessionID, prev, op.Key)
	cp.Log.Info("checkpoint stored", "session", c.SessionID, "after_seq", seq, "snapshot_bytes", info.Size, "key", op.Key)
	return nil
}
