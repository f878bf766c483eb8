package lifecycle

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// The transitions are pure: each test hands rows in and reads rows out.

var t0 = time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)

const ttl = 30 * time.Second

// newRows is a session just created and its pending entry.
func newRows() (store.Session, store.QueueEntry) {
	sess := store.Session{ID: "s1", OutpostID: "o1", Status: api.StatusNew, Reason: "Waiting in the queue.", CreatedAt: t0, UpdatedAt: t0}
	e := store.QueueEntry{SessionID: "s1", OutpostID: "o1", Kind: api.KindNew, Phase: api.PhasePending,
		SessionStatus: api.QueueSessionPending, Epoch: 1, MaxAttempts: 3, CreatedAt: t0, UpdatedAt: t0}
	return sess, e
}

// claimedRows are newRows claimed by acceptor at, its claim held until at+ttl.
func claimedRows(acceptor string, at time.Time) (store.Session, store.QueueEntry) {
	sess, e := newRows()
	sess.Status, sess.Reason = api.StatusClaimed, "Claimed by "+acceptor+"; waiting for its remote to connect."
	e.Phase, e.AcceptorID, e.Epoch = api.PhaseClaimed, acceptor, 2
	e.ClaimDeadline, e.UpdatedAt = at.Add(ttl), at
	return sess, e
}

// runningRows are claimedRows whose remote connected.
func runningRows(acceptor string, at time.Time) (store.Session, store.QueueEntry) {
	sess, e := claimedRows(acceptor, at)
	sess.Status, sess.StatusDetail, sess.Reason, sess.StartedAt = api.StatusRunning, api.DetailWorking, "Running on "+acceptor+".", &at
	e.SessionStatus, e.LiveUntil = api.QueueSessionRunning, at.Add(ttl)
	return sess, e
}

func claimReq(acceptor string, now time.Time) ClaimRequest {
	return ClaimRequest{Acceptor: acceptor, Now: now, TTL: ttl, TokenHash: "hash", KeepEnded: true}
}

func eventTypes(evs []api.Event) string {
	var b []string
	for _, ev := range evs {
		b = append(b, ev.Type)
	}
	return strings.Join(b, ",")
}

// wantRefusal checks err is an *Error of kind with exactly message msg.
func wantRefusal(t *testing.T, err, kind error, msg string) {
	t.Helper()
	var le *Error
	if !errors.As(err, &le) || !errors.Is(err, kind) {
		t.Fatalf("err = %v (%T), want a refusal of kind %v", err, err, kind)
	}
	if err.Error() != msg {
		t.Fatalf("message = %q, want %q", err.Error(), msg)
	}
}

func TestClaimRefusals(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Minute)
	tests := []struct {
		name string
		rows func() (store.Session, store.QueueEntry)
		load store.OutpostLoad
		kind error
		msg  string
	}{
		{"no entry", func() (store.Session, store.QueueEntry) {
			sess, _ := newRows()
			return sess, store.QueueEntry{SessionID: "s1"}
		}, store.OutpostLoad{}, ErrGone, "Session s1 is not in any queue."},
		{"deleted entry", func() (store.Session, store.QueueEntry) {
			sess, e := newRows()
			e.Deleted = true
			return sess, e
		}, store.OutpostLoad{}, ErrGone, "Session s1 is not in any queue."},
		{"held by another", func() (store.Session, store.QueueEntry) { return claimedRows("w-other", now) },
			store.OutpostLoad{}, ErrConflict, "Session s1 is claimed by another acceptor."},
		{"terminated", func() (store.Session, store.QueueEntry) {
			sess, e := newRows()
			e.SessionStatus = api.QueueSessionTerminated
			return sess, e
		}, store.OutpostLoad{}, ErrConflict, "Session s1 has ended and cannot be claimed; its entry stays listed, session_status terminated, until the ended-entry sweep removes it."},
		{"suspended", func() (store.Session, store.QueueEntry) {
			sess, e := newRows()
			e.SessionStatus = api.QueueSessionSuspended
			return sess, e
		}, store.OutpostLoad{}, ErrConflict, "Session s1 is suspended and cannot be claimed."},
		{"suspended, held by another", func() (store.Session, store.QueueEntry) {
			sess, e := claimedRows("w-other", now)
			e.SessionStatus = api.QueueSessionSuspended
			return sess, e
		}, store.OutpostLoad{}, ErrConflict, "Session s1 is suspended and cannot be claimed."},
		{"at capacity", newRows, store.OutpostLoad{MaxRunning: 2, Held: 2}, ErrAtCapacity,
			"Session s1 waits in the queue: its outpost already has 2 claimed sessions and its max_running is 2; claim again when one of them ends."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sess, e := tt.rows()
			got, err := Claim(sess, e, tt.load, claimReq("w1", now))
			wantRefusal(t, err, tt.kind, tt.msg)
			if got.Mutation.Session != nil || got.Mutation.Entry != nil {
				t.Fatalf("a refused claim writes nothing; got %+v", got.Mutation)
			}
		})
	}
}

