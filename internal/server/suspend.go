package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/gateway"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/store"
)

// Suspend and resume. A running session is suspended through its remote:
// the server stops sending calls (gateway.CallGate), waits until none is in flight,
// sends suspend; the remote archives its workspace, uploads it (putSnapshot)
// and answers suspended. The server then stores the snapshot's metadata,
// and the state machine moves the session to suspended and its queue
// entry's session_status to suspended in one transaction
// (lifecycle.Machine.Suspend); the server ends the connection, the remote
// exits 0 and its claimer releases the claim (the release keeps a
// suspended session out of the claimable queue). A resume
// (lifecycle.Machine.Resume) puts the entry back as pending, kind resume;
// the next remote gets the snapshot in its welcome and restores it before
// any call. A failed suspend changes nothing but the transcript: the
// session goes on running.

const (
	// suspendCallWait bounds the wait for a call in flight to finish
	// before a suspend gives up.
	suspendCallWait = 10 * time.Minute
	// suspendWait bounds the remote's snapshot and upload.
	suspendWait = 15 * time.Minute
)

// suspendOp is one suspend in progress.
type suspendOp struct {
	epoch int64
	key   string // the blob key the upload goes to
	// checkpoint is set for a checkpoint (checkpoint.go): the remote
	// answers checkpointed and goes on.
	checkpoint bool
	// suspended receives the remote's suspended frame.
	suspended chan api.Frame

	mu     sync.Mutex // guards upload
	upload *snapshotUpload
}

// snapshotUpload is what putSnapshot made of the remote's upload.
type snapshotUpload struct {
	size   int64
	sha256 string
	err    string // why it was refused; "" when stored
	status int    // the HTTP status of the refusal
}

func (op *suspendOp) setUpload(u snapshotUpload) {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.upload = &u
}

func (op *suspendOp) uploaded() *snapshotUpload {
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.upload
}

// suspendOps tracks the suspends in progress, one per session at most. The
// zero value is ready.
type suspendOps struct {
	mu  sync.Mutex // guards ops, failed and unrestored
	ops map[string]*suspendOp
	// failed holds, by session, the UpdatedAt of a session whose automatic
	// suspend failed: it is not tried again until the session changes.
	failed map[string]time.Time
	// unrestored holds, by session, the claim epoch whose remote could not
	// restore the session's snapshot, and why: its workspace is not the
	// session's, and a snapshot of it (suspend or checkpoint) would replace
	// the good one.
	unrestored map[string]unrestoredClaim
}

// unrestoredClaim is a claim whose remote could not restore the snapshot.
type unrestoredClaim struct {
	epoch int64
	why   string
}

// markUnrestored records that the remote of the claim epoch could not
// restore the session's snapshot.
func (o *suspendOps) markUnrestored(sessionID string, epoch int64, why string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.unrestored == nil {
		o.unrestored = map[string]unrestoredClaim{}
	}
	o.unrestored[sessionID] = unrestoredClaim{epoch: epoch, why: why}
}

// unrestoredWhy returns why the claim epoch's workspace is not the session's
// snapshot, or "" when nothing says so. An entry of an older claim goes: a
// new claim restores again.
func (o *suspendOps) unrestoredWhy(sessionID string, epoch int64) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	u, ok := o.unrestored[sessionID]
	if ok && u.epoch < epoch {
		delete(o.unrestored, sessionID)
		return ""
	}
	return u.why
}

// autoFailed reports whether an automatic suspend of the session failed
// while it was as updated at.
func (o *suspendOps) autoFailed(sessionID string, updated time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	at, ok := o.failed[sessionID]
	if ok && !at.Equal(updated) {
		delete(o.failed, sessionID)
		return false
	}
	return ok
}

func (o *suspendOps) markAutoFailed(sessionID string, updated time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failed == nil {
		o.failed = map[string]time.Time{}
	}
	o.failed[sessionID] = updated
}

// start registers a suspend of the session by the claim of epoch, or
// returns nil when one is in progress.
func (o *suspendOps) start(sessionID string, epoch int64, key string) *suspendOp {
	return o.startOp(sessionID, epoch, key, false)
}

