package postgres

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// sqlLog records the statements a pool sends.
type sqlLog struct {
	mu   sync.Mutex
	sqls []string
}

func (l *sqlLog) add(q string) {
	l.mu.Lock()
	l.sqls = append(l.sqls, q)
	l.mu.Unlock()
}

// take returns the statements sent since the last take.
func (l *sqlLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.sqls
	l.sqls = nil
	return out
}

func (l *sqlLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.add(d.SQL)
	return ctx
}
func (l *sqlLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (l *sqlLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (l *sqlLog) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	l.add(d.SQL)
}
func (l *sqlLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// A group reads its claims' states with their locks, and writes their
// states, events and connect tokens, and deletes their older tokens, in
// one statement of each kind at its COMMIT; what it stores is what the
// same claims store alone: every column of the state (NULL or not), every
// event, the tokens of the new epoch only, and no other session's. A
// claim that also writes something the group does not merge (a call)
// sends its writes in order, as before, among the merged ones.
func TestGroupMergesWrites(t *testing.T) {
	t.Parallel()
	var log sqlLog
	s, err := Open(t.Context(), pgtest.Shared(t).Database(t), WithClaimGroup(32), func(s *Store) { s.tracer = &log })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	now := time.Now().Truncate(time.Millisecond)
	const n = 4
	var minted atomic.Int64
	// claim is the ith claim's fn: each i sets a different mix of the
	// state's nullable columns, two events and a token of the next epoch.
	claim := func(i int) func(store.Session, store.QueueEntry, store.OutpostLoad) (store.Mutation, error) {
		return func(sess store.Session, e store.QueueEntry, _ store.OutpostLoad) (store.Mutation, error) {
			e.Phase, e.AcceptorID, e.ClaimDeadline, e.UpdatedAt = api.PhaseClaimed, "acc", now.Add(time.Minute), now
			e.Epoch++
			sess.Status, sess.UpdatedAt, sess.Worker = api.StatusClaimed, now, fmt.Sprint("w", i)
			sess.StatusDetail, sess.Reason, sess.LastSeq = fmt.Sprint("detail ", i), fmt.Sprint("reason ", i), int64(i)
			if i%2 == 0 {
				started := now.Add(-time.Duration(i) * time.Second)
				sess.StartedAt = &started
				sess.Capabilities = &api.Capabilities{OS: "linux", Arch: "amd64", CPUs: i + 1}
				sess.NetworkPolicy = &api.NetworkPolicy{Enabled: true}
			} else {
				ended := now
				sess.EndedAt = &ended
				sess.Usage = api.Usage{ModelCalls: int64(i), PromptTokens: 10}
				sess.Approvals = []api.Approval{{CallSeq: int64(i), Tool: "exec", State: api.ApprovalPending}}
			}
			var calls []store.Call
			if i == 1 {
				calls = []store.Call{{Seq: 1, Tool: "exec", Args: []byte(`{"cmd":"true"}`), CreatedAt: now}}
			}
			tokens := []store.ConnectToken{{Hash: fmt.Sprint("ct-", minted.Add(1)), Epoch: e.Epoch, CreatedAt: now}}
			if i == 2 {
				// A token of an older epoch, added and deleted by the same
				// write: the delete comes after the insert.
				tokens = append(tokens, store.ConnectToken{Hash: fmt.Sprint("ct-", minted.Add(1)), Epoch: e.Epoch - 1, CreatedAt: now})
			}
			return store.Mutation{
				Calls:   calls,
				Session: &sess,
				Entry:   &e,
				Events: []api.Event{
					{Time: now.UnixMilli(), Type: api.EventClaim, AcceptorID: "acc"},
					{Time: now.UnixMilli(), Type: api.EventOutput, Text: fmt.Sprint("claimed ", i, "\n")},
				},
				ConnectTokens: tokens,
			}, nil
		}
	}
	// Each session is claimed once alone first, so that it holds a token
	// of an older epoch for the second claim to delete.
	alone, grouped := make([]string, n), make([]string, n)
	for i := range n {
		alone[i], grouped[i] = fmt.Sprint("a", i), fmt.Sprint("g", i)
		for _, id := range []string{alone[i], grouped[i]} {
			sess := store.Session{ID: id, OutpostID: "op", Status: api.StatusNew, CreatedAt: now, UpdatedAt: now}
			e := &store.QueueEntry{OutpostID: "op", Kind: api.KindNew, Platform: api.PlatformLinux, Phase: api.PhasePending}
			if err := s.CreateSession(ctx, sess, e, []api.Event{{Time: now.UnixMilli(), Type: api.EventOutput, Text: "created\n"}}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.ClaimSession(ctx, id, now, "", claim(i)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.ClaimSession(ctx, alone[i], now, "", claim(i)); err != nil {
			t.Fatal(err)
		}
	}
	// A session outside the group keeps its token of an older epoch: the
	// group deletes the older tokens of its own sessions only.
	bystander := store.Session{ID: "b0", OutpostID: "op", Status: api.StatusNew, CreatedAt: now, UpdatedAt: now}
	if err := s.CreateSession(ctx, bystander, &store.QueueEntry{OutpostID: "op", Kind: api.KindNew, Platform: api.PlatformLinux, Phase: api.PhasePending}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimSession(ctx, "b0", now, "", claim(0)); err != nil {
		t.Fatal(err)
	}
	// What each grouped claim's fn is given is the state the group read
	// with its lock: the session as stored, but its spec and secrets,
	// which no write transaction reads.
	want, seen := make([]store.Session, n), make([]store.Session, n)
	for i := range n {
		if want[i], err = s.GetSession(ctx, grouped[i]); err != nil {
			t.Fatal(err)
		}
		want[i].Spec, want[i].Secrets = api.SessionSpec{}, nil
	}
	log.take()
	before, _ := s.ClaimGroups()
	errs := make([]error, n)
	claims := make([]func(), n)
	for i := range n {
		claims[i] = func() {
			fn := claim(i)
			_, errs[i] = s.ClaimSession(ctx, grouped[i], now, "", func(sess store.Session, e store.QueueEntry, l store.OutpostLoad) (store.Mutation, error) {
				seen[i] = sess
				return fn(sess, e, l)
			})
		}
	}
	queueInGroup(t, s, claims...)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", grouped[i], err)
		}
	}
	if groups, claimed := s.ClaimGroups(); groups != before+1 {
		t.Fatalf("%d groups ran (%d claims); want 1", groups-before, claimed)
	}
	sent := log.take()
	for i := range n {
		if !reflect.DeepEqual(seen[i], want[i]) {
			t.Errorf("claim %d was given\n%+v\nwant\n%+v", i, seen[i], want[i])
		}
	}
	if got := count(sent, getStateLockedSQL); got != 0 {
		t.Errorf("the group's claims read their states again %d times; want none", got)
	}
	// Claim 1 writes a call too: its writes go as they are, one
	// statement each, and the others' merged.
	for _, tc := range []struct {
		sql, name string
		want      int
	}{
		{sqlstore.UpdateStateSQL, "state", 1},
		{sqlstore.InsertConnectTokenSQL, "token", 1},
		{sqlstore.PruneConnectTokensSQL, "prune", 1},
		{sqlstore.UpsertCallSQL, "call", 1},
		{insertEventsSQL, "event", 2},
		{mergeStateSQL, "merged state", 1},
		{mergeTokensSQL, "merged token", 1},
		{mergePrunesSQL, "merged prune", 1},
	} {
		if got := count(sent, tc.sql); got != tc.want {
			t.Errorf("the group sent %d %s writes; want %d", got, tc.name, tc.want)
		}
	}
	if b := stored(t, s, "b0"); !reflect.DeepEqual(b.epochs, []int64{1}) {
		t.Errorf("the session outside the group has tokens of epochs %v; want [1]", b.epochs)
	}
	for i := range n {
		a, g := stored(t, s, alone[i]), stored(t, s, grouped[i])
		a.sess.ID, a.sess.UpdatedAt = g.sess.ID, g.sess.UpdatedAt
		if !reflect.DeepEqual(a.sess, g.sess) {
			t.Errorf("claim %d: grouped, the session reads\n%+v\nalone\n%+v", i, g.sess, a.sess)
		}
		if !reflect.DeepEqual(a.events, g.events) {
			t.Errorf("claim %d: grouped, the transcript reads %q; alone %q", i, g.events, a.events)
		}
		if !reflect.DeepEqual(g.epochs, []int64{2}) || !reflect.DeepEqual(a.epochs, g.epochs) {
			t.Errorf("claim %d: grouped, the connect tokens are of epochs %v; alone %v; want [2]", i, g.epochs, a.epochs)
		}
		if !reflect.DeepEqual(a.calls, g.calls) || i == 1 && len(g.calls) != 1 {
			t.Errorf("claim %d: grouped, the calls are %v; alone %v", i, g.calls, a.calls)
		}
	}
}

// count is how many of sent are q.
func count(sent []string, q string) int {
	n := 0
	for _, s := range sent {
		if s == q {
			n++
		}
	}
	return n
}

// storedSession is what a store holds of a session, for comparison.
type storedSession struct {
	sess   store.Session
	events []string // type and text of each, in seq order
	epochs []int64  // its connect tokens'
	calls  []string // tool and args of each
}

func stored(t *testing.T, s *Store, id string) storedSession {
	t.Helper()
	var out storedSession
	var err error
	if out.sess, err = s.GetSession(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	evs, err := s.ListEvents(t.Context(), id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		out.events = append(out.events, fmt.Sprint(e.Seq, " ", e.Type, " ", e.Text))
	}
	rows, err := s.pool.Query(t.Context(), `SELECT epoch FROM connect_tokens WHERE session_id = $1 ORDER BY epoch`, id)
	if err != nil {
		t.Fatal(err)
	}
	if out.epochs, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out.epochs)
	calls, err := s.ListCalls(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		out.calls = append(out.calls, fmt.Sprint(c.Seq, " ", c.Tool, " ", string(c.Args)))
	}
	return out
}
