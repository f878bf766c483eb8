package postgres

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// lockConns is the most connections the lock pool opens: how many of Lock's
// locks one Store holds or waits for at once. More wait for a connection.
const lockConns = 8

// unlockTimeout bounds an unlock's round trip; past it the connection is
// closed, which releases the lock as surely.
const unlockTimeout = 5 * time.Second

// newLockPool makes the pool of Lock's connections from the main pool's
// config. A canceled wait sends PostgreSQL a cancel request, so the backend
// leaves the lock's queue at once: with the default handler it would close
// the socket only, and the backend, waiting on the lock rather than
// reading, would stay queued (an exclusive waiter holding off every new
// shared request) until the lock came its way.
func newLockPool(main *pgxpool.Config) (*pgxpool.Pool, error) {
	cfg := main.Copy()
	cfg.MaxConns = lockConns
	cfg.MinConns = 0
	cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: unlockTimeout}
	}
	// No connection is opened until the first Lock.
	return pgxpool.NewWithConfig(context.Background(), cfg)
}

// lockKey is the advisory lock key of a lock name: the 64-bit FNV-1a hash
// of the name. Two names sharing a key (odds 2⁻⁶⁴ a pair) only exclude each
// other more than they must.
func lockKey(name string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return int64(h.Sum64())
}

// Lock takes the session advisory lock of name on a connection of the lock
// pool, which it keeps until unlock: pg_advisory_lock_shared when shared,
// else pg_advisory_lock. Every server on the database is excluded, and a
// connection that dies (its server, its network, pg_terminate_backend)
// releases the lock in the database.
func (s *Store) Lock(ctx context.Context, name string, shared bool) (func(), error) {
	key := lockKey(name)
	c, err := s.locks.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: lock %s: %w", name, err)
	}
	take, release := `SELECT pg_advisory_lock($1)`, `SELECT pg_advisory_unlock($1)`
	if shared {
		take, release = `SELECT pg_advisory_lock_shared($1)`, `SELECT pg_advisory_unlock_shared($1)`
	}
	if _, err := c.Exec(ctx, take, key); err != nil {
		// The lock may have been granted as the wait was canceled: the
		// connection goes, and the lock with it.
		discard(c)
		if ctx.Err() != nil {
			err = ctx.Err() // not the cancel request's "canceling statement"
		}
		return nil, fmt.Errorf("postgres: lock %s: %w", name, err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), unlockTimeout)
			defer cancel()
			var held bool
			if err := c.QueryRow(ctx, release, key).Scan(&held); err != nil || !held {
				// The connection broke (and the lock went with it), or
				// it holds no such lock: do not pool it.
				discard(c)
				return
			}
			c.Release()
		})
	}, nil
}

// discard closes an acquired connection and gives it back, which drops it
// from its pool.
func discard(c *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.Conn().Close(ctx)
	c.Release()
}
