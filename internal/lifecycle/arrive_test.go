package lifecycle

import (
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

func arrival(epoch int64) Arrival {
	return Arrival{Epoch: epoch, AcceptorID: "w1", Owner: "r2", Capabilities: &api.Capabilities{OS: "linux"},
		ResumeNote: func(lastSeq int64) string { return "Restored." }}
}

// TestArrive: a remote's hello makes a claimed or resuming session run,
// its connection holding the claim a grace ahead and this replica owning
// it; a running session (a reconnect) only gets the connection recorded.
func TestArrive(t *testing.T) {
	t.Parallel()
	now := t0.Add(10 * time.Second)
	const grace = 25 * time.Second
	tests := []struct {
		name      string
		rows      func() (store.Session, store.QueueEntry)
		events    string
		reasonEnd string // the end of the last event's reason
		started   time.Time
	}{
		{"claimed", func() (store.Session, store.QueueEntry) { return claimedRows("w1", t0) },
			"remote_connected,status", "Running on w1.", now},
		{"reconnect", func() (store.Session, store.QueueEntry) {
			sess, e := runningRows("w1", t0)
			e.Owner = "r1"
			return sess, e
		}, "remote_connected", "The remote of w1 connected.", t0},
		{"resuming", func() (store.Session, store.QueueEntry) {
			sess, e := claimedRows("w1", t0)
			sess.Status, sess.LastSeq = api.StatusResuming, 7
			return sess, e
		}, "remote_connected,resume,status", "Running on w1.", now},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sess, e := tt.rows()
			m, prev, err := Arrive(sess, e, now, arrival(e.Epoch), grace)
			if err != nil {
				t.Fatal(err)
			}
			if prev != e.Owner {
				t.Errorf("prevOwner = %q, want %q", prev, e.Owner)
			}
			if m.Session == nil || m.Entry == nil {
				t.Fatalf("mutation = %+v, want the session and its entry", m)
			}
			s, ne := *m.Session, *m.Entry
			if s.Status != api.StatusRunning || s.StatusDetail != api.DetailWorking || s.Capabilities == nil || s.Capabilities.OS != "linux" || !s.UpdatedAt.Equal(now) {
				t.Errorf("session = %+v, want running, working, with the remote's capabilities", s)
			}
			if s.StartedAt == nil || !s.StartedAt.Equal(tt.started) {
				t.Errorf("started at %v, want %v", s.StartedAt, tt.started)
			}
			if !ne.LiveUntil.Equal(now.Add(grace)) || ne.Owner != "r2" || ne.SessionStatus != api.QueueSessionRunning || ne.Epoch != e.Epoch || ne.AcceptorID != "w1" {
				t.Errorf("entry = %+v, want live a grace ahead, owned by r2, running, same claim", ne)
			}
			if got := eventTypes(m.Events); got != tt.events {
				t.Errorf("events %s, want %s", got, tt.events)
			}
			if last := m.Events[len(m.Events)-1]; last.Reason != tt.reasonEnd {
				t.Errorf("last event's reason %q, want %q", last.Reason, tt.reasonEnd)
			}
		})
	}
}

