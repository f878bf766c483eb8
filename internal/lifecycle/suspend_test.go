package lifecycle

import (
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

func TestSuspendable(t *testing.T) {
	t.Parallel()
	sess, _ := runningRows("w1", t0)
	if err := Suspendable(sess); err != nil {
		t.Errorf("a running session refused: %v", err)
	}
	for _, st := range []string{api.StatusNew, api.StatusClaimed, api.StatusSuspended, api.StatusResuming, api.StatusExit} {
		sess.Status = st
		wantRefusal(t, Suspendable(sess), ErrConflict, "Session s1 is "+st+": only a running session can be suspended.")
	}
}

func TestSuspend(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Minute)
	snap := api.Event{Type: api.EventSnapshot, Time: now.UnixMilli(), Reason: "Took a snapshot."}
	tests := []struct {
		name  string
		rows  func() (store.Session, store.QueueEntry)
		epoch int64
		// refusedAs is the status the refusal names; "" for no refusal.
		refusedAs string
	}{
		{"running under the snapshot's claim", func() (store.Session, store.QueueEntry) { return runningRows("w1", t0) }, 2, ""},
		{"claimed anew since", func() (store.Session, store.QueueEntry) { return runningRows("w1", t0) }, 1, api.StatusRunning},
		{"ended meanwhile", func() (store.Session, store.QueueEntry) {
			sess, e := runningRows("w1", t0)
			sess.Status = api.StatusExit
			return sess, e
		}, 2, api.StatusExit},
		{"entry dropped", func() (store.Session, store.QueueEntry) {
			sess, e := runningRows("w1", t0)
			e.Deleted = true
			return sess, e
		}, 2, api.StatusRunning},
		{"no entry", func() (store.Session, store.QueueEntry) {
			sess, _ := runningRows("w1", t0)
			return sess, store.QueueEntry{}
		}, 2, api.StatusRunning},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sess, e := tt.rows()
			m, err := Suspend(sess, e, now, tt.epoch, "Suspended by a user. Kept.", snap)
			if tt.refusedAs != "" {
				wantRefusal(t, err, ErrConflict, "Session s1 changed while it was being suspended (it is "+tt.refusedAs+" now); it was not suspended.")
				if m.Session != nil || m.Entry != nil || len(m.Events) != 0 {
					t.Fatalf("a refused suspend writes nothing; got %+v", m)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := m.Session; s.Status != api.StatusSuspended || s.StatusDetail != "" || s.Reason != "Suspended by a user. Kept." || !s.UpdatedAt.Equal(now) {
				t.Errorf("session = %s/%s %q at %s", s.Status, s.StatusDetail, s.Reason, s.UpdatedAt)
			}
			// Still its holder's, but out of the queue and a resume next.
			if en := m.Entry; en.SessionStatus != api.QueueSessionSuspended || en.Kind != api.KindResume ||
				en.Phase != api.PhaseClaimed || en.AcceptorID != "w1" || en.Epoch != e.Epoch || !en.UpdatedAt.Equal(now) {
				t.Errorf("entry = %+v", *en)
			}
			if got := eventTypes(m.Events); got != api.EventSnapshot+","+api.EventStatus {
				t.Errorf("events %s, want the snapshot, then the status", got)
			}
			if ev := m.Events[1]; ev.Status != api.StatusSuspended || ev.Reason != "Suspended by a user. Kept." {
				t.Errorf("status event = %+v", ev)
			}
		})
	}
}

func TestSuspendThenReleaseWaitsForResume(t *testing.T) {
	t.Parallel()
	sess, e := runningRows("w1", t0)
	m, err := Suspend(sess, e, t0.Add(time.Second), 2, "Suspended.", api.Event{Type: api.EventSnapshot})
	if err != nil {
		t.Fatal(err)
	}
	// The holder's remote exits and it releases, with a reason: no failed
	// attempt, and the entry stays out of the claimable queue.
	m, ended, err := Release(*m.Session, *m.Entry, t0.Add(2*time.Second), "w1", "its remote exited", false, true)
	if err != nil || ended {
		t.Fatalf("release = %v, %v", ended, err)
	}
	if en := m.Entry; en.Phase != api.PhasePending || en.SessionStatus != api.QueueSessionSuspended || en.Attempts != 0 || Pickable(*en) {
		t.Errorf("released entry = %+v, want pending, suspended, no attempt, not pickable", *en)
	}
	if m.Session.Status != api.StatusSuspended {
		t.Errorf("session = %s, want still suspended", m.Session.Status)
	}
}

