package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

func testUpdateSessionWrites(t *testing.T, s store.Store) {
	sess := newSession("s1", "op", "t", 0)
	entry := newEntry(sess)
	must(t, "create", s.CreateSession(ctx(t), sess, entry, []api.Event{{Time: 1, Type: api.EventStatus, Status: api.StatusNew}}))

	var sawSession store.Session
	var sawEntry store.QueueEntry
	m, err := s.UpdateSession(ctx(t), "s1", func(cur store.Session, e store.QueueEntry) (store.Mutation, error) {
		sawSession, sawEntry = cur, e
		cur.Status, cur.StatusDetail, cur.StartedAt = api.StatusClaimed, api.DetailWorking, ptr(at(time.Second))
		cur.UpdatedAt = at(time.Second)
		cur.Capabilities = &api.Capabilities{OS: "linux", CPUs: 2}
		cur.Usage = api.Usage{PromptTokens: 10, CompletionTokens: 2, ModelCalls: 1}
		cur.Worker = "acc-1"
		claim("acc-1", at(time.Minute))(&e)
		return store.Mutation{
			Session: &cur,
			Entry:   &e,
			Events: []api.Event{
				{Time: 2, Type: api.EventClaim, AcceptorID: "acc-1"},
				{Time: 3, Type: api.EventStatus, Status: api.StatusClaimed},
			},
			Calls:         []store.Call{{Seq: 1, Tool: "shell", Args: json.RawMessage(`{"cmd":"ls"}`), CreatedAt: at(time.Second)}},
			ConnectTokens: []store.ConnectToken{{Hash: "ct-hash", Epoch: e.Epoch, CreatedAt: at(time.Second)}},
		}, nil
	})
	must(t, "update", err)
	// fn sees the session without its immutable spec and secrets.
	bare := sess
	bare.Spec, bare.Secrets = api.SessionSpec{}, nil
	equal(t, "fn saw session", sawSession, bare)
	equal(t, "fn saw entry", sawEntry, *entry)

	if m.Entry.Rev <= entry.Rev {
		t.Errorf("new rev %d not after %d", m.Entry.Rev, entry.Rev)
	}
	for i, ev := range m.Events {
		if ev.Seq != int64(i+2) || ev.SessionID != "s1" {
			t.Errorf("returned event %d: seq %d, session %q; want seq %d, session s1", i, ev.Seq, ev.SessionID, i+2)
		}
	}
	gotSession, err := s.GetSession(ctx(t), "s1")
	must(t, "get session", err)
	want := *m.Session
	want.Spec, want.Secrets = sess.Spec, sess.Secrets // untouched by the update
	equal(t, "session", gotSession, want)
	gotEntry, err := s.GetQueueEntry(ctx(t), "s1")
	must(t, "get entry", err)
	equal(t, "entry", gotEntry, *m.Entry)
	evs, err := s.ListEvents(ctx(t), "s1", 1, 0)
	must(t, "events", err)
	equal(t, "events", evs, m.Events)
	calls, err := s.ListCalls(ctx(t), "s1")
	must(t, "calls", err)
	equal(t, "calls", calls, []store.Call{{SessionID: "s1", Seq: 1, Tool: "shell", Args: json.RawMessage(`{"cmd":"ls"}`), CreatedAt: at(time.Second)}})
	ct, err := s.LookupConnectToken(ctx(t), "ct-hash")
	must(t, "connect token", err)
	equal(t, "connect token", ct, store.ConnectToken{Hash: "ct-hash", SessionID: "s1", Epoch: 1, CreatedAt: at(time.Second)})

	// An empty mutation writes nothing and assigns no rev.
	before, err := s.MaxRev(ctx(t))
	must(t, "max rev", err)
	_, err = s.UpdateSession(ctx(t), "s1", func(store.Session, store.QueueEntry) (store.Mutation, error) {
		return store.Mutation{}, nil
	})
	must(t, "empty update", err)
	after, err := s.MaxRev(ctx(t))
	must(t, "max rev", err)
	if after != before {
		t.Errorf("empty mutation moved MaxRev from %d to %d", before, after)
	}
}