// TestArriveResumeNote: the resume event says where the session continues
// and what the remote restores, from the session's last stored call.
func TestArriveResumeNote(t *testing.T) {
	t.Parallel()
	sess, e := claimedRows("w1", t0)
	sess.Status, sess.LastSeq = api.StatusResuming, 7
	var asked int64 = -1
	a := arrival(e.Epoch)
	a.ResumeNote = func(lastSeq int64) string { asked = lastSeq; return "Its workspace is restored." }
	m, _, err := Arrive(sess, e, t0.Add(time.Second), a, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := "The session moved to a new machine (w1); it continues after call 7, the last whose result the server holds. Its workspace is restored."
	if asked != 7 || m.Events[1].Type != api.EventResume || m.Events[1].Reason != want {
		t.Fatalf("asked for call %d; resume event %+v, want reason %q", asked, m.Events[1], want)
	}
}

// TestArriveForkNote: a fork's first machine says it starts where the
// session it was forked from was; once it ran, a later resume is a move
// again.
func TestArriveForkNote(t *testing.T) {
	t.Parallel()
	sess, e := claimedRows("w1", t0)
	sess.Status, sess.LastSeq = api.StatusResuming, 3
	a := arrival(e.Epoch)
	a.ForkedFrom = "ses_parent"
	a.ResumeNote = func(int64) string { return "Its workspace is restored." }
	m, _, err := Arrive(sess, e, t0.Add(time.Second), a, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := "This session is a fork of session ses_parent: it starts on its own machine (w1) where that session was, after call 3. Its workspace is restored."
	if m.Events[1].Type != api.EventResume || m.Events[1].Reason != want {
		t.Fatalf("a fork's first resume event %+v, want reason %q", m.Events[1], want)
	}
	started := t0
	sess.StartedAt = &started
	m, _, err = Arrive(sess, e, t0.Add(time.Second), a, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r := m.Events[1].Reason; !strings.HasPrefix(r, "The session moved to a new machine (w1)") {
		t.Errorf("a fork that ran resumes with %q", r)
	}
}

// TestArriveEndsOrRefuses: a session that is over or suspended writes
// nothing (its remote is told to end); a claim that lapsed or moved since
// the token was checked is refused.
func TestArriveEndsOrRefuses(t *testing.T) {
	t.Parallel()
	now := t0.Add(10 * time.Second)
	for _, status := range []string{api.StatusExit, api.StatusError, api.StatusSuspended} {
		sess, e := runningRows("w1", t0)
		sess.Status = status
		m, prev, err := Arrive(sess, e, now, arrival(e.Epoch), time.Second)
		if err != nil || m.Session != nil || m.Entry != nil || len(m.Events) != 0 || prev != "" {
			t.Errorf("%s: Arrive = %+v, %q, %v, want nothing written", status, m, prev, err)
		}
	}
	const stale = "the claim this remote served has lapsed or moved to another machine"
	sess, e := claimedRows("w1", t0)
	_, _, err := Arrive(sess, e, now, arrival(e.Epoch-1), time.Second)
	wantRefusal(t, err, ErrConflict, stale)
	_, _, err = Arrive(sess, e, t0.Add(ttl+time.Second), arrival(e.Epoch), time.Second)
	wantRefusal(t, err, ErrConflict, stale)
	pending, pe := newRows()
	_, _, err = Arrive(pending, pe, now, arrival(pe.Epoch), time.Second)
	wantRefusal(t, err, ErrConflict, stale)
}

// TestArriveFirstCall: the first call given with the arrival is recorded
// in its commit only for a session that never ran; a reconnect or a
// resume records none (its calls are its own already).
func TestArriveFirstCall(t *testing.T) {
	t.Parallel()
	now := t0.Add(10 * time.Second)
	call := store.Call{SessionID: "s1", Seq: 1, Tool: api.ToolExec, Args: []byte(`{"command":"true"}`), CreatedAt: now}
	a := arrival(2)
	a.FirstCall, a.FirstCallEvent = &call, api.Event{Type: api.EventCall, Time: now.UnixMilli(), CallSeq: 1, Tool: api.ToolExec}
	tests := []struct {
		name   string
		rows   func() (store.Session, store.QueueEntry)
		calls  int
		events string
	}{
		{"first hello", func() (store.Session, store.QueueEntry) { return claimedRows("w1", t0) }, 1, "remote_connected,status,call"},
		{"reconnect", func() (store.Session, store.QueueEntry) { return runningRows("w1", t0) }, 0, "remote_connected"},
		{"resuming", func() (store.Session, store.QueueEntry) {
			sess, e := claimedRows("w1", t0)
			sess.Status = api.StatusResuming
			return sess, e
		}, 0, "remote_connected,resume,status"},
		{"a call done before", func() (store.Session, store.QueueEntry) {
			sess, e := claimedRows("w1", t0)
			sess.LastSeq = 1
			return sess, e
		}, 0, "remote_connected,status"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sess, e := tt.rows()
			m, _, err := Arrive(sess, e, now, a, 25*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Calls) != tt.calls || tt.calls == 1 && m.Calls[0].Seq != 1 {
				t.Errorf("calls %+v, want %d", m.Calls, tt.calls)
			}
			if got := eventTypes(m.Events); got != tt.events {
				t.Errorf("events %s, want %s", got, tt.events)
			}
		})
	}
}