func TestSuspendDue(t *testing.T) {
	t.Parallel()
	idle := func() store.Session {
		sess, _ := runningRows("w1", t0)
		sess.Spec.Agent.Kind = api.AgentLLM
		sess.Spec.Limits.SuspendAfterIdleS = 90
		sess.StatusDetail = api.DetailWaitingForUser
		return sess
	}
	after := t0.Add(90 * time.Second)
	tests := []struct {
		name string
		sess func() store.Session
		now  time.Time
		due  bool
	}{
		{"idle past the limit", idle, after, true},
		{"idle, just before", idle, after.Add(-time.Millisecond), false},
		{"no limit", func() store.Session { s := idle(); s.Spec.Limits.SuspendAfterIdleS = 0; return s }, after, false},
		{"a script session", func() store.Session { s := idle(); s.Spec.Agent.Kind = api.AgentScript; return s }, after, false},
		{"working", func() store.Session { s := idle(); s.StatusDetail = api.DetailWorking; return s }, after, false},
		{"suspended already", func() store.Session { s := idle(); s.Status = api.StatusSuspended; return s }, after, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			why, due := SuspendDue(tt.sess(), tt.now)
			if due != tt.due {
				t.Fatalf("due = %v, want %v", due, tt.due)
			}
			want := ""
			if tt.due {
				want = "Suspended after waiting 1m30s for the user (limits.suspend_after_idle_s); a message resumes it."
			}
			if why != want {
				t.Errorf("why = %q, want %q", why, want)
			}
		})
	}
}

func TestExpireSnapshot(t *testing.T) {
	t.Parallel()
	const snapshotTTL = 72 * time.Hour
	for _, tt := range []struct {
		status string
		keep   bool
		end    bool
	}{
		{api.StatusRunning, true, false},
		{api.StatusResuming, true, false},
		{api.StatusClaimed, true, false},
		{api.StatusSuspended, false, true},
		{api.StatusExit, false, false},
		{api.StatusError, false, false},
	} {
		t.Run(tt.status, func(t *testing.T) {
			sess, _ := runningRows("w1", t0)
			sess.Status = tt.status
			got := ExpireSnapshot(sess, snapshotTTL)
			if got.Keep != tt.keep || (got.End != nil) != tt.end {
				t.Fatalf("ExpireSnapshot = %+v, want keep %v, end %v", got, tt.keep, tt.end)
			}
			if tt.end {
				want := Ending{Status: api.StatusExit, Detail: api.DetailInactivity,
					Reason: "The session stayed suspended longer than the server keeps snapshots (72h0m0s); its snapshot was deleted."}
				if *got.End != want {
					t.Errorf("end = %+v, want %+v", *got.End, want)
				}
			}
		})
	}
}

func TestPastLimit(t *testing.T) {
	t.Parallel()
	limited := func() store.Session {
		sess, _ := runningRows("w1", t0)
		sess.Spec.Limits.MaxDurationS = 60
		return sess
	}
	at := t0.Add(time.Minute)
	tests := []struct {
		name string
		sess func() store.Session
		now  time.Time
		past bool
	}{
		{"at the limit", limited, at, true},
		{"just before", limited, at.Add(-time.Millisecond), false},
		{"no limit", func() store.Session { s := limited(); s.Spec.Limits.MaxDurationS = 0; return s }, at, false},
		{"never started", func() store.Session { s := limited(); s.StartedAt = nil; return s }, at, false},
		{"ended already", func() store.Session { s := limited(); s.Status = api.StatusExit; return s }, at, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			end, past := PastLimit(tt.sess(), tt.now)
			if past != tt.past {
				t.Fatalf("past = %v, want %v", past, tt.past)
			}
			want := Ending{}
			if tt.past {
				want = Ending{Status: api.StatusExit, Detail: api.DetailUsageLimitExceeded, Reason: "The session reached its limit of 60 s (limits.max_duration_s)."}
			}
			if end != want {
				t.Errorf("end = %+v, want %+v", end, want)
			}
		})
	}
}
