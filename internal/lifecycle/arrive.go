package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// Arrival is what a remote's hello tells of it: the claim it serves and
// where it connected.
type Arrival struct {
	// Epoch is the claim epoch the remote's connect token stands for.
	Epoch int64
	// AcceptorID is the claimer whose remote said hello.
	AcceptorID string
	// Owner is the replica the remote connected to; it owns the session
	// from now on.
	Owner string
	// Capabilities are what the remote reported; nil keeps the
	// session's.
	Capabilities *api.Capabilities
	// ResumeNote, for a session that resumes on this remote, says what
	// is restored, given the last call whose result the server holds; nil
	// says nothing.
	ResumeNote func(lastSeq int64) string
	// ForkedFrom is the session a fork was forked from (its
	// spec.forked_from); "" for a session that is no fork. A fork's first
	// machine starts it where that session was, which its resume event
	// says instead of a move.
	ForkedFrom string
	// FirstCall, when set, is recorded with the arrival, with its event
	// FirstCallEvent, if the session never ran before (no remote arrived,
	// no call recorded): the first call of its plan, which the runner
	// then sends without a commit of its own. A call is still recorded
	// before it is sent, and once.
	FirstCall      *store.Call
	FirstCallEvent api.Event
}

// Arrive records a remote's hello: from now on its connection holds the
// claim (the entry's live_until a grace ahead of now, kept there while it
// stays connected) and a claimed or resuming session runs. The Mutation is
// empty (Session nil) when the session is over or suspended: the remote
// is told to end. A claim that lapsed or moved since the remote's token
// was checked is refused (ErrConflict). prevOwner is the replica that
// owned the session before, "" for none.
func Arrive(sess store.Session, e store.QueueEntry, now time.Time, a Arrival, grace time.Duration) (m store.Mutation, prevOwner string, err error) {
	if api.IsFinal(sess.Status) || sess.Status == api.StatusSuspended {
		return store.Mutation{}, "", nil
	}
	if !e.Held(now) || e.Epoch != a.Epoch {
		return store.Mutation{}, "", refuse(ErrConflict, "the claim this remote served has lapsed or moved to another machine")
	}
	fresh := sess.StartedAt == nil && sess.LastSeq == 0 && sess.Status != api.StatusResuming
	e.LiveUntil = now.Add(grace)
	prevOwner, e.Owner = e.Owner, a.Owner
	if a.Capabilities != nil {
		sess.Capabilities = a.Capabilities
	}
	m.Events = append(m.Events, api.Event{Type: api.EventRemoteConnected, Time: now.UnixMilli(), AcceptorID: a.AcceptorID,
		Capabilities: a.Capabilities, Reason: fmt.Sprintf("The remote of %s connected.", a.AcceptorID)})
	if sess.Status == api.StatusResuming {
		note := ""
		if a.ResumeNote != nil {
			note = a.ResumeNote(sess.LastSeq)
		}
		reason := fmt.Sprintf("The session moved to a new machine (%s); it continues after call %d, the last whose result the server holds. %s", a.AcceptorID, sess.LastSeq, note)
		if a.ForkedFrom != "" && sess.StartedAt == nil {
			reason = fmt.Sprintf("This session is a fork of session %s: it starts on its own machine (%s) where that session was, after call %d. %s", a.ForkedFrom, a.AcceptorID, sess.LastSeq, note)
		}
		m.Events = append(m.Events, api.Event{Type: api.EventResume, Time: now.UnixMilli(), AcceptorID: a.AcceptorID, Reason: reason})
	}
	if sess.Status != api.StatusRunning {
		sess.Status, sess.StatusDetail, sess.Reason = api.StatusRunning, api.DetailWorking, fmt.Sprintf("Running on %s.", a.AcceptorID)
		m.Events = append(m.Events, StatusEvent(sess, now))
	}
	if a.FirstCall != nil && fresh {
		m.Calls = append(m.Calls, *a.FirstCall)
		m.Events = append(m.Events, a.FirstCallEvent)
	}
	if sess.StartedAt == nil {
		sess.StartedAt = &now
	}
	sess.UpdatedAt = now
	e.SessionStatus = QueueSessionStatus(sess.Status)
	e.UpdatedAt = now
	m.Session, m.Entry = &sess, &e
	return m, prevOwner, nil
}

// Arrive records the hello of a remote of session sessionID (see the
// function Arrive), its connection holding the claim for ReconnectGrace,
// and publishes it. It returns the session as it stands — over or
// suspended when the remote is to end — and the replica that owned the
// session before.
func (mc *Machine) Arrive(ctx context.Context, sessionID string, a Arrival) (sess store.Session, prevOwner string, err error) {
	now := mc.opts.Now()
	m, err := mc.opts.Store.UpdateSession(ctx, sessionID, func(s store.Session, e store.QueueEntry) (store.Mutation, error) {
		sess = s
		m, prev, err := Arrive(s, e, now, a, mc.opts.ReconnectGrace)
		prevOwner = prev
		if m.Session != nil {
			sess = *m.Session
		}
		return m, err
	})
	if err != nil {
		return sess, "", err
	}
	if m.Session != nil {
		mc.opts.Hooks.Committed(sessionID, m)
	}
	return sess, prevOwner, nil
}
