package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/audit"
	"github.com/outpost-sh/outpost/internal/gateway"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/redact"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/suspend"
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

// onSuspended hands a remote's suspended (or checkpointed) frame to the
// suspend (or checkpoint) waiting for it.
func (s *Server) onSuspended(c *gateway.Conn, f api.Frame) {
	if !s.suspends.Deliver(c.SessionID, c.Epoch, f) {
		s.log.Warn(f.Type+" frame without its request in progress", "session", c.SessionID)
	}
}

// suspendHandler is POST /v1/sessions/{session}/suspend. Its optional
// body (api.SuspendRequest) bounds the wait for running calls, or stops
// them, and asks for an asynchronous answer: 202 with the suspend's
// progress and a Location to follow it at, the suspend going on in the
// background (its failure is on the transcript and in the progress).
func (s *Server) suspendHandler(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	var req api.SuspendRequest
	if err := decodeOptional(w, r, &req); err != nil {
		return err
	}
	if req.WaitS < 0 || req.WaitS > api.MaxSuspendWaitS {
		return errBadRequest("wait_s %d is out of range: give 1 to %d seconds, or 0 for the server's bound (%d).", req.WaitS, api.MaxSuspendWaitS, api.MaxSuspendWaitS)
	}
	async := req.Async || preferAsync(r)
	sess, err := s.sessionFor(ctx, r.PathValue("session"))
	if err != nil {
		return err
	}
	// An asynchronous suspend is owned by the server, which waits for it
	// when it stops; its end (the server's runCtx) withdraws a suspend
	// still waiting for a call.
	if async && !s.track() {
		return errConflict("The server is stopping; suspend session %s again in a moment.", sess.ID)
	}
	run, err := s.suspender().Begin(ctx, sess.ID, "Suspended by a user.", suspend.Request{Wait: time.Duration(req.WaitS) * time.Second, Interrupt: req.Interrupt})
	if err != nil {
		if async {
			s.wg.Done()
		}
		return err
	}
	// The suspend's audit entry names the caller; the store appends it in
	// the transaction that suspends the session.
	actx := s.audited(context.WithoutCancel(ctx), audit.SessionSuspend, audit.Object{Kind: audit.ObjectSession, ID: sess.ID}, nil, nil)
	if async {
		entry, _ := audit.Pending(actx)
		// The answer tells of the calls as the suspend found them: read
		// once the run has begun, an interrupted call may already be gone
		// and the answer say nothing of it.
		progress, perr := s.suspendProgress(ctx, sess.ID)
		go func() {
			defer s.wg.Done()
			_ = run(audit.With(s.runCtx, entry))
		}()
		if perr != nil {
			return perr
		}
		w.Header().Set("Location", "/v1/sessions/"+sess.ID+"/suspend")
		writeJSON(w, http.StatusAccepted, progress)
		return nil
	}
	// A suspend outlives a caller that hangs up: it stops halfway otherwise.
	if err := run(actx); err != nil {
		return err
	}
	if sess, err = s.sessionFor(ctx, sess.ID); err != nil {
		return err
	}
	return s.writeSession(ctx, w, sess)
}

// preferAsync reports whether r asks for an asynchronous answer (RFC 7240).
func preferAsync(r *http.Request) bool {
	for _, v := range r.Header.Values("Prefer") {
		for _, p := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(p), "respond-async") {
				return true
			}
		}
	}
	return false
}

// suspendProgressHandler is GET /v1/sessions/{session}/suspend.
func (s *Server) suspendProgressHandler(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	sess, err := s.sessionFor(ctx, r.PathValue("session"))
	if err != nil {
		return err
	}
	p, err := s.suspendProgress(ctx, sess.ID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

// suspendProgress says where the suspend of session id stands, with the
// calls it waits for.
func (s *Server) suspendProgress(ctx context.Context, id string) (api.SuspendProgress, error) {
	sess, err := s.store.GetSession(ctx, id)
	if err != nil {
		return api.SuspendProgress{}, fmt.Errorf("get session %s: %w", id, err)
	}
	p := s.suspender().Progress(sess)
	if p.State == api.SuspendFailed {
		p.Error = clientMessage(s.suspends.LastErr(id))
	}
	c := s.hub.Get(id)
	if p.State != api.SuspendWaiting || c == nil {
		return p, nil
	}
	seqs := c.Gate.InFlight()
	if len(seqs) == 0 {
		return p, nil
	}
	calls, err := s.store.ListCalls(ctx, id)
	if err != nil {
		return api.SuspendProgress{}, fmt.Errorf("list calls of %s: %w", id, err)
	}
	red := redact.NewSet(sess.Secrets)
	for _, call := range calls {
		if slices.Contains(seqs, call.Seq) {
			p.Calls = append(p.Calls, api.RunningCall{Seq: call.Seq, Tool: call.Tool,
				Target: red.String(api.CallTarget(call.Tool, call.Args)), StartedMS: call.CreatedAt.UnixMilli()})
		}
	}
	return p, nil
}

// resumeHandler is POST /v1/sessions/{session}/resume.
func (s *Server) resumeHandler(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	sess, err := s.sessionFor(ctx, r.PathValue("session"))
	if err != nil {
		return err
	}
	if err := s.checkResumeBudget(ctx, sess); err != nil {
		return err
	}
	actx := s.audited(ctx, audit.SessionResume, audit.Object{Kind: audit.ObjectSession, ID: sess.ID}, nil, nil)
	resumed, err := s.life.Resume(actx, sess.ID, "Resumed by a user.")
	if err != nil {
		return err
	}
	return s.writeSession(ctx, w, resumed)
}

// suspender returns the suspend driver over the server's parts.
func (s *Server) suspender() *suspend.Suspender {
	return &suspend.Suspender{
		Ops: &s.suspends, Hub: s.hub, Store: s.store, Blobs: s.blobs, Machine: s.life, Log: s.log,
		Now:    func() time.Time { return s.now() },
		TTL:    s.opts.SnapshotTTL,
		Count:  s.countSuspend,
		Failed: s.recordSnapshotFailure,
	}
}

// clientMessage is the sentence a client is shown for a failed suspend or
// checkpoint.
func clientMessage(cause error) string {
	var he *httpError
	var le *lifecycle.Error
	var se *suspend.Error
	switch {
	case errors.As(cause, &he):
		return he.message
	case errors.As(cause, &le):
		return lifecycleAnswer(le).message
	case errors.As(cause, &se):
		return se.Message
	}
	return cause.Error()
}

// recordSnapshotFailure writes a failed suspend on the transcript.
func (s *Server) recordSnapshotFailure(ctx context.Context, c *gateway.Conn, cause error) {
	msg := clientMessage(cause)
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
		s.suspends.MarkUnrestored(c.SessionID, c.Epoch, info.Error)
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
	if seq, ok := suspend.CheckpointSeq(from); ok {
		return suspend.CheckpointNote(info, from, seq, lastSeq)
	}
	return fmt.Sprintf("Its workspace is restored there from its snapshot (%s, %d files) before the next call; processes and memory of the old machine are not.",
		api.ByteSize(info.Size), info.Files)
}
