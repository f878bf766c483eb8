package suspend

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/audit"
	"github.com/outpost-sh/outpost/internal/blob"
	"github.com/outpost-sh/outpost/internal/gateway"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/store"
)

// Machine is the state machine's transition a suspend commits through
// (lifecycle.Machine).
type Machine interface {
	Suspend(ctx context.Context, sessionID string, epoch int64, reason string, snapshot api.Event) error
}

// Hub finds a session's remote connection and ends it (the gateway's Hub).
type Hub interface {
	Get(sessionID string) *gateway.Conn
	End(sessionID, reason string)
}

// Suspender suspends running sessions through their remotes. The server
// stops sending calls (gateway.CallGate), waits until none is in flight,
// sends suspend; the remote archives its workspace, uploads it and answers
// suspended. The snapshot's metadata is stored, and the state machine
// moves the session to suspended and its queue entry's session_status to
// suspended in one transaction (Machine.Suspend); the connection ends, the
// remote exits 0 and its claimer releases the claim. A failed suspend
// changes nothing but the transcript: the session goes on running.
type Suspender struct {
	Ops     *Ops
	Hub     Hub
	Store   store.Store
	Blobs   blob.Store
	Machine Machine
	Log     *slog.Logger
	Now     func() time.Time
	// TTL is how long a suspended session's snapshot is kept, for its
	// event.
	TTL time.Duration
	// Count counts a suspend of a session of the outpost outpostID, err
	// its outcome.
	Count func(ctx context.Context, outpostID string, err error)
	// Failed records a failed suspend on the transcript.
	Failed func(ctx context.Context, c *gateway.Conn, err error)
}

// Suspend suspends the running session id through its remote. why opens
// the session's new reason. Every refusal is a *lifecycle.Error or an
// *Error saying what to do.
func (sp *Suspender) Suspend(ctx context.Context, id, why string) error {
	run, err := sp.Begin(ctx, id, why, Request{})
	if err != nil {
		return err
	}
	return run(ctx)
}

// Begin checks that the running session id can be suspended as req says
// and registers the suspend; run then takes the snapshot and commits it.
// A caller that answers before the outcome (an asynchronous suspend)
// returns after Begin and runs run in the background: Progress follows
// it. Every refusal is a *lifecycle.Error or an *Error saying what to do;
// run is always called once Begin succeeds, or the suspend stays
// registered.
func (sp *Suspender) Begin(ctx context.Context, id, why string, req Request) (run func(context.Context) error, err error) {
	sess, err := sp.Store.GetSession(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("get session %s: %w", id, err)
	}
	if err := lifecycle.Suspendable(sess); err != nil {
		return nil, err
	}
	if req.Interrupt {
		if k := sess.Spec.Agent.Kind; k != api.AgentLLM && k != api.AgentExternal {
			return nil, &Error{http.StatusBadRequest, api.CodeBadRequest, fmt.Sprintf("Session %s runs a script, whose steps cannot be interrupted: a step cut short would fail the script. Suspend it without interrupt, once its running step has finished.", id)}
		}
	}
	op, c, err := sp.start(id, req)
	if err != nil {
		return nil, err
	}
	sp.Ops.setLastErr(id, nil)
	return func(ctx context.Context) error {
		defer sp.Ops.Finish(id, op)
		err := sp.run(ctx, sess, c, op, why)
		if err != nil {
			sp.Ops.setLastErr(id, err)
		}
		return err
	}, nil
}

// start registers a suspend of the session id by its connected remote.
func (sp *Suspender) start(id string, req Request) (*Op, *gateway.Conn, error) {
	c := sp.Hub.Get(id)
	if c == nil {
		return nil, nil, conflict("Session %s has no remote connected right now; suspend it once its remote is back.", id)
	}
	if c.Version < api.SnapshotsSince {
		return nil, nil, conflict("The remote of session %s speaks gateway protocol version %d, which cannot take workspace snapshots (version %d and later can): upgrade the remote (a newer outpost binary on the machine) to suspend its sessions.",
			id, c.Version, api.SnapshotsSince)
	}
	if why := sp.Ops.UnrestoredWhy(id, c.Epoch); why != "" {
		return nil, nil, conflict("Session %s cannot be suspended: its machine could not restore its workspace snapshot (%s), so the workspace there is not the session's, and a snapshot of it would replace the one the server keeps. The snapshot is kept; the session goes on running.",
			id, strings.TrimSuffix(why, "."))
	}
	op := sp.Ops.StartSuspend(id, c.Epoch, fmt.Sprintf("%s-%d", id, c.Epoch), req, sp.Now())
	if op == nil {
		if cur := sp.Ops.Get(id); cur != nil && cur.Checkpoint {
			return nil, nil, conflict("A checkpoint of session %s is being taken; suspend it again in a moment.", id)
		}
		return nil, nil, conflict("Session %s is being suspended already.", id)
	}
	return op, c, nil
}

