package lifecycle

import (
	"fmt"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// ClaimRequest is what a claim decides on besides the rows it reads.
type ClaimRequest struct {
	// Acceptor is the claimer asking.
	Acceptor string
	// Now is the time of the claim.
	Now time.Time
	// TTL is how long the claim holds without a renewal (Options.ClaimTTL
	// of the server).
	TTL time.Duration
	// TokenHash is the hash of the connect token issued with the claim;
	// the claim stores it for the claim's epoch.
	TokenHash string
	// KeepEnded keeps the entry of a session that ends listed
	// (terminated) rather than deleting it.
	KeepEnded bool
	// TokenID is the id of the token the claimer asked with; the claim
	// remembers it (a renewal too), so revoking that token releases the
	// claim (RevokeClaim). "" for none.
	TokenID string
}

// Claimed is a claim's decision: the rows to write and what they mean.
type Claimed struct {
	// Mutation is what to commit.
	Mutation store.Mutation
	// Renewed: the caller already held the claim and extended it.
	Renewed bool
	// Queued is when the session taken entered the queue (a fresh claim).
	Queued time.Time
	// Exhausted: the entry's previous claim had lapsed and that was the
	// session's last attempt, so Mutation ends the session instead of
	// claiming it. Commit it, then answer Err.
	Exhausted bool
}

// Err is the refusal to answer once an exhausted claim's Mutation is
// committed; nil for a claim that took or renewed the entry.
func (c Claimed) Err() error {
	if !c.Exhausted {
		return nil
	}
	return refuse(ErrEnded, "Session %s ended: %s", c.Mutation.Session.ID, c.Mutation.Session.Reason)
}

// Claim is the compare-and-swap on acceptor_id: it takes a free or lapsed
// entry, or renews the caller's own claim. A lapsed claim not yet swept is
// requeued first, in the same transaction; load is the outpost's, for its
// max_running.
func Claim(sess store.Session, e store.QueueEntry, load store.OutpostLoad, req ClaimRequest) (Claimed, error) {
	sessionID, acceptor, now := e.SessionID, req.Acceptor, req.Now
	if !live(e) {
		return Claimed{}, gone(sessionID)
	}
	var c Claimed
	held := e.Held(now)
	switch e.SessionStatus {
	case api.QueueSessionSuspended, api.QueueSessionTerminated:
		// Never handed out; but its holder may keep renewing until
		// its remote has exited and it releases.
		if held && e.AcceptorID == acceptor {
			break
		}
		if e.SessionStatus == api.QueueSessionTerminated {
			return Claimed{}, refuse(ErrConflict, "Session %s has ended and cannot be claimed; its entry stays listed, session_status terminated, until the ended-entry sweep removes it.", sessionID)
		}
		return Claimed{}, refuse(ErrConflict, "Session %s is %s and cannot be claimed.", sessionID, e.SessionStatus)
	}
	if held && e.AcceptorID != acceptor {
		return Claimed{}, refuse(ErrConflict, "Session %s is claimed by another acceptor.", sessionID)
	}
	m := &c.Mutation
	c.Queued = e.UpdatedAt // a pending entry's last change put it in the queue
	if e.Phase == api.PhaseClaimed && !held {
		// The previous holder's claim lapsed and the sweeper has not
		// seen it yet: requeue first, in this same transaction.
		c.Queued = e.Expiry()
		if lapse(&sess, &e, now, m, req.KeepEnded) {
			c.Exhausted = true
			m.Session, m.Entry = &sess, &e
			return c, nil
		}
	}
	c.Renewed = held
	if !held && load.MaxRunning > 0 && load.Held >= load.MaxRunning {
		// The lapse above, if any, is rolled back with the claim: the
		// sweeper requeues it.
		return Claimed{}, refuse(ErrAtCapacity,
			"Session %s waits in the queue: its outpost already has %d claimed sessions and its max_running is %d; claim again when one of them ends.",
			sessionID, load.Held, load.MaxRunning)
	}
	if !held {
		e.Epoch++
		e.Phase = api.PhaseClaimed
		e.AcceptorID = acceptor
		e.LiveUntil = time.Time{} // no remote of this claim yet
		sess.Worker = acceptor
		m.Events = append(m.Events, api.Event{Type: api.EventClaim, AcceptorID: acceptor, Time: now.UnixMilli(),
			Reason: fmt.Sprintf("Claimed by %s.", acceptor)})
		if sess.Status == api.StatusNew {
			sess.Status, sess.StatusDetail, sess.Reason = api.StatusClaimed, "", fmt.Sprintf("Claimed by %s; waiting for its remote to connect.", acceptor)
			m.Events = append(m.Events, StatusEvent(sess, now))
		}
	}
	e.ClaimDeadline = now.Add(req.TTL)
	e.ClaimTokenID = req.TokenID
	e.UpdatedAt = now
	sess.UpdatedAt = now
	m.Session, m.Entry = &sess, &e
	m.ConnectTokens = append(m.ConnectTokens, store.ConnectToken{Hash: req.TokenHash, SessionID: sessionID, Epoch: e.Epoch, CreatedAt: now})
	return c, nil
}

// Pickable reports whether claim-next may take e: a pending entry that is
// neither deleted, suspended nor terminated. The store picks by its
// indexes; this re-checks the pick under the session's lock.
func Pickable(e store.QueueEntry) bool {
	return !e.Deleted && e.Phase == api.PhasePending &&
		e.SessionStatus != api.QueueSessionSuspended && e.SessionStatus != api.QueueSessionTerminated
}

// Release gives acceptor's claim back. A finished session's entry is left
// ended (kept listed with keep); any other goes back to the queue at once.
// A non-empty reason says why, on the status and the transcript; with
// shutdown the claimer is stopping, and the release is no failed attempt.
// ended reports that the release was the session's last attempt: the
// session ended in error.
func Release(sess store.Session, e store.QueueEntry, now time.Time, acceptor, reason string, shutdown, keep bool) (m store.Mutation, ended bool, err error) {
	if !live(e) {
		return store.Mutation{}, false, gone(e.SessionID)
	}
	// The holder may release after its deadline: until the sweeper has
	// requeued a lapsed claim, it is still the holder's to give.
	if e.Phase != api.PhaseClaimed || e.AcceptorID != acceptor {
		return store.Mutation{}, false, notHolder(e.SessionID, acceptor)
	}
	why := fmt.Sprintf("Released by %s.", acceptor)
	if reason != "" {
		why = fmt.Sprintf("Released by %s: %s", acceptor, Sentence(reason))
	}
	// A release with a reason of a session that is not over is a failed
	// attempt (its machine died or could not be provisioned); one
	// without, or from a claimer shutting down, is not.
	ended = requeue(&sess, &e, now, &m, why, reason != "" && !shutdown, keep)
	m.Session, m.Entry = &sess, &e
	return m, ended, nil
}

// RevokeClaim releases e's claim if the token tokenID took or last renewed
// it: that token was revoked, and a claim must not outlive the token that
// holds it. The session goes back to the queue as after a release, its
// claim's epoch (and so its connect tokens and its remote's connection)
// over; the revocation is the operator's doing, no failed attempt of the
// session. released is false (and m empty) when e holds no claim of
// tokenID.
func RevokeClaim(sess store.Session, e store.QueueEntry, now time.Time, tokenID string, keep bool) (m store.Mutation, released bool) {
	if !live(e) || e.Phase != api.PhaseClaimed || tokenID == "" || e.ClaimTokenID != tokenID {
		return store.Mutation{}, false
	}
	why := fmt.Sprintf("The claim of %s was released: the token it was made with (%s) was revoked.", e.AcceptorID, tokenID)
	requeue(&sess, &e, now, &m, why, false, keep)
	m.Session, m.Entry = &sess, &e
	return m, true
}

// CheckHolder refuses unless acceptor holds e's claim at now.
func CheckHolder(e store.QueueEntry, now time.Time, acceptor string) error {
	if !live(e) {
		return gone(e.SessionID)
	}
	if !e.Held(now) || e.AcceptorID != acceptor {
		return notHolder(e.SessionID, acceptor)
	}
	return nil
}

func notHolder(sessionID, acceptor string) error {
	return refuse(ErrConflict, "Session %s is not claimed by %q (the claim may have lapsed or moved).", sessionID, acceptor)
}

// Lapse requeues e if its claim has run out, a failed attempt; the sweep
// of lapsed claims runs it. lapsed is false (and m empty) when there is no
// lapsed claim to requeue; ended reports that the lapse was the session's
// last attempt: the session ended in error.
func Lapse(sess store.Session, e store.QueueEntry, now time.Time, keep bool) (m store.Mutation, lapsed, ended bool) {
	if !live(e) || e.Phase != api.PhaseClaimed || e.Held(now) {
		return store.Mutation{}, false, false
	}
	ended = lapse(&sess, &e, now, &m, keep)
	m.Session, m.Entry = &sess, &e
	return m, true, ended
}

// lapse requeues an entry whose claim ran out, a failed attempt. It reports
// whether that was the session's last attempt: it has ended in error. With
// keep an ended session's entry stays listed (endEntry).
func lapse(sess *store.Session, e *store.QueueEntry, now time.Time, m *store.Mutation, keep bool) (ended bool) {
	why := fmt.Sprintf("The claim of %s lapsed: no remote connected before its deadline and it was not renewed.", e.AcceptorID)
	if !e.LiveUntil.IsZero() {
		why = fmt.Sprintf("The claim of %s lapsed: its remote's connection was gone longer than the reconnect grace and the claim was not renewed.", e.AcceptorID)
	}
	return requeue(sess, e, now, m, why, true, keep)
}

// requeue ends the current claim. The old connect tokens die with the epoch.
// A finished session's entry is left ended (endEntry, with keep); a session
// that had started returns as kind resume; one that never started returns
// as new. A failed attempt (failed) of a session that is not over counts
// against its max_attempts: at the last one the session ends in error
// instead, listing each attempt's reason, and requeue reports it (ended).
func requeue(sess *store.Session, e *store.QueueEntry, now time.Time, m *store.Mutation, why string, failed, keep bool) (ended bool) {
	acceptor := e.AcceptorID
	e.Epoch++
	e.Phase = api.PhasePending
	e.AcceptorID, e.ClaimTokenID = "", ""
	e.ClaimDeadline, e.LiveUntil = time.Time{}, time.Time{}
	e.UpdatedAt = now
	sess.UpdatedAt = now
	m.Events = append(m.Events, api.Event{Type: api.EventRelease, AcceptorID: acceptor, Time: now.UnixMilli(), Reason: why})
	if api.IsFinal(sess.Status) {
		endEntry(e, now, keep)
		return false
	}
	if sess.Status == api.StatusSuspended {
		// It waits for its resume, not for a machine: its machine going
		// away is what suspending meant, no failed attempt.
		e.Kind, e.SessionStatus = api.KindResume, api.QueueSessionSuspended
		return false
	}
	if failed {
		e.Attempts++
		e.AttemptReasons = append(e.AttemptReasons, why)
		if limit := MaxAttempts(*e); e.Attempts >= limit {
			reason := attemptsReason(e.AttemptReasons, limit)
			sess.Status, sess.StatusDetail, sess.Reason = api.StatusError, api.DetailError, reason
			sess.EndedAt = &now
			endEntry(e, now, keep) // pending: nobody to release it
			m.Events = append(m.Events, StatusEvent(*sess, now),
				api.Event{Type: api.EventEnd, Time: now.UnixMilli(), Status: sess.Status, StatusDetail: sess.StatusDetail, Reason: reason})
			return true
		}
	}
	if sess.StartedAt != nil {
		e.Kind = api.KindResume
		sess.Status, sess.StatusDetail = api.StatusResuming, api.DetailWaitingForMachine
		sess.Reason = why + " Waiting for another machine to resume the session."
	} else {
		sess.Status, sess.StatusDetail, sess.Reason = api.StatusNew, "", why+" Waiting in the queue."
	}
	e.SessionStatus = QueueSessionStatus(sess.Status)
	m.Events = append(m.Events, StatusEvent(*sess, now))
	return false
}

// attemptsReason is the final reason of a session whose attempts ran out:
// every attempt's reason, in order.
func attemptsReason(reasons []string, limit int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "The session ended after %d failed attempts (max_attempts %d): its machine died or could not be provisioned each time.", len(reasons), limit)
	for i, r := range reasons {
		fmt.Fprintf(&b, " Attempt %d: %s", i+1, Sentence(r))
	}
	return b.String()
}