// startOp is start, for a checkpoint when checkpoint is set.
func (o *suspendOps) startOp(sessionID string, epoch int64, key string, checkpoint bool) *suspendOp {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ops[sessionID] != nil {
		return nil
	}
	if o.ops == nil {
		o.ops = map[string]*suspendOp{}
	}
	op := &suspendOp{epoch: epoch, key: key, checkpoint: checkpoint, suspended: make(chan api.Frame, 1)}
	o.ops[sessionID] = op
	return op
}

func (o *suspendOps) get(sessionID string) *suspendOp {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ops[sessionID]
}

func (o *suspendOps) finish(sessionID string, op *suspendOp) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ops[sessionID] == op {
		delete(o.ops, sessionID)
	}
}

// onSuspended hands a remote's suspended (or checkpointed) frame to the
// suspend (or checkpoint) waiting for it.
func (s *Server) onSuspended(c *gateway.Conn, f api.Frame) {
	op := s.suspends.get(c.SessionID)
	if op == nil || op.epoch != c.Epoch || op.checkpoint != (f.Type == api.FrameCheckpointed) {
		s.log.Warn(f.Type+" frame without its request in progress", "session", c.SessionID)
		return
	}
	select {
	case op.suspended <- f:
	default:
	}
}

// suspendHandler is POST /v1/sessions/{session}/suspend.
func (s *Server) suspendHandler(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	sess, err := s.sessionFor(ctx, r.PathValue("session"))
	if err != nil {
		return err
	}
	// A suspend outlives a caller that hangs up: it stops halfway otherwise.
	if err := s.suspend(context.WithoutCancel(ctx), sess.ID, "Suspended by a user."); err != nil {
		return err
	}
	if sess, err = s.sessionFor(ctx, sess.ID); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toAPISession(sess))
	return nil
}

// resumeHandler is POST /v1/sessions/{session}/resume.
func (s *Server) resumeHandler(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	sess, err := s.sessionFor(ctx, r.PathValue("session"))
	if err != nil {
		return err
	}
	resumed, err := s.life.Resume(ctx, sess.ID, "Resumed by a user.")
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toAPISession(resumed))
	return nil
}

// suspend suspends a running session through its remote; see the top of
// this file. why opens the session's new reason. Every refusal is an
// *httpError or a *lifecycle.Error saying what to do.
func (s *Server) suspend(ctx context.Context, id, why string) error {
	sess, err := s.store.GetSession(ctx, id)
	if err != nil {
		return fmt.Errorf("get session %s: %w", id, err)
	}
	if err := lifecycle.Suspendable(sess); err != nil {
		return err
	}
	c := s.hub.Get(id)
	if c == nil {
		return errConflict("Session %s has no remote connected right now; suspend it once its remote is back.", id)
	}
	if c.Version < api.SnapshotsSince {
		return errConflict("The remote of session %s speaks gateway protocol version %d, which cannot take workspace snapshots (version %d and later can): upgrade the remote (a newer outpost binary on the machine) to suspend its sessions.",
			id, c.Version, api.SnapshotsSince)
	}
	if why := s.suspends.unrestoredWhy(id, c.Epoch); why != "" {
		return errConflict("Session %s cannot be suspended: its machine could not restore its workspace snapshot (%s), so the workspace there is not the session's, and a snapshot of it would replace the one the server keeps. The snapshot is kept; the session goes on running.",
			id, strings.TrimSuffix(why, "."))
	}
	op := s.suspends.start(id, c.Epoch, fmt.Sprintf("%s-%d", id, c.Epoch))
	if op == nil {
		if cur := s.suspends.get(id); cur != nil && cur.checkpoint {
			return errConflict("A checkpoint of session %s is being taken; suspend it again in a moment.", id)
		}
		return errConflict("Session %s is being suspended already.", id)
	}
	defer s.suspends.finish(id, op)
	start := s.now()
	info, err := s.takeSnapshot(ctx, c, op)
	if err != nil {
		c.Gate.Unpause()
		_ = s.blobs.Delete(context.WithoutCancel(ctx), op.key)
		s.recordSnapshotFailure(ctx, c, err)
		s.countSuspend(context.WithoutCancel(ctx), sess.OutpostID, err)
		return err
	}
	info.DurationMS = max(info.DurationMS, s.now().Sub(start).Milliseconds())
	err = s.commitSuspend(ctx, c, op, info, why)
	s.countSuspend(context.WithoutCancel(ctx), sess.OutpostID, err)
	if err != nil {
		c.Gate.Unpause()
		s.recordSnapshotFailure(ctx, c, err)
		return err
	}
	s.hub.End(id, "The session is suspended; its workspace snapshot is kept by the server.")
	return nil
}