func TestClaimTakesAFreeEntry(t *testing.T) {
	t.Parallel()
	sess, e := newRows()
	now := t0.Add(5 * time.Second)
	got, err := Claim(sess, e, store.OutpostLoad{MaxRunning: 2, Held: 1}, claimReq("w1", now))
	if err != nil {
		t.Fatal(err)
	}
	m := got.Mutation
	if got.Renewed || got.Exhausted || got.Err() != nil {
		t.Fatalf("got %+v, want a fresh claim", got)
	}
	if !got.Queued.Equal(t0) {
		t.Errorf("Queued = %v, want the entry's last change %v", got.Queued, t0)
	}
	if m.Entry.Phase != api.PhaseClaimed || m.Entry.AcceptorID != "w1" || m.Entry.Epoch != 2 || !m.Entry.ClaimDeadline.Equal(now.Add(ttl)) {
		t.Errorf("entry = %+v, want claimed by w1 in epoch 2 until now+ttl", *m.Entry)
	}
	if m.Session.Status != api.StatusClaimed || m.Session.Reason != "Claimed by w1; waiting for its remote to connect." || m.Session.Worker != "w1" {
		t.Errorf("session = %s %q, worker %q", m.Session.Status, m.Session.Reason, m.Session.Worker)
	}
	if eventTypes(m.Events) != api.EventClaim+","+api.EventStatus {
		t.Errorf("events = %s", eventTypes(m.Events))
	}
	if len(m.ConnectTokens) != 1 || m.ConnectTokens[0] != (store.ConnectToken{Hash: "hash", SessionID: "s1", Epoch: 2, CreatedAt: now}) {
		t.Errorf("connect tokens = %+v", m.ConnectTokens)
	}
	if sess.Status != api.StatusNew || e.Phase != api.PhasePending {
		t.Error("Claim changed the rows it was handed")
	}
}

func TestClaimRenewsTheHoldersClaim(t *testing.T) {
	t.Parallel()
	sess, e := runningRows("w1", t0)
	now := t0.Add(ttl / 2)
	// A renewal is no new claim: the outpost's cap does not apply.
	got, err := Claim(sess, e, store.OutpostLoad{MaxRunning: 1, Held: 5}, claimReq("w1", now))
	if err != nil {
		t.Fatal(err)
	}
	m := got.Mutation
	if !got.Renewed || m.Entry.Epoch != e.Epoch || !m.Entry.ClaimDeadline.Equal(now.Add(ttl)) || !m.Entry.LiveUntil.Equal(e.LiveUntil) {
		t.Errorf("got renewed=%v entry %+v, want the same epoch with a later deadline", got.Renewed, *m.Entry)
	}
	if len(m.Events) != 0 || m.Session.Status != api.StatusRunning {
		t.Errorf("a renewal records nothing; events %s, status %s", eventTypes(m.Events), m.Session.Status)
	}
	if len(m.ConnectTokens) != 1 || m.ConnectTokens[0].Epoch != e.Epoch {
		t.Errorf("connect tokens = %+v, want one of the current epoch", m.ConnectTokens)
	}
}

