package postgres

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
)

// feed is a running Listen whose changes a test reads.
type feed struct {
	t  *testing.T
	ch chan feedChange
}

// feedChange is one change and when fn got it.
type feedChange struct {
	store.Change
	at time.Time
}

// listen runs s.Listen until the test ends and waits for its first Resync.
func listen(t *testing.T, s *Store) *feed {
	t.Helper()
	f := &feed{t: t, ch: make(chan feedChange, 10000)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.Listen(ctx, func(c store.Change) { f.ch <- feedChange{c, time.Now()} })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Listen returned %v, want context.Canceled", err)
		}
	})
	if c := f.next(); !c.Resync || c.Err != nil {
		t.Fatalf("first change %+v, want a Resync without an error", c)
	}
	return f
}

// next waits for the next change.
func (f *feed) next() feedChange {
	f.t.Helper()
	select {
	case c := <-f.ch:
		return c
	case <-time.After(10 * time.Second):
		f.t.Fatal("no change within 10s")
		return feedChange{}
	}
}

// expect waits for the next change and checks it is want.
func (f *feed) expect(what string, want store.Change) {
	f.t.Helper()
	got := f.next().Change
	if got != want {
		f.t.Fatalf("%s: change %+v, want %+v", what, got, want)
	}
}

// openReplica opens a store on url under replica id.
func openReplica(t *testing.T, url, id string) *Store {
	t.Helper()
	s, err := Open(t.Context(), url, WithReplica(id))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestListenChanges: each write another store commits reaches Listen,
// once, in commit order, with its session, outpost, highest seq, rev and
// epoch; writes that change nothing watchers follow, and writes that fail,
// tell of nothing.
func TestListenChanges(t *testing.T) {
	t.Parallel()
	url := pgtest.Shared(t).Database(t)
	a, b := openReplica(t, url, "replica-a"), openReplica(t, url, "replica-b")
	f := listen(t, b)
	ctx := t.Context()
	now := time.Now()

	if err := a.CreateOutpost(ctx, store.Outpost{ID: "op1", Name: "one", Platform: "linux", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	f.expect("create outpost", store.Change{Origin: "replica-a", OutpostID: "op1"})
	if err := a.CreateOutpost(ctx, store.Outpost{ID: "op2", Name: "one", Platform: "linux", CreatedAt: now}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("create outpost with a taken name: %v", err)
	}

	sess := store.Session{ID: "s1", OutpostID: "op1", Status: api.StatusNew, CreatedAt: now, UpdatedAt: now}
	e := &store.QueueEntry{OutpostID: "op1", Kind: api.KindNew, Platform: "linux", Phase: api.PhasePending, CreatedAt: now, UpdatedAt: now}
	evs := []api.Event{{Type: api.EventStatus, Status: api.StatusNew}, {Type: api.EventOutput, Text: "x"}}
	if err := a.CreateSession(ctx, sess, e, evs); err != nil {
		t.Fatal(err)
	}
	f.expect("create session", store.Change{Origin: "replica-a", SessionID: "s1", OutpostID: "op1", Seq: 2, Rev: e.Rev, Epoch: 0})

	if err := a.AppendEvents(ctx, "s1", []api.Event{{Type: api.EventOutput, Text: "a"}, {Type: api.EventOutput, Text: "b"}, {Type: api.EventOutput, Text: "c"}}); err != nil {
		t.Fatal(err)
	}
	f.expect("append events", store.Change{Origin: "replica-a", SessionID: "s1", Seq: 5})

	// Only the session's row: nothing a follower or a watcher reads.
	if _, err := a.UpdateSession(ctx, "s1", func(s store.Session, _ store.QueueEntry) (store.Mutation, error) {
		s.StatusDetail = "x"
		return store.Mutation{Session: &s}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.UpdateSession(ctx, "s1", func(store.Session, store.QueueEntry) (store.Mutation, error) {
		return store.Mutation{Events: []api.Event{{Type: api.EventOutput}}}, errors.New("refused")
	}); err == nil {
		t.Fatal("a refused update succeeded")
	}

	m, err := a.ClaimSession(ctx, "s1", now, "", func(s store.Session, e store.QueueEntry, _ store.OutpostLoad) (store.Mutation, error) {
		e.Phase, e.AcceptorID, e.ClaimDeadline = api.PhaseClaimed, "w1", now.Add(time.Minute)
		e.Epoch++
		return store.Mutation{Entry: &e, Events: []api.Event{{Type: api.EventClaim, AcceptorID: "w1"}}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	f.expect("claim", store.Change{Origin: "replica-a", SessionID: "s1", OutpostID: "op1", Seq: 6, Rev: m.Entry.Rev, Epoch: 1})

	// The entry alone, and from the listening store itself.
	m, err = b.UpdateSession(ctx, "s1", func(s store.Session, e store.QueueEntry) (store.Mutation, error) {
		e.Epoch++
		return store.Mutation{Entry: &e}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	f.expect("entry alone", store.Change{Origin: "replica-b", SessionID: "s1", OutpostID: "op1", Seq: 6, Rev: m.Entry.Rev, Epoch: 2})

	if err := a.DeleteOutpost(ctx, "op-absent"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete an absent outpost: %v", err)
	}
	if err := a.DeleteOutpost(ctx, "op1"); err != nil {
		t.Fatal(err)
	}
	f.expect("delete outpost", store.Change{Origin: "replica-a", OutpostID: "op1"})

	// A notification this version cannot read asks for a resync.
	if _, err := a.pool.Exec(ctx, `SELECT pg_notify($1, 'not json')`, changesChannel); err != nil {
		t.Fatal(err)
	}
	f.expect("unknown payload", store.Change{Resync: true})
	select {
	case c := <-f.ch:
		t.Fatalf("unexpected change %+v", c.Change)
	default:
	}
}

// TestReplicaIDTooLong: an id that could push a notification past
// PostgreSQL's limit is refused at Open, not at every commit.
func TestReplicaIDTooLong(t *testing.T) {
	t.Parallel()
	_, err := Open(t.Context(), pgtest.Shared(t).Database(t), WithReplica(strings.Repeat("r", 201)))
	if err == nil || !strings.Contains(err.Error(), "replica id") {
		t.Fatalf("Open with a 201-byte replica id: %v", err)
	}
}

// killListener terminates the backend of every listen connection of the
// database at url and returns how many it terminated.
func killListener(t *testing.T, c *pgx.Conn) int {
	t.Helper()
	var n int
	err := c.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND datname = current_database()`, listenApplication).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestListenReconnects: a listen connection killed by the database (as a
// failover or an administrator would) is connected again at once and says
// Resync with what broke it; then changes flow again.
func TestListenReconnects(t *testing.T) {
	t.Parallel()
	url := pgtest.Shared(t).Database(t)
	a, b := openReplica(t, url, "a"), openReplica(t, url, "b")
	admin, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	f := listen(t, b)
	createSessions(t, a, "s1")
	f.next()
	for round := range 3 {
		if n := killListener(t, admin); n != 1 {
			t.Fatalf("round %d: terminated %d listen connections, want 1", round, n)
		}
		c := f.next()
		if !c.Resync || c.Err == nil {
			t.Fatalf("round %d: after the kill got %+v, want a Resync with an error", round, c.Change)
		}
		evs := []api.Event{{Type: api.EventOutput, Text: "x"}}
		if err := a.AppendEvents(t.Context(), "s1", evs); err != nil {
			t.Fatal(err)
		}
		f.expect("append after reconnect", store.Change{Origin: "a", SessionID: "s1", Seq: evs[0].Seq})
	}
}

// createSessions creates pending sessions of outpost op.
func createSessions(t *testing.T, s *Store, ids ...string) {
	t.Helper()
	now := time.Now()
	for _, id := range ids {
		e := &store.QueueEntry{OutpostID: "op", Kind: api.KindNew, Platform: "linux", Phase: api.PhasePending, CreatedAt: now, UpdatedAt: now}
		if err := s.CreateSession(t.Context(), store.Session{ID: id, OutpostID: "op", Status: api.StatusNew, CreatedAt: now, UpdatedAt: now}, e, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// TestListenKillRace: an append races the kill of the listen connection,
// twenty times. Each time the consumer hears of the append, or gets a
// Resync after the append began (and reads the store again): nothing is
// missed silently. No other write follows to cover for a lost one.
func TestListenKillRace(t *testing.T) {
	t.Parallel()
	url := pgtest.Shared(t).Database(t)
	a, b := openReplica(t, url, "a"), openReplica(t, url, "b")
	admin, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	f := listen(t, b)
	createSessions(t, a, "s1")
	f.next()
	told, resynced := 0, 0
	for round := range 20 {
		var began time.Time
		var seq int64
		var wg sync.WaitGroup
		wg.Go(func() {
			began = time.Now()
			evs := []api.Event{{Type: api.EventOutput, Text: "x"}}
			if err := a.AppendEvents(context.Background(), "s1", evs); err != nil {
				t.Error(err)
			}
			seq = evs[0].Seq
		})
		killListener(t, admin)
		wg.Wait()
		covered, resync := false, false
		for !covered || !resync {
			c := f.next()
			switch {
			case c.Resync:
				resync = true
				if c.at.After(began) && !covered {
					covered = true
					resynced++
				}
			case c.Seq >= seq && !covered:
				covered = true
				told++
			case c.Seq >= seq:
			case c.Seq > 0 && round > 0:
				// A change of an earlier round told late (its round was
				// covered by a Resync): stale, and harmless.
			default:
				t.Fatalf("round %d: change %+v, want seq %d", round, c.Change, seq)
			}
		}
	}
	t.Logf("of 20 appends racing a kill, %d were told of, %d covered by a Resync", told, resynced)
}

// TestAppendNotifiedBeforeClose: the notification of an append, sent after
// its commit, is not lost when the store closes at once.
func TestAppendNotifiedBeforeClose(t *testing.T) {
	t.Parallel()
	url := pgtest.Shared(t).Database(t)
	b := openReplica(t, url, "b")
	f := listen(t, b)
	a, err := Open(t.Context(), url, WithReplica("a"))
	if err != nil {
		t.Fatal(err)
	}
	createSessions(t, a, "s1")
	f.next()
	evs := []api.Event{{Type: api.EventOutput, Text: "x"}, {Type: api.EventOutput, Text: "y"}}
	if err := a.AppendEvents(t.Context(), "s1", evs); err != nil {
		t.Fatal(err)
	}
	a.Close()
	f.expect("append before close", store.Change{Origin: "a", SessionID: "s1", Seq: 2})
}