// takeSnapshot pauses the session's calls, waits until none is in flight,
// asks the remote for its snapshot and returns it once uploaded and
// checked. The caller unpauses on error.
func (s *Server) takeSnapshot(ctx context.Context, c *gateway.Conn, op *suspendOp) (api.SnapshotInfo, error) {
	c.Gate.Pause()
	wctx, cancel := context.WithTimeout(ctx, suspendCallWait)
	defer cancel()
	if err := c.Gate.WaitIdle(wctx, c.Done()); errors.Is(err, gateway.ErrConnEnded) {
		return api.SnapshotInfo{}, errConflict("The remote of session %s disconnected before the suspend; try again once it is back.", c.SessionID)
	} else if err != nil {
		return api.SnapshotInfo{}, errConflict("A call of session %s is still running after %s; suspend it once the call has finished.", c.SessionID, suspendCallWait)
	}
	return s.askSnapshot(ctx, c, op, api.FrameSuspend)
}

// askSnapshot sends the remote the frame typ (suspend or checkpoint), waits
// for its answer and returns the snapshot once uploaded and checked. No call
// is in flight and the gate is paused.
func (s *Server) askSnapshot(ctx context.Context, c *gateway.Conn, op *suspendOp, typ string) (api.SnapshotInfo, error) {
	if err := c.Send(ctx, api.Frame{Type: typ}); err != nil {
		return api.SnapshotInfo{}, errConflict("The %s could not be sent to the remote of session %s: %v.", typ, c.SessionID, err)
	}
	wctx, cancel := context.WithTimeout(ctx, suspendWait)
	defer cancel()
	var f api.Frame
	select {
	case f = <-op.suspended:
	case <-c.Done():
		return api.SnapshotInfo{}, &httpError{http.StatusBadGateway, api.CodeUnavailable, fmt.Sprintf("The remote of session %s disconnected while it took its snapshot; the session goes on running.", c.SessionID)}
	case <-wctx.Done():
		return api.SnapshotInfo{}, &httpError{http.StatusGatewayTimeout, api.CodeUnavailable, fmt.Sprintf("The remote of session %s took longer than %s to take its snapshot; the session goes on running.", c.SessionID, suspendWait)}
	}
	// The remote's own failure (a file it cannot read) breaks its upload
	// too: its answer says why, so it goes before the upload's, but for a
	// refusal of the server's own (too large, its store failing).
	up := op.uploaded()
	switch {
	case up != nil && up.err != "" && up.status != http.StatusBadGateway:
		code := api.CodeInternal
		if up.status == http.StatusRequestEntityTooLarge {
			code = api.CodeTooLarge
		}
		return api.SnapshotInfo{}, &httpError{up.status, code, up.err + " The session goes on running."}
	case f.Snapshot == nil:
		return api.SnapshotInfo{}, &httpError{http.StatusBadGateway, api.CodeUnavailable, fmt.Sprintf("The remote of session %s answered %s without a snapshot; the session goes on running.", c.SessionID, typ)}
	case f.Snapshot.Error != "":
		return api.SnapshotInfo{}, &httpError{http.StatusBadGateway, api.CodeUnavailable, fmt.Sprintf("The remote of session %s could not take its snapshot: %s The session goes on running.", c.SessionID, lifecycle.Sentence(f.Snapshot.Error))}
	case up != nil && up.err != "":
		return api.SnapshotInfo{}, &httpError{up.status, api.CodeUnavailable, up.err + " The session goes on running."}
	case up == nil:
		return api.SnapshotInfo{}, &httpError{http.StatusBadGateway, api.CodeUnavailable, fmt.Sprintf("The remote of session %s answered %s before its snapshot was uploaded; the session goes on running.", c.SessionID, typ)}
	case f.Snapshot.SHA256 != "" && f.Snapshot.SHA256 != up.sha256, f.Snapshot.Size != 0 && f.Snapshot.Size != up.size:
		return api.SnapshotInfo{}, &httpError{http.StatusBadGateway, api.CodeUnavailable, fmt.Sprintf("The snapshot the server received for session %s (%d bytes, sha256 %s) is not the one its remote sent (%d bytes, sha256 %s); the session goes on running.",
			c.SessionID, up.size, up.sha256, f.Snapshot.Size, f.Snapshot.SHA256)}
	}
	info := *f.Snapshot
	info.Size, info.SHA256, info.Error = up.size, up.sha256, ""
	return info, nil
}