func TestClaimOfALapsedClaimRequeuesItFirst(t *testing.T) {
	t.Parallel()
	sess, e := runningRows("w-old", t0)
	now := t0.Add(2 * ttl) // past the deadline and the live-until
	got, err := Claim(sess, e, store.OutpostLoad{}, claimReq("w1", now))
	if err != nil {
		t.Fatal(err)
	}
	m := got.Mutation
	if got.Exhausted || got.Renewed || !got.Queued.Equal(e.Expiry()) {
		t.Fatalf("got %+v, want a fresh claim queued since the old claim's expiry", got)
	}
	// Released (lapse) in epoch 3, claimed in epoch 4.
	if m.Entry.AcceptorID != "w1" || m.Entry.Epoch != e.Epoch+2 || m.Entry.Attempts != 1 || m.Entry.Kind != api.KindResume {
		t.Errorf("entry = %+v", *m.Entry)
	}
	if eventTypes(m.Events) != api.EventRelease+","+api.EventStatus+","+api.EventClaim {
		t.Errorf("events = %s", eventTypes(m.Events))
	}
	want := "The claim of w-old lapsed: its remote's connection was gone longer than the reconnect grace and the claim was not renewed."
	if m.Events[0].Reason != want {
		t.Errorf("release reason = %q, want %q", m.Events[0].Reason, want)
	}
	if m.Session.Status != api.StatusResuming || m.Session.Worker != "w1" {
		t.Errorf("status = %s, worker %q; want resuming (the session had started) on w1", m.Session.Status, m.Session.Worker)
	}
}

func TestClaimOfALapsedLastAttemptEndsTheSession(t *testing.T) {
	t.Parallel()
	sess, e := claimedRows("w-old", t0)
	e.Attempts, e.AttemptReasons = 2, []string{"Released by w-a: machine died", "Released by w-b: no capacity."}
	now := t0.Add(2 * ttl)
	got, err := Claim(sess, e, store.OutpostLoad{}, claimReq("w1", now))
	if err != nil {
		t.Fatal(err)
	}
	m := got.Mutation
	if !got.Exhausted || m.Session.Status != api.StatusError || m.Entry.SessionStatus != api.QueueSessionTerminated || m.Entry.Deleted {
		t.Fatalf("got exhausted=%v session %s entry %+v, want the session ended and its entry kept listed", got.Exhausted, m.Session.Status, *m.Entry)
	}
	if len(m.ConnectTokens) != 0 || m.Entry.AcceptorID != "" {
		t.Errorf("an exhausted claim hands out nothing: %+v", *m.Entry)
	}
	wantReason := "The session ended after 3 failed attempts (max_attempts 3): its machine died or could not be provisioned each time." +
		" Attempt 1: Released by w-a: machine died. Attempt 2: Released by w-b: no capacity." +
		" Attempt 3: The claim of w-old lapsed: no remote connected before its deadline and it was not renewed."
	if m.Session.Reason != wantReason {
		t.Errorf("reason = %q\nwant %q", m.Session.Reason, wantReason)
	}
	wantRefusal(t, got.Err(), ErrEnded, "Session s1 ended: "+wantReason)
}

