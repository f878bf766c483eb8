package lifecycle

import (
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// Suspend and resume. A running session is suspended through its remote,
// which archives and uploads its workspace; what the server then commits
// is Suspend: the session suspended, its entry kept out of the queue
// (session_status suspended, kind resume) while its holder still holds
// it. The holder releases once its remote has exited, and requeue leaves
// a suspended session waiting for its resume, not for a machine. Resume
// (or ResumeIn, inside a user's message) puts it back in the queue, kind
// resume: its next machine restores the snapshot.

// Suspendable refuses to start the suspend of a session that is not
// running: only a running session has a remote to take its snapshot.
func Suspendable(sess store.Session) error {
	if sess.Status != api.StatusRunning {
		return refuse(ErrConflict, "Session %s is %s: only a running session can be suspended.", sess.ID, sess.Status)
	}
	return nil
}

// Suspend moves a running session to suspended once the remote of its
// claim epoch has taken its workspace snapshot. reason is the session's
// new reason; snapshot is the event that records the snapshot, written
// before the new status. The entry stays with its holder — who releases it
// once its remote has exited — but reads session_status suspended and kind
// resume, so no claim takes it and its next machine restores the
// snapshot. A session that changed while its remote took the snapshot (no
// longer running, claimed anew, its entry dropped) is refused: the
// snapshot is not of its current state.
func Suspend(sess store.Session, e store.QueueEntry, now time.Time, epoch int64, reason string, snapshot api.Event) (store.Mutation, error) {
	if !RunsUnder(sess, e, epoch) {
		return store.Mutation{}, refuse(ErrConflict, "Session %s changed while it was being suspended (it is %s now); it was not suspended.", sess.ID, sess.Status)
	}
	sess.Status, sess.StatusDetail, sess.Reason = api.StatusSuspended, "", reason
	sess.UpdatedAt = now
	e.SessionStatus = api.QueueSessionSuspended
	e.Kind = api.KindResume
	e.UpdatedAt = now
	return store.Mutation{Session: &sess, Entry: &e, Events: []api.Event{snapshot, StatusEvent(sess, now)}}, nil
}

// RunsUnder reports whether sess is running under the claim of epoch: a
// snapshot the remote of that claim took (for a suspend or a checkpoint)
// is of the session's current workspace.
func RunsUnder(sess store.Session, e store.QueueEntry, epoch int64) bool {
	return sess.Status == api.StatusRunning && e.Epoch == epoch && !e.Deleted
}

// SuspendDue reports whether sess is an llm session that has waited for
// its user past its limits.suspend_after_idle_s at now, and the reason its
// automatic suspend opens with.
func SuspendDue(sess store.Session, now time.Time) (why string, due bool) {
	after := time.Duration(sess.Spec.Limits.SuspendAfterIdleS) * time.Second
	due = after > 0 && sess.Spec.Agent.Kind == api.AgentLLM && sess.Status == api.StatusRunning &&
		sess.StatusDetail == api.DetailWaitingForUser && !now.Before(sess.UpdatedAt.Add(after))
	if !due {
		return "", false
	}
	return fmt.Sprintf("Suspended after waiting %s for the user (limits.suspend_after_idle_s); a message resumes it.", after), true
}

// SnapshotExpiry is what becomes of a snapshot the store lists as expired
// (its session ended, or it is older than the snapshot TTL).
type SnapshotExpiry struct {
	// Keep: the session still needs the snapshot — it runs or resumes,
	// and its machine restores it (or restores it after a lapse). It goes
	// when the session ends.
	Keep bool
	// End, when set, ends the session before its snapshot is deleted: it
	// stayed suspended longer than the server keeps snapshots.
	End *Ending
}

// ExpireSnapshot decides, from its session, what becomes of an expired
// snapshot; ttl is how long the server keeps snapshots.
func ExpireSnapshot(sess store.Session, ttl time.Duration) SnapshotExpiry {
	switch {
	case sess.Status == api.StatusSuspended:
		return SnapshotExpiry{End: &Ending{Status: api.StatusExit, Detail: api.DetailInactivity,
			Reason: fmt.Sprintf("The session stayed suspended longer than the server keeps snapshots (%s); its snapshot was deleted.", ttl)}}
	case !api.IsFinal(sess.Status):
		return SnapshotExpiry{Keep: true}
	}
	return SnapshotExpiry{}
}