// commitSuspend stores the snapshot, has the state machine move the
// session to suspended, and then deletes the snapshot it replaced.
func (s *Server) commitSuspend(ctx context.Context, c *gateway.Conn, op *suspendOp, info api.SnapshotInfo, why string) error {
	prev, err := s.storeSnapshot(ctx, c.SessionID, op, info, s.now(), "snapshot")
	if err != nil {
		return err
	}
	value, _ := json.Marshal(info)
	ok := true
	where := fmt.Sprintf("Kept in the server's blob store as %s until the session resumes or ends (at most %s).", op.key, s.opts.SnapshotTTL)
	reason := fmt.Sprintf("%s Its workspace snapshot (%s) is kept by the server; resume it to go on.", why, api.ByteSize(info.Size))
	taken := api.Event{Type: api.EventSnapshot, AcceptorID: c.AcceptorID, OK: &ok, Value: value,
		Reason: fmt.Sprintf("Took a snapshot of the workspace: %s. %s", snapshotTaken(info), where)}
	if err := s.life.Suspend(ctx, c.SessionID, op.epoch, reason, taken); err != nil {
		s.undoPutSnapshot(context.WithoutCancel(ctx), c.SessionID, prev, op.key)
		return err
	}
	s.deleteReplaced(ctx, c.SessionID, prev, op.key)
	s.log.Info("session suspended", "session", c.SessionID, "snapshot_bytes", info.Size, "key", op.key)
	return nil
}

// storeSnapshot stores what op uploaded as the session's snapshot (what
// names it in the error: a snapshot or a checkpoint) and returns the
// snapshot it replaced; when it cannot, the upload's blob goes.
func (s *Server) storeSnapshot(ctx context.Context, sessionID string, op *suspendOp, info api.SnapshotInfo, now time.Time, what string) (store.Snapshot, error) {
	sn := store.Snapshot{SessionID: sessionID, BlobKey: op.key, Size: info.Size, SHA256: info.SHA256,
		Files: info.Files, Bytes: info.Bytes, Epoch: op.epoch, CreatedAt: now}
	prev, err := s.store.PutSnapshot(ctx, sn)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		_ = s.blobs.Delete(ctx, op.key)
		return prev, fmt.Errorf("store %s of %s: %w", what, sessionID, err)
	}
	return prev, nil
}

// deleteReplaced deletes the blob of prev, the snapshot the one under key
// replaced, once the new one is committed.
func (s *Server) deleteReplaced(ctx context.Context, sessionID string, prev store.Snapshot, key string) {
	if prev.BlobKey != "" && prev.BlobKey != key {
		if err := s.blobs.Delete(ctx, prev.BlobKey); err != nil {
			s.log.Warn("delete replaced snapshot", "session", sessionID, "key", prev.BlobKey, "err", err)
		}
	}
}

// snapshotTaken says what a snapshot holds and what it took, for its
// event on the transcript.
func snapshotTaken(info api.SnapshotInfo) string {
	return fmt.Sprintf("%s in %d files, %s compressed, in %s",
		api.ByteSize(info.Bytes), info.Files, api.ByteSize(info.Size), time.Duration(info.DurationMS)*time.Millisecond)
}