func testUpdateSessionWithoutEntry(t *testing.T, s store.Store) {
	sess := newSession("s1", "op", "t", 0)
	must(t, "create without entry", s.CreateSession(ctx(t), sess, nil, nil))
	_, err := s.GetQueueEntry(ctx(t), "s1")
	wantErr(t, "entry of entry-less session", err, store.ErrNotFound)

	var saw store.QueueEntry
	m, err := s.UpdateSession(ctx(t), "s1", func(_ store.Session, e store.QueueEntry) (store.Mutation, error) {
		saw = e
		e = *newEntry(sess)
		return store.Mutation{Entry: &e}, nil
	})
	must(t, "update", err)
	equal(t, "fn saw", saw, store.QueueEntry{SessionID: "s1"})
	got, err := s.GetQueueEntry(ctx(t), "s1")
	must(t, "get entry", err)
	equal(t, "entry", got, *m.Entry)
}

// A claim of a session that has events but no queue entry sees an empty
// entry and no limit, and the events it appends follow the ones there
// (a claim reads the seq with the entry, so here it reads it on its own).
func testClaimSessionWithoutEntry(t *testing.T, s store.Store) {
	sess := newSession("s1", "op", "t", 0)
	must(t, "create without entry", s.CreateSession(ctx(t), sess, nil,
		[]api.Event{{Time: 1, Type: api.EventOutput, Text: "a"}, {Time: 2, Type: api.EventOutput, Text: "b"}}))
	// A token of an epoch before the claim's, which the claim, knowing
	// nothing of the session's tokens, prunes as any write of an entry.
	_, err := s.UpdateSession(ctx(t), "s1", func(store.Session, store.QueueEntry) (store.Mutation, error) {
		return store.Mutation{ConnectTokens: []store.ConnectToken{{Hash: "old", SessionID: "s1", Epoch: 1, CreatedAt: base}}}, nil
	})
	must(t, "insert a connect token", err)
	var saw store.QueueEntry
	var load store.OutpostLoad
	m, err := s.ClaimSession(ctx(t), "s1", base, "", func(_ store.Session, e store.QueueEntry, l store.OutpostLoad) (store.Mutation, error) {
		saw, load = e, l
		e = *newEntry(sess)
		e.Epoch = 2
		return store.Mutation{Entry: &e, Events: []api.Event{{Time: 3, Type: api.EventOutput, Text: "c"}}}, nil
	})
	must(t, "claim", err)
	equal(t, "fn saw", saw, store.QueueEntry{SessionID: "s1"})
	equal(t, "load", load, store.OutpostLoad{})
	got, err := s.GetQueueEntry(ctx(t), "s1")
	must(t, "get entry", err)
	equal(t, "entry", got, *m.Entry)
	evs, err := s.ListEvents(ctx(t), "s1", 0, 0)
	must(t, "list events", err)
	if len(evs) != 3 || evs[2].Seq != 3 || evs[2].Text != "c" {
		t.Errorf("events after the claim: %+v; want the claim's third, seq 3", evs)
	}
	_, err = s.LookupConnectToken(ctx(t), "old")
	wantErr(t, "token of the epoch the claim moved past", err, store.ErrNotFound)
}

func testUpdateSessionNotFound(t *testing.T, s store.Store) {
	called := false
	_, err := s.UpdateSession(ctx(t), "nope", func(store.Session, store.QueueEntry) (store.Mutation, error) {
		called = true
		return store.Mutation{}, nil
	})
	wantErr(t, "update missing", err, store.ErrNotFound)
	if called {
		t.Error("fn called for a missing session")
	}
}

// snapshot is everything an UpdateSession of session id may change.
type snapshot struct {
	Session store.Session
	Entry   store.QueueEntry
	Events  []api.Event
	Calls   []store.Call
	MaxRev  int64
}

