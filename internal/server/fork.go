package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/audit"
	"github.com/outpost-sh/outpost/internal/blob"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/redact"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/suspend"
)

// Forks. POST /v1/sessions/{session}/fork starts N new sessions from one
// point of a session: its workspace and its transcript as they are now.
// A running session's remote takes a checkpoint for it (suspend.Capture:
// calls held back, none in flight, the workspace uploaded, the session
// going on); a suspended session gives the snapshot it is suspended with.
// Each new session is created suspended, with a copy of that snapshot,
// the parent's transcript (the same events at the same seqs, so an llm
// session's conversation folds from it as the parent's did) and calls, and
// then resumed: its first machine restores the workspace before any call,
// as a resumed session's does, and its runner goes on from the parent's
// history — the model from its messages, a script from its next step, an
// outside agent from the transcript. The new sessions' spec.forked_from
// names the parent, which goes on untouched but for a fork event.

// forkPoint is what a fork starts its sessions from.
type forkPoint struct {
	// snap is the snapshot (its blob) each new session gets a copy of.
	snap store.Snapshot
	// events and calls are the parent's transcript and calls at the
	// snapshot; lastSeq its highest call with a stored result.
	events  []api.Event
	calls   []store.Call
	lastSeq int64
	// temp is set when snap's blob was taken for this fork alone, to be
	// deleted once copied.
	temp bool
}

// forkSession is POST /v1/sessions/{session}/fork.
func (s *Server) forkSession(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	var req api.ForkRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if req.Count < 1 || req.Count > api.MaxForkCount {
		return errBadRequest("count %d is out of range: a fork creates 1 to %d sessions.", req.Count, api.MaxForkCount)
	}
	if len(req.Prompt) > maxPrompt {
		return errBadRequest("prompt is longer than %d bytes.", maxPrompt)
	}
	parent, err := s.sessionFor(ctx, r.PathValue("session"))
	if err != nil {
		return err
	}
	// Forks are new sessions: an outpost over its budget takes none, as
	// POST /v1/sessions refuses them.
	o, err := s.store.GetOutpost(ctx, parent.OutpostID)
	if errors.Is(err, store.ErrNotFound) {
		return errConflict("The outpost of session %s was deleted, so it cannot be forked.", parent.ID)
	}
	if err != nil {
		return fmt.Errorf("get outpost %s: %w", parent.OutpostID, err)
	}
	if err := s.checkOutpostBudget(ctx, o); err != nil {
		return err
	}
	if err := forkable(parent); err != nil {
		return err
	}
	if parent.Spec.Agent.Kind == api.AgentLLM && s.opts.LLM == nil {
		return errBadRequest("This server has no model provider configured, so the forks of llm session %s could not run: start it with OUTPOST_LLM_PROVIDER, OUTPOST_LLM_BASE_URL, OUTPOST_LLM_API_KEY and OUTPOST_LLM_MODEL.", parent.ID)
	}
	var pt forkPoint
	if parent.Status == api.StatusRunning {
		pt, err = s.captureForFork(ctx, parent)
	} else {
		pt, err = s.suspendedForkPoint(ctx, parent)
	}
	if err != nil {
		return err
	}
	if pt.temp {
		defer func() { _ = s.blobs.Delete(context.WithoutCancel(ctx), pt.snap.BlobKey) }()
	}
	_, unlock, err := s.lockOutpost(ctx, parent.OutpostID, true)
	if err != nil {
		return err
	}
	defer unlock()
	list := api.SessionList{Items: []api.Session{}}
	var ids []string
	for range req.Count {
		child, err := s.createFork(ctx, parent, pt, req.Prompt)
		if err != nil {
			return err
		}
		out, err := s.apiSession(ctx, child)
		if err != nil {
			return err
		}
		list.Items = append(list.Items, out)
		ids = append(ids, child.ID)
	}
	list.Total = len(list.Items)
	s.recordFork(ctx, parent, ids, pt)
	writeJSON(w, http.StatusCreated, list)
	return nil
}

// forkable refuses a session that cannot be forked: only a running or a
// suspended one has a workspace to start from.
func forkable(sess store.Session) error {
	switch {
	case api.IsFinal(sess.Status):
		return errConflict("Session %s has ended (%s), so it cannot be forked: its machine and workspace are gone. Rerun it to start again from the beginning (outpost sessions rerun %s).", sess.ID, sess.Status, sess.ID)
	case sess.Status != api.StatusRunning && sess.Status != api.StatusSuspended:
		return errConflict("Session %s is %s: only a running or a suspended session can be forked. Try again once it runs.", sess.ID, sess.Status)
	}
	return nil
}