func TestRelease(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Minute)
	tests := []struct {
		name     string
		rows     func() (store.Session, store.QueueEntry)
		acceptor string
		reason   string
		shutdown bool
		// want
		status, kind, sessionStatus string
		attempts                    int
		deleted, ended              bool
	}{
		{"plain release of a new session", func() (store.Session, store.QueueEntry) { return claimedRows("w1", t0) }, "w1", "", false,
			api.StatusNew, api.KindNew, api.QueueSessionPending, 0, false, false},
		{"a reason is a failed attempt", func() (store.Session, store.QueueEntry) { return runningRows("w1", t0) }, "w1", "machine died", false,
			api.StatusResuming, api.KindResume, api.QueueSessionPending, 1, false, false},
		{"a shutdown is no failed attempt", func() (store.Session, store.QueueEntry) { return runningRows("w1", t0) }, "w1", "stopping", true,
			api.StatusResuming, api.KindResume, api.QueueSessionPending, 0, false, false},
		{"after the deadline, before the sweep", func() (store.Session, store.QueueEntry) { return claimedRows("w1", t0.Add(-time.Hour)) }, "w1", "", false,
			api.StatusNew, api.KindNew, api.QueueSessionPending, 0, false, false},
		{"a suspended session waits for its resume", func() (store.Session, store.QueueEntry) {
			sess, e := runningRows("w1", t0)
			sess.Status, e.SessionStatus = api.StatusSuspended, api.QueueSessionSuspended
			return sess, e
		}, "w1", "machine died", false, api.StatusSuspended, api.KindResume, api.QueueSessionSuspended, 0, false, false},
		{"an ended session's entry stays listed", func() (store.Session, store.QueueEntry) {
			sess, e := runningRows("w1", t0)
			sess.Status, e.SessionStatus = api.StatusExit, api.QueueSessionTerminated
			return sess, e
		}, "w1", "done", false, api.StatusExit, api.KindNew, api.QueueSessionTerminated, 0, false, false},
		{"the last attempt ends the session", func() (store.Session, store.QueueEntry) {
			sess, e := runningRows("w1", t0)
			e.Attempts, e.AttemptReasons = 2, []string{"a", "b"}
			return sess, e
		}, "w1", "machine died", false, api.StatusError, api.KindNew, api.QueueSessionTerminated, 3, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sess, e := tt.rows()
			m, ended, err := Release(sess, e, now, tt.acceptor, tt.reason, tt.shutdown, true)
			if err != nil {
				t.Fatal(err)
			}
			if ended != tt.ended || m.Session.Status != tt.status || m.Entry.Kind != tt.kind || m.Entry.SessionStatus != tt.sessionStatus ||
				m.Entry.Attempts != tt.attempts || m.Entry.Deleted != tt.deleted {
				t.Errorf("ended=%v status=%s entry=%+v", ended, m.Session.Status, *m.Entry)
			}
			if m.Entry.Phase != api.PhasePending || m.Entry.AcceptorID != "" || m.Entry.Epoch != e.Epoch+1 || !m.Entry.ClaimDeadline.IsZero() {
				t.Errorf("entry = %+v, want unclaimed in a new epoch", *m.Entry)
			}
			if len(m.Events) == 0 || m.Events[0].Type != api.EventRelease {
				t.Errorf("events = %s, want a release first", eventTypes(m.Events))
			}
		})
	}
}

func TestReleaseReasons(t *testing.T) {
	t.Parallel()
	sess, e := runningRows("w1", t0)
	m, _, err := Release(sess, e, t0, "w1", "  its machine died  ", false, true)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Events[0].Reason, "Released by w1: its machine died."; got != want {
		t.Errorf("release reason = %q, want %q", got, want)
	}
	if got, want := m.Session.Reason, "Released by w1: its machine died. Waiting for another machine to resume the session."; got != want {
		t.Errorf("session reason = %q, want %q", got, want)
	}
}

func TestReleaseRefusals(t *testing.T) {
	t.Parallel()
	sess, e := claimedRows("w1", t0)
	_, _, err := Release(sess, e, t0, "w2", "", false, true)
	wantRefusal(t, err, ErrConflict, `Session s1 is not claimed by "w2" (the claim may have lapsed or moved).`)
	pending, pe := newRows()
	_, _, err = Release(pending, pe, t0, "w1", "", false, true)
	wantRefusal(t, err, ErrConflict, `Session s1 is not claimed by "w1" (the claim may have lapsed or moved).`)
	pe.Deleted = true
	_, _, err = Release(pending, pe, t0, "w1", "", false, true)
	wantRefusal(t, err, ErrGone, "Session s1 is not in any queue.")
}

