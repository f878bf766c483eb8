package postgres

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
)

// claimFn is a claim as the control plane makes it: move the entry to a
// new holder, mark the session claimed, record the claim, mint a connect
// token (the same as the SQLite store's benchmark).
func claimFn(acceptor string, token *atomic.Int64) func(store.Session, store.QueueEntry) (store.Mutation, error) {
	return func(s store.Session, e store.QueueEntry) (store.Mutation, error) {
		now := time.Now()
		e.Phase, e.AcceptorID, e.ClaimDeadline, e.UpdatedAt = api.PhaseClaimed, acceptor, now.Add(time.Minute), now
		e.Epoch++
		e.SessionStatus = api.QueueSessionRunning
		s.Status, s.UpdatedAt = api.StatusClaimed, now
		return store.Mutation{
			Session:       &s,
			Entry:         &e,
			Events:        []api.Event{{Time: now.UnixMilli(), Type: api.EventClaim, AcceptorID: acceptor}},
			ConnectTokens: []store.ConnectToken{{Hash: fmt.Sprintf("ct-%d", token.Add(1)), Epoch: e.Epoch, CreatedAt: now}},
		}, nil
	}
}

// benchStore opens a store on a server of its own with fsync on, so every
// commit is durable as in production, holding n pending sessions.
func benchStore(b *testing.B, n int) *Store {
	s, _ := benchServer(b, n)
	return s
}

// benchServer is benchStore and the server it runs on.
func benchServer(b *testing.B, n int) (*Store, *pgtest.Server) {
	srv := pgtest.StartT(b, pgtest.Options{Fsync: true})
	s, err := Open(b.Context(), srv.Database(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprint("s", i)
	}
	createPending(b, s, ids...)
	return s, srv
}

// createPending creates sessions ids of outpost op, each with a pending
// entry and no events.
func createPending(tb testing.TB, s *Store, ids ...string) {
	tb.Helper()
	now := time.Now()
	for _, id := range ids {
		sess := store.Session{ID: id, OutpostID: "op", Status: api.StatusNew, CreatedAt: now, UpdatedAt: now}
		e := &store.QueueEntry{OutpostID: "op", Kind: api.KindNew, Platform: api.PlatformLinux, Phase: api.PhasePending}
		if err := s.CreateSession(tb.Context(), sess, e, nil); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkUpdateSession measures serial claim-style updates, each one
// durable transaction.
func BenchmarkUpdateSession(b *testing.B) {
	const n = 1000
	s := benchStore(b, n)
	var tokens atomic.Int64
	i := 0
	for b.Loop() {
		if _, err := s.UpdateSession(b.Context(), fmt.Sprint("s", i%n), claimFn("acc", &tokens)); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
}

// BenchmarkUpdateSessionParallel measures claim-style updates from
// 25×GOMAXPROCS goroutines (50 on two cores), which PostgreSQL runs
// concurrently; two updates of one session, and the rev counter row, are
// what serialise them.
func BenchmarkUpdateSessionParallel(b *testing.B) {
	const n = 1000
	s := benchStore(b, n)
	var tokens, next atomic.Int64
	b.SetParallelism(25)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := fmt.Sprint("s", next.Add(1)%n)
			if _, err := s.UpdateSession(b.Context(), id, claimFn("acc", &tokens)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
}

// BenchmarkAppendEventsParallel measures one-event appends to many
// sessions from 25×GOMAXPROCS goroutines, each one durable transaction:
// the transcript writes of many running sessions at once. Nothing but the
// commit (and its notification, notify.go) is shared between them.
func BenchmarkAppendEventsParallel(b *testing.B) {
	const n = 1000
	s := benchStore(b, n)
	var next atomic.Int64
	b.SetParallelism(25)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := fmt.Sprint("s", next.Add(1)%n)
			ev := []api.Event{{Time: time.Now().UnixMilli(), Type: api.EventOutput, Text: "line\n"}}
			if err := s.AppendEvents(b.Context(), id, ev); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
}