// captureForFork takes a checkpoint of running session parent for a fork,
// with the transcript and calls it matches: they are read while the
// session's calls are still held back.
func (s *Server) captureForFork(ctx context.Context, parent store.Session) (forkPoint, error) {
	c := s.hub.Get(parent.ID)
	if c == nil {
		return forkPoint{}, errConflict("The remote of session %s is not connected, so its workspace cannot be copied now; try again once it is back.", parent.ID)
	}
	if c.Version < api.SnapshotsSince {
		return forkPoint{}, errConflict("The remote of session %s is too old to copy its workspace (protocol %d; forks need %d or later): upgrade the worker, or suspend the session and fork it then.", parent.ID, c.Version, api.SnapshotsSince)
	}
	key := fmt.Sprintf("%s-%d-f%d", parent.ID, c.Epoch, s.now().UnixNano())
	op := s.suspends.StartCheckpoint(parent.ID, c.Epoch, key)
	if op == nil {
		return forkPoint{}, errConflict("Session %s is being suspended or checkpointed; fork it again in a moment.", parent.ID)
	}
	defer s.suspends.Finish(parent.ID, op)
	defer c.Gate.Unpause()
	start := s.now()
	info, err := suspend.Capture(ctx, c, op, 0)
	if err != nil {
		_ = s.blobs.Delete(context.WithoutCancel(ctx), key)
		return forkPoint{}, err
	}
	info.DurationMS = max(info.DurationMS, s.now().Sub(start).Milliseconds())
	pt, err := s.forkHistory(ctx, parent.ID)
	if err != nil {
		_ = s.blobs.Delete(context.WithoutCancel(ctx), key)
		return forkPoint{}, err
	}
	pt.snap = store.Snapshot{SessionID: parent.ID, BlobKey: key, Size: info.Size, SHA256: info.SHA256, Files: info.Files, Bytes: info.Bytes, Epoch: c.Epoch, CreatedAt: s.now()}
	pt.temp = true
	return pt, nil
}

// suspendedForkPoint is the fork point of suspended session parent: the
// snapshot it is suspended with and its transcript.
func (s *Server) suspendedForkPoint(ctx context.Context, parent store.Session) (forkPoint, error) {
	sn, err := s.store.GetSnapshot(ctx, parent.ID)
	if errors.Is(err, store.ErrNotFound) {
		return forkPoint{}, errConflict("Suspended session %s has no workspace snapshot to start forks from; resume it and fork it while it runs.", parent.ID)
	}
	if err != nil {
		return forkPoint{}, fmt.Errorf("get snapshot of %s: %w", parent.ID, err)
	}
	pt, err := s.forkHistory(ctx, parent.ID)
	pt.snap = sn
	return pt, err
}

// forkHistory reads the transcript, calls and last call seq of session id.
func (s *Server) forkHistory(ctx context.Context, id string) (forkPoint, error) {
	var pt forkPoint
	sess, err := s.store.GetSession(ctx, id)
	if err != nil {
		return pt, fmt.Errorf("get session %s: %w", id, err)
	}
	pt.lastSeq = sess.LastSeq
	const page = 1000
	for after := int64(0); ; {
		evs, err := s.store.ListEvents(ctx, id, after, page)
		if err != nil {
			return pt, fmt.Errorf("list events of %s: %w", id, err)
		}
		pt.events = append(pt.events, evs...)
		if len(evs) < page {
			break
		}
		after = evs[len(evs)-1].Seq
	}
	if pt.calls, err = s.store.ListCalls(ctx, id); err != nil {
		return pt, fmt.Errorf("list calls of %s: %w", id, err)
	}
	return pt, nil
}