// recordSnapshotFailure writes a failed suspend on the transcript.
func (s *Server) recordSnapshotFailure(ctx context.Context, c *gateway.Conn, cause error) {
	msg := cause.Error()
	var he *httpError
	var le *lifecycle.Error
	switch {
	case errors.As(cause, &he):
		msg = he.message
	case errors.As(cause, &le):
		msg = lifecycleAnswer(le).message
	}
	ok := false
	ev := []api.Event{{Type: api.EventSnapshot, Time: s.now().UnixMilli(), AcceptorID: c.AcceptorID, OK: &ok, Error: msg,
		Reason: "The suspend failed: " + msg}}
	if err := s.store.AppendEvents(context.WithoutCancel(ctx), c.SessionID, ev); err != nil {
		s.log.Warn("record failed snapshot", "session", c.SessionID, "err", err)
		return
	}
	s.topics.publish(c.SessionID, ev...)
}

// recordSnapshotRestore records a remote's report on restoring its
// welcome's snapshot as a restore event.
func (s *Server) recordSnapshotRestore(ctx context.Context, c *gateway.Conn, info api.SnapshotInfo) {
	ok := info.Error == ""
	if !ok {
		s.suspends.markUnrestored(c.SessionID, c.Epoch, info.Error)
	}
	s.countRestore(ctx, c.SessionID, ok)
	value, _ := json.Marshal(info)
	reason := fmt.Sprintf("Restored the workspace from its snapshot on %s: %s in %d files (%s compressed) in %s.",
		c.AcceptorID, api.ByteSize(info.Bytes), info.Files, api.ByteSize(info.Size), time.Duration(info.DurationMS)*time.Millisecond)
	switch {
	case !ok:
		reason = fmt.Sprintf("Could not restore the workspace from its snapshot on %s: %s Files of the workspace may be missing.", c.AcceptorID, lifecycle.Sentence(info.Error))
	case info.InPlace:
		reason = fmt.Sprintf("The workspace on %s still held its snapshot (%s in %d files), kept on the machine's volume since the suspend: nothing to download.",
			c.AcceptorID, api.ByteSize(info.Bytes), info.Files)
	}
	ev := []api.Event{{Type: api.EventRestore, Time: s.now().UnixMilli(), AcceptorID: c.AcceptorID, OK: &ok, Value: value, Error: info.Error, Reason: reason}}
	if err := s.store.AppendEvents(ctx, c.SessionID, ev); err != nil {
		s.log.Warn("record snapshot restore", "session", c.SessionID, "err", err)
		return
	}
	s.topics.publish(c.SessionID, ev...)
}

// welcomeSnapshot returns the snapshot a resumed session's remote restores,
// or nil.
func (s *Server) welcomeSnapshot(ctx context.Context, c *gateway.Conn, e store.QueueEntry) (*api.SnapshotInfo, error) {
	if e.Kind != api.KindResume || c.Version < api.SnapshotsSince {
		return nil, nil
	}
	// Only the first remote of a claim restores; a reconnect of it has
	// the workspace already (the session is running by then).
	sess, err := s.store.GetSession(ctx, c.SessionID)
	if err != nil {
		return nil, fmt.Errorf("get session to restore: %w", err)
	}
	if sess.Status != api.StatusResuming {
		return nil, nil
	}
	sn, err := s.store.GetSnapshot(ctx, c.SessionID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get snapshot to restore: %w", err)
	}
	c.RestoreFrom = sn
	return &api.SnapshotInfo{Size: sn.Size, SHA256: sn.SHA256, Files: sn.Files, Bytes: sn.Bytes}, nil
}

// resumeNote is the part of a resume event's reason about what the new
// machine gets back: the snapshot, when there is one, else the clones.
func resumeNote(restore []api.GitCloneArgs, info *api.SnapshotInfo, from store.Snapshot, lastSeq int64) string {
	if info == nil {
		return restoreNote(restore)
	}
	if seq, ok := checkpointSeq(from); ok {
		return checkpointNote(info, from, seq, lastSeq)
	}
	return fmt.Sprintf("Its workspace is restored there from its snapshot (%s, %d files) before the next call; processes and memory of the old machine are not.",
		api.ByteSize(info.Size), info.Files)
}