func TestLapse(t *testing.T) {
	t.Parallel()
	sess, e := claimedRows("w1", t0)
	if m, lapsed, _ := Lapse(sess, e, t0.Add(ttl-time.Nanosecond), true); lapsed || m.Entry != nil {
		t.Fatal("a held claim lapsed")
	}
	pending, pe := newRows()
	if _, lapsed, _ := Lapse(pending, pe, t0.Add(time.Hour), true); lapsed {
		t.Fatal("a pending entry lapsed")
	}
	m, lapsed, ended := Lapse(sess, e, t0.Add(ttl), true)
	if !lapsed || ended || m.Entry.Phase != api.PhasePending || m.Entry.Attempts != 1 || m.Session.Status != api.StatusNew {
		t.Fatalf("lapsed=%v ended=%v entry=%+v", lapsed, ended, *m.Entry)
	}
	want := "The claim of w1 lapsed: no remote connected before its deadline and it was not renewed. Waiting in the queue."
	if m.Session.Reason != want {
		t.Errorf("reason = %q, want %q", m.Session.Reason, want)
	}
	// Without keep, the entry of a session the lapse ends is deleted.
	e.Attempts, e.MaxAttempts = 0, 1
	m, _, ended = Lapse(sess, e, t0.Add(ttl), false)
	if !ended || !m.Entry.Deleted || m.Session.Status != api.StatusError || m.Session.EndedAt == nil {
		t.Errorf("ended=%v entry=%+v session %s", ended, *m.Entry, m.Session.Status)
	}
}

func TestMaxAttemptsDefault(t *testing.T) {
	t.Parallel()
	if got := MaxAttempts(store.QueueEntry{}); got != api.DefaultMaxAttempts {
		t.Errorf("MaxAttempts of an old entry = %d, want %d", got, api.DefaultMaxAttempts)
	}
}

func TestEnd(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Minute)
	tests := []struct {
		name          string
		rows          func() (store.Session, store.QueueEntry)
		keep          bool
		entry         bool // an entry is written
		deleted       bool
		phase         string
		sessionStatus string
	}{
		{"a held entry waits for its holder's release", func() (store.Session, store.QueueEntry) { return runningRows("w1", t0) }, true,
			true, false, api.PhaseClaimed, api.QueueSessionTerminated},
		{"a pending entry is left ended and listed", newRows, true, true, false, api.PhasePending, api.QueueSessionTerminated},
		{"without keep a pending entry goes", newRows, false, true, true, api.PhasePending, api.QueueSessionTerminated},
		{"no entry", func() (store.Session, store.QueueEntry) {
			sess, _ := newRows()
			return sess, store.QueueEntry{}
		}, true, false, false, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sess, e := tt.rows()
			m := End(sess, e, now, api.StatusExit, api.DetailUserRequest, "Ended by a user.", tt.keep)
			if m.Session == nil || m.Session.Status != api.StatusExit || m.Session.EndedAt == nil || !m.Session.EndedAt.Equal(now) {
				t.Fatalf("session = %+v", m.Session)
			}
			if eventTypes(m.Events) != api.EventStatus+","+api.EventEnd {
				t.Errorf("events = %s", eventTypes(m.Events))
			}
			if (m.Entry != nil) != tt.entry {
				t.Fatalf("entry written = %v, want %v", m.Entry != nil, tt.entry)
			}
			if m.Entry != nil && (m.Entry.Deleted != tt.deleted || m.Entry.Phase != tt.phase || m.Entry.SessionStatus != tt.sessionStatus) {
				t.Errorf("entry = %+v", *m.Entry)
			}
		})
	}
}

