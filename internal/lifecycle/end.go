package lifecycle

import (
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// End moves a session to a final status: the rows to commit, or an empty
// Mutation (Session nil) when the session had ended already.
func End(sess store.Session, e store.QueueEntry, now time.Time, status, detail, reason string, keep bool) store.Mutation {
	if api.IsFinal(sess.Status) {
		return store.Mutation{}
	}
	var m store.Mutation
	EndIn(&sess, e, &m, now, status, detail, reason, keep)
	return m
}

// EndIn is End folded into a transaction that writes more (a session
// runner ends a session in the transaction of its last result): it adds to
// m the session's final status, its status and end events and, for a live
// entry, the entry marked terminated — a pending one, which nobody holds
// to release, left ended (listed with keep, deleted without).
func EndIn(sess *store.Session, e store.QueueEntry, m *store.Mutation, now time.Time, status, detail, reason string, keep bool) {
	sess.Status, sess.StatusDetail, sess.Reason = status, detail, reason
	sess.UpdatedAt, sess.EndedAt = now, &now
	m.Session = sess
	m.Events = append(m.Events, StatusEvent(*sess, now), api.Event{Type: api.EventEnd, Time: now.UnixMilli(), Status: status, StatusDetail: detail, Reason: reason})
	if live(e) {
		e.SessionStatus = api.QueueSessionTerminated
		e.UpdatedAt = now
		if e.Phase == api.PhasePending {
			endEntry(&e, now, keep) // nobody holds it: nothing to release
		}
		m.Entry = &e
	}
}

// endEntry leaves the pending entry of an ended session as clients of the
// fleet API expect to see it: listed, unclaimed, session_status
// terminated, so that a watcher learns the session ended (and cleans up
// what it keeps for it) before the entry goes. The ended-entry sweep
// deletes it after the retention; without keep it is deleted at once.
func endEntry(e *store.QueueEntry, now time.Time, keep bool) {
	e.SessionStatus = api.QueueSessionTerminated
	e.UpdatedAt = now
	e.Deleted = !keep
}

// Drop deletes a session's queue entry whatever its claim; the new epoch
// cuts off its remote. The Mutation is empty when there is no live entry.
func Drop(e store.QueueEntry, now time.Time) store.Mutation {
	if !live(e) {
		return store.Mutation{}
	}
	e.Deleted, e.UpdatedAt = true, now
	e.Epoch++
	return store.Mutation{Entry: &e}
}

// Resume puts a suspended session back in its queue, kind resume: the next
// machine restores its snapshot. why opens the session's new reason. A
// session that is not suspended is refused.
func Resume(sess store.Session, e store.QueueEntry, now time.Time, why string) (store.Mutation, error) {
	if sess.Status != api.StatusSuspended {
		return store.Mutation{}, refuse(ErrConflict, "Session %s is %s, not suspended: only a suspended session can be resumed.", sess.ID, sess.Status)
	}
	var m store.Mutation
	ResumeIn(&sess, &e, &m, now, why)
	return m, nil
}

// ResumeIn is Resume, without its check, folded into a transaction that
// writes more (a user's message that resumes the session). An entry whose
// holder has not released it yet stays out of the queue until it does
// (its release then makes it pending).
func ResumeIn(sess *store.Session, e *store.QueueEntry, m *store.Mutation, now time.Time, why string) {
	sess.Status, sess.StatusDetail = api.StatusResuming, api.DetailWaitingForMachine
	sess.Reason = why + " Waiting for a machine to restore its workspace."
	sess.UpdatedAt = now
	m.Session = sess
	m.Events = append(m.Events, StatusEvent(*sess, now))
	if !live(*e) {
		return
	}
	e.Kind = api.KindResume
	if e.Phase == api.PhasePending {
		e.SessionStatus = QueueSessionStatus(sess.Status)
	}
	e.UpdatedAt = now
	m.Entry = e
}