// createFork creates one session forked from parent at pt, with prompt
// (if any) as a new user message, and resumes it.
func (s *Server) createFork(ctx context.Context, parent store.Session, pt forkPoint, prompt string) (store.Session, error) {
	pe, err := s.store.GetQueueEntry(ctx, parent.ID)
	if err != nil {
		return store.Session{}, fmt.Errorf("get queue entry of %s: %w", parent.ID, err)
	}
	now := s.now()
	spec := parent.Spec
	spec.ForkedFrom = parent.ID
	child := store.Session{
		ID: newSessionID(), OutpostID: parent.OutpostID, Spec: spec, Secrets: maps.Clone(parent.Secrets),
		NetworkPolicy: parent.NetworkPolicy, Status: api.StatusSuspended,
		Reason:    fmt.Sprintf("Forked from session %s; waiting for its copy of the workspace.", parent.ID),
		CreatedAt: now, UpdatedAt: now,
	}
	entry := &store.QueueEntry{
		SessionID: child.ID, OutpostID: parent.OutpostID, Kind: api.KindResume, Platform: pe.Platform,
		Phase: api.PhasePending, SessionStatus: api.QueueSessionSuspended, CreatedAt: now, UpdatedAt: now,
		RemoteBinarySHA: pe.RemoteBinarySHA, Priority: pe.Priority, MaxAttempts: pe.MaxAttempts,
		NetworkPolicy: pe.NetworkPolicy, Requirements: pe.Requirements,
	}
	// The parent's events keep their seqs: they are the child's first.
	events := make([]api.Event, 0, len(pt.events)+3)
	for _, ev := range pt.events {
		ev.Seq, ev.SessionID = 0, ""
		events = append(events, ev)
	}
	red := redact.NewSet(child.Secrets)
	events = append(events, api.Event{Type: api.EventFork, Time: now.UnixMilli(),
		Reason: fmt.Sprintf("Forked from session %s after its event %d: the events above are its transcript, and the workspace is its copy (%s, %d files).",
			parent.ID, len(pt.events), api.ByteSize(pt.snap.Size), pt.snap.Files)})
	if strings.TrimSpace(prompt) != "" {
		events = append(events, api.Event{Type: api.EventMessage, Role: api.RoleUser, Text: red.String(prompt), Time: now.UnixMilli()})
	}
	events = append(events, lifecycle.StatusEvent(child, now))
	actx := s.audited(ctx, audit.SessionCreate, audit.Object{Kind: audit.ObjectSession, ID: child.ID}, map[string]any{
		"outpost_id": child.OutpostID, "title": spec.Title, "agent": spec.Agent.Kind, "forked_from": parent.ID,
	}, child.Secrets)
	if err := s.store.CreateSession(actx, child, entry, events); err != nil {
		return store.Session{}, fmt.Errorf("create fork of %s: %w", parent.ID, err)
	}
	s.metrics.sessionsCreated.Inc()
	key := child.ID + "-fork"
	if err := s.copyBlob(ctx, pt.snap.BlobKey, key); err != nil {
		return store.Session{}, s.failFork(ctx, child.ID, fmt.Errorf("copy the snapshot of %s: %w", parent.ID, err))
	}
	sn := pt.snap
	sn.SessionID, sn.BlobKey, sn.Epoch, sn.CreatedAt = child.ID, key, 0, now
	if _, err := s.store.PutSnapshot(ctx, sn); err != nil && !errors.Is(err, store.ErrNotFound) {
		_ = s.blobs.Delete(context.WithoutCancel(ctx), key)
		return store.Session{}, s.failFork(ctx, child.ID, fmt.Errorf("store the snapshot of fork %s: %w", child.ID, err))
	}
	calls := make([]store.Call, len(pt.calls))
	for i, c := range pt.calls {
		c.SessionID = child.ID
		calls[i] = c
	}
	if _, err := s.store.UpdateSession(ctx, child.ID, func(sess store.Session, _ store.QueueEntry) (store.Mutation, error) {
		if sess.Status != api.StatusSuspended {
			return store.Mutation{}, fmt.Errorf("fork %s is %s before its history was written", sess.ID, sess.Status)
		}
		sess.LastSeq = pt.lastSeq
		return store.Mutation{Session: &sess, Calls: calls}, nil
	}); err != nil {
		return store.Session{}, s.failFork(ctx, child.ID, fmt.Errorf("write the calls of fork %s: %w", child.ID, err))
	}
	if _, err := s.life.Resume(ctx, child.ID, fmt.Sprintf("Forked from session %s.", parent.ID)); err != nil {
		return store.Session{}, s.failFork(ctx, child.ID, err)
	}
	s.log.Info("session forked", "session", child.ID, "forked_from", parent.ID, "events", len(pt.events), "calls", len(calls))
	return s.store.GetSession(ctx, child.ID)
}

// failFork ends fork id, which could not be given its parent's state, and
// returns err.
func (s *Server) failFork(ctx context.Context, id string, err error) error {
	s.log.Error("fork failed", "session", id, "err", err)
	after, endErr := s.life.End(context.WithoutCancel(ctx), id, api.StatusError, api.DetailError,
		"The fork could not be given its parent's workspace and history; see the server's log.")
	if endErr != nil {
		s.log.Warn("end failed fork", "session", id, "err", endErr)
	}
	after()
	return err
}

// copyBlob copies the blob from into the key to.
func (s *Server) copyBlob(ctx context.Context, from, to string) error {
	rc, _, err := s.blobs.Get(ctx, from)
	if err != nil {
		return err
	}
	defer rc.Close()
	_, _, err = s.blobs.Put(ctx, to, rc, 1<<62)
	if errors.Is(err, blob.ErrTooLarge) {
		return fmt.Errorf("snapshot %s: %w", from, err)
	}
	return err
}

// recordFork writes the fork on the parent's transcript, with its audit
// entry.
func (s *Server) recordFork(ctx context.Context, parent store.Session, ids []string, pt forkPoint) {
	now := s.now()
	ev := api.Event{Type: api.EventFork, Time: now.UnixMilli(),
		Reason: fmt.Sprintf("Forked into %d %s after event %d: %s. Each started from this session's workspace (%s, %d files) and transcript; this session goes on.",
			len(ids), plural(len(ids), "session", "sessions"), len(pt.events), strings.Join(ids, ", "), api.ByteSize(pt.snap.Size), pt.snap.Files)}
	actx := s.audited(context.WithoutCancel(ctx), audit.SessionFork, audit.Object{Kind: audit.ObjectSession, ID: parent.ID},
		map[string]any{"count": len(ids), "sessions": ids}, nil)
	m, err := s.store.UpdateSession(actx, parent.ID, func(store.Session, store.QueueEntry) (store.Mutation, error) {
		return store.Mutation{Events: []api.Event{ev}}, nil
	})
	if err != nil {
		s.log.Warn("record fork", "session", parent.ID, "err", err)
		return
	}
	s.topics.publish(parent.ID, m.Events...)
}