func TestEndOfAnEndedSessionWritesNothing(t *testing.T) {
	t.Parallel()
	sess, e := newRows()
	sess.Status = api.StatusError
	if m := End(sess, e, t0, api.StatusExit, api.DetailUserRequest, "Ended by a user.", true); m.Session != nil || m.Entry != nil || len(m.Events) != 0 {
		t.Errorf("End of an ended session wrote %+v", m)
	}
}

func TestDrop(t *testing.T) {
	t.Parallel()
	_, e := runningRows("w1", t0)
	m := Drop(e, t0.Add(time.Second))
	if m.Entry == nil || !m.Entry.Deleted || m.Entry.Epoch != e.Epoch+1 || m.Session != nil {
		t.Fatalf("Drop = %+v, want the entry deleted in a new epoch", m)
	}
	if m := Drop(*m.Entry, t0); m.Entry != nil {
		t.Error("Drop of a deleted entry wrote it again")
	}
}

func TestResume(t *testing.T) {
	t.Parallel()
	sess, e := runningRows("w1", t0)
	_, err := Resume(sess, e, t0, "Resumed by a user.")
	wantRefusal(t, err, ErrConflict, "Session s1 is running, not suspended: only a suspended session can be resumed.")

	// Suspended and released: back in the queue as a resume.
	sess.Status, sess.Reason = api.StatusSuspended, "Suspended."
	pending := e
	pending.Phase, pending.AcceptorID, pending.SessionStatus = api.PhasePending, "", api.QueueSessionSuspended
	m, err := Resume(sess, pending, t0, "Resumed by a user.")
	if err != nil {
		t.Fatal(err)
	}
	if m.Session.Status != api.StatusResuming || m.Session.Reason != "Resumed by a user. Waiting for a machine to restore its workspace." {
		t.Errorf("session = %s %q", m.Session.Status, m.Session.Reason)
	}
	if m.Entry.Kind != api.KindResume || m.Entry.SessionStatus != api.QueueSessionPending {
		t.Errorf("entry = %+v, want a pending resume", *m.Entry)
	}

	// Suspended but not yet released: it stays out of the queue until its
	// holder releases it.
	held := e
	held.SessionStatus = api.QueueSessionSuspended
	m, err = Resume(sess, held, t0, "Resumed by a user.")
	if err != nil {
		t.Fatal(err)
	}
	if m.Entry.SessionStatus != api.QueueSessionSuspended || m.Entry.Kind != api.KindResume {
		t.Errorf("entry = %+v, want it still suspended until released", *m.Entry)
	}
}

func TestCheckHolderAndPickable(t *testing.T) {
	t.Parallel()
	_, e := claimedRows("w1", t0)
	if err := CheckHolder(e, t0, "w1"); err != nil {
		t.Errorf("holder refused: %v", err)
	}
	wantRefusal(t, CheckHolder(e, t0.Add(ttl), "w1"), ErrConflict, `Session s1 is not claimed by "w1" (the claim may have lapsed or moved).`)
	wantRefusal(t, CheckHolder(store.QueueEntry{SessionID: "s1"}, t0, "w1"), ErrGone, "Session s1 is not in any queue.")

	_, pe := newRows()
	if Pickable(e) || !Pickable(pe) {
		t.Error("Pickable: want the pending entry only")
	}
	for _, st := range []string{api.QueueSessionSuspended, api.QueueSessionTerminated} {
		p := pe
		p.SessionStatus = st
		if Pickable(p) {
			t.Errorf("a %s entry is pickable", st)
		}
	}
}

func TestSentence(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"": "", " done ": "done.", "done.": "done.", "why?": "why?", "go!": "go!"} {
		if got := Sentence(in); got != want {
			t.Errorf("Sentence(%q) = %q, want %q", in, got, want)
		}
	}
}