func takeSnapshot(t *testing.T, s store.Store, id string) snapshot {
	t.Helper()
	var snap snapshot
	var err error
	snap.Session, err = s.GetSession(ctx(t), id)
	must(t, "snapshot session", err)
	snap.Entry, err = s.GetQueueEntry(ctx(t), id)
	must(t, "snapshot entry", err)
	snap.Events, err = s.ListEvents(ctx(t), id, 0, 0)
	must(t, "snapshot events", err)
	snap.Calls, err = s.ListCalls(ctx(t), id)
	must(t, "snapshot calls", err)
	snap.MaxRev, err = s.MaxRev(ctx(t))
	must(t, "snapshot rev", err)
	return snap
}

// fullMutation changes every part of session cur and entry e.
func fullMutation(cur store.Session, e store.QueueEntry, tokenHash string) store.Mutation {
	cur.Status = api.StatusRunning
	claim("acc", at(time.Hour))(&e)
	return store.Mutation{
		Session:       &cur,
		Entry:         &e,
		Events:        []api.Event{{Time: 9, Type: api.EventClaim, AcceptorID: "acc"}},
		Calls:         []store.Call{{Seq: 1, Tool: "shell", CreatedAt: base}},
		ConnectTokens: []store.ConnectToken{{Hash: tokenHash, Epoch: e.Epoch, CreatedAt: base}},
	}
}

func testUpdateSessionFnError(t *testing.T, s store.Store) {
	create(t, s, newSession("s1", "op", "t", 0))
	before := takeSnapshot(t, s, "s1")
	_, err := s.UpdateSession(ctx(t), "s1", func(cur store.Session, e store.QueueEntry) (store.Mutation, error) {
		return fullMutation(cur, e, "h"), errBoom
	})
	wantErr(t, "fn error", err, errBoom)
	equal(t, "state after fn error", takeSnapshot(t, s, "s1"), before)
	_, err = s.LookupConnectToken(ctx(t), "h")
	wantErr(t, "connect token after fn error", err, store.ErrNotFound)
}

func testUpdateSessionRollsBack(t *testing.T, s store.Store) {
	create(t, s, newSession("s1", "op", "t", 0))
	create(t, s, newSession("s2", "op", "t", 0))
	_, err := s.UpdateSession(ctx(t), "s2", func(_ store.Session, _ store.QueueEntry) (store.Mutation, error) {
		return store.Mutation{ConnectTokens: []store.ConnectToken{{Hash: "taken", CreatedAt: base}}}, nil
	})
	must(t, "seed token", err)

	// The last write of the mutation fails; none of it may stay.
	before := takeSnapshot(t, s, "s1")
	_, err = s.UpdateSession(ctx(t), "s1", func(cur store.Session, e store.QueueEntry) (store.Mutation, error) {
		return fullMutation(cur, e, "taken"), nil
	})
	if err == nil {
		t.Fatal("update with a duplicate connect token hash succeeded")
	}
	equal(t, "state after failed write", takeSnapshot(t, s, "s1"), before)
}

func testRevs(t *testing.T, s store.Store) {
	rev, err := s.MaxRev(ctx(t))
	must(t, "max rev of empty store", err)
	if rev != 0 {
		t.Errorf("MaxRev of empty store = %d, want 0", rev)
	}
	var revs []int64
	for _, id := range []string{"a", "b", "c"} {
		revs = append(revs, create(t, s, newSession(id, "op", id, 0)).Rev)
	}
	for _, id := range []string{"b", "a", "b", "c", "a"} {
		revs = append(revs, setEntry(t, s, id, func(e *store.QueueEntry) { e.UpdatedAt = e.UpdatedAt.Add(time.Second) }).Rev)
	}
	for i := 1; i < len(revs); i++ {
		if revs[i] <= revs[i-1] {
			t.Fatalf("revs not strictly increasing: %v", revs)
		}
	}
	rev, err = s.MaxRev(ctx(t))
	must(t, "max rev", err)
	if rev != revs[len(revs)-1] {
		t.Errorf("MaxRev = %d, want %d", rev, revs[len(revs)-1])
	}
	e, err := s.GetQueueEntry(ctx(t), "a")
	must(t, "get a", err)
	if e.Rev != revs[len(revs)-1] {
		t.Errorf("entry a rev = %d, want %d", e.Rev, revs[len(revs)-1])
	}
}