// run takes the snapshot of a registered suspend and commits it.
func (sp *Suspender) run(ctx context.Context, sess store.Session, c *gateway.Conn, op *Op, why string) error {
	id := sess.ID
	start := op.Started
	if op.Req.Interrupt {
		sp.interrupt(ctx, c)
	}
	info, err := Take(ctx, c, op)
	if err != nil {
		c.Gate.Unpause()
		_ = sp.Blobs.Delete(context.WithoutCancel(ctx), op.Key)
		sp.Failed(audit.Without(ctx), c, err) // a failed suspend leaves no entry
		sp.Count(context.WithoutCancel(ctx), sess.OutpostID, err)
		return err
	}
	info.DurationMS = max(info.DurationMS, sp.Now().Sub(start).Milliseconds())
	err = sp.commit(ctx, c, op, info, why)
	sp.Count(context.WithoutCancel(ctx), sess.OutpostID, err)
	if err != nil {
		c.Gate.Unpause()
		sp.Failed(audit.Without(ctx), c, err) // a failed suspend leaves no entry
		return err
	}
	sp.Hub.End(id, "The session is suspended; its workspace snapshot is kept by the server.")
	return nil
}

// interrupt stops the calls in flight on c: the gate is paused first, so
// no other call starts; each one stopped is marked so that its result
// reads as interrupted (TakeInterrupted), and the remote told to cancel it.
func (sp *Suspender) interrupt(ctx context.Context, c *gateway.Conn) {
	c.Gate.Pause()
	for _, seq := range c.Gate.InFlight() {
		sp.Ops.MarkInterrupted(c.SessionID, seq, fmt.Sprintf("Interrupted: the session was suspended while call %d ran (suspend with interrupt), so the call was stopped before it finished; its output up to then is above. Run it again if it is still needed.", seq))
		if err := c.Send(ctx, api.Frame{Type: api.FrameCancel, Seq: seq}); err != nil {
			sp.Log.Warn("cannot cancel a call for a suspend", "session", c.SessionID, "seq", seq, "err", err)
		}
	}
}

// Progress says where the suspend of the session sess (as stored) stands;
// the caller adds the calls it waits for (Calls).
func (sp *Suspender) Progress(sess store.Session) api.SuspendProgress {
	p := api.SuspendProgress{SessionID: sess.ID, State: api.SuspendNone}
	op := sp.Ops.Get(sess.ID)
	switch {
	case op != nil && !op.Checkpoint:
		p.State, p.Interrupt, p.StartedMS = api.SuspendWaiting, op.Req.Interrupt, op.Started.UnixMilli()
		wait := op.Req.Wait
		if wait <= 0 {
			wait = CallWait
		}
		p.WaitS = int(wait / time.Second)
		if op.Snapshotting() {
			p.State = api.SuspendSnapshotting
		}
	case sess.Status == api.StatusSuspended:
		p.State = api.SuspendDone
	case sp.Ops.LastErr(sess.ID) != nil:
		p.State = api.SuspendFailed
	}
	return p
}

// commit stores the snapshot, has the state machine move the session to
// suspended, and then deletes the snapshot it replaced.
func (sp *Suspender) commit(ctx context.Context, c *gateway.Conn, op *Op, info api.SnapshotInfo, why string) error {
	// The audit entry of the suspend, if ctx carries one, goes with the
	// move to suspended below, not with the snapshot's row.
	prev, err := Put(audit.Without(ctx), sp.Store, sp.Blobs, c.SessionID, op, info, sp.Now(), "snapshot")
	if err != nil {
		return err
	}
	value, _ := json.Marshal(info)
	ok := true
	where := fmt.Sprintf("Kept in the server's blob store as %s until the session resumes or ends (at most %s).", op.Key, sp.TTL)
	reason := fmt.Sprintf("%s Its workspace snapshot (%s) is kept by the server; resume it to go on.", why, api.ByteSize(info.Size))
	taken := api.Event{Type: api.EventSnapshot, AcceptorID: c.AcceptorID, OK: &ok, Value: value,
		Reason: fmt.Sprintf("Took a snapshot of the workspace: %s. %s", Taken(info), where)}
	if err := sp.Machine.Suspend(ctx, c.SessionID, op.Epoch, reason, taken); err != nil {
		UndoPut(context.WithoutCancel(ctx), sp.Store, sp.Blobs, sp.Log, c.SessionID, prev, op.Key)
		return err
	}
	DeleteReplaced(ctx, sp.Blobs, sp.Log, c.SessionID, prev, op.Key)
	sp.Log.Info("session suspended", "session", c.SessionID, "snapshot_bytes", info.Size, "key", op.Key)
	return nil
}
