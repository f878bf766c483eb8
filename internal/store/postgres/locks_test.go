package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
)

// lockHolders returns the backend pids holding name's advisory lock in the
// database of c. pg_locks spells a bigint key as its high and low halves.
func lockHolders(t *testing.T, c *pgx.Conn, name string) []int32 {
	t.Helper()
	key := uint64(lockKey(name))
	rows, err := c.Query(t.Context(), `SELECT pid FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND classid = $1 AND objid = $2
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
		int64(key>>32), int64(key&0xffffffff))
	if err != nil {
		t.Fatalf("query pg_locks: %v", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatalf("read pg_locks: %v", err)
	}
	return pids
}

// TestLockAcrossStores: two Stores on one database (two servers) exclude
// each other, and a shared lock of one lets the other share.
func TestLockAcrossStores(t *testing.T) {
	t.Parallel()
	a, url := openTemp(t)
	defer a.Close()
	b, err := Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	unlock, err := a.Lock(t.Context(), "outposts", false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	_, err = b.Lock(ctx, "outposts", true)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("shared lock on the other store while one is exclusive: %v, want a deadline", err)
	}
	unlock()
	s1, err := a.Lock(t.Context(), "outposts", true)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := b.Lock(t.Context(), "outposts", true)
	if err != nil {
		t.Fatalf("second shared lock from the other store: %v", err)
	}
	s1()
	s2()
}

// TestLockReleasedWhenConnectionDies kills the backend holding an
// exclusive lock (pg_terminate_backend, as a crash or a lost network would
// end it): the database releases the lock, another store takes it, and the
// holder's late unlock is harmless — the broken connection is dropped, not
// pooled, and the store goes on locking.
func TestLockReleasedWhenConnectionDies(t *testing.T) {
	t.Parallel()
	a, url := openTemp(t)
	defer a.Close()
	b, err := Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	admin, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())

	unlock, err := a.Lock(t.Context(), "message:ses_1", false)
	if err != nil {
		t.Fatal(err)
	}
	pids := lockHolders(t, admin, "message:ses_1")
	if len(pids) != 1 {
		t.Fatalf("holders of the lock = %v, want one backend", pids)
	}
	got := make(chan error, 1)
	go func() {
		u, err := b.Lock(t.Context(), "message:ses_1", false)
		if err == nil {
			u()
		}
		got <- err
	}()
	if _, err := admin.Exec(t.Context(), `SELECT pg_terminate_backend($1)`, pids[0]); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("lock after its holder died: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lock was not released when its connection died")
	}
	unlock() // on a dead connection
	for i := range 3 {
		u, err := a.Lock(t.Context(), fmt.Sprint("after-", i), true)
		if err != nil {
			t.Fatalf("lock after a dead holder's unlock: %v", err)
		}
		u()
	}
	if n := a.locks.Stat().TotalConns(); n > 1 {
		t.Errorf("lock pool has %d connections after serial locks, want at most 1", n)
	}
}

// BenchmarkLock measures one uncontended lock and unlock (two round trips
// on a held connection), exclusive and shared.
func BenchmarkLock(b *testing.B) {
	srv := pgtest.Shared(b)
	s, err := Open(b.Context(), srv.Database(b))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, shared := range []bool{false, true} {
		b.Run(fmt.Sprintf("shared=%v", shared), func(b *testing.B) {
			for b.Loop() {
				unlock, err := s.Lock(b.Context(), "outposts", shared)
				if err != nil {
					b.Fatal(err)
				}
				unlock()
			}
		})
	}
	b.Run("shared=true/parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				unlock, err := s.Lock(b.Context(), "outposts", true)
				if err != nil {
					b.Error(err)
					return
				}
				unlock()
			}
		})
	})
}

// BenchmarkPutWorker measures a worker heartbeat (one durable transaction,
// fsync on) on an outpost with 100 live workers.
func BenchmarkPutWorker(b *testing.B) {
	srv := pgtest.StartT(b, pgtest.Options{Fsync: true})
	s, err := Open(b.Context(), srv.Database(b))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateOutpost(b.Context(), store.Outpost{ID: "op", Name: "op", Platform: api.PlatformLinux, CreatedAt: time.Now()}); err != nil {
		b.Fatal(err)
	}
	hb := func(i int) store.Worker {
		now := time.Now()
		return store.Worker{OutpostID: "op", AcceptorID: fmt.Sprint("w", i%100),
			Info:       api.WorkerInfo{Kind: api.WorkerKindWorker, Hostname: "box", Instance: fmt.Sprint("inst-", i%100), MaxSessions: 1},
			LastSeenAt: now, ExpiresAt: now.Add(api.WorkerTTL)}
	}
	i := 0
	for b.Loop() {
		if _, err := s.PutWorker(b.Context(), hb(i), 1000); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
