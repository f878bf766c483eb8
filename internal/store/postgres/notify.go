package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outpost-sh/outpost/backoff"
	"github.com/outpost-sh/outpost/internal/store"
)

// The change feed (store.ChangeFeed): every write that appends events or
// writes a queue entry, and every outpost created or deleted, is notified
// on changesChannel, which PostgreSQL delivers to every connection that
// LISTENs — here one connection per Listen, outside the pool. A
// notification is only a wake-up: the database stays the truth, and a
// consumer that may have missed some (the listen connection was lost) is
// told to re-read.
//
// A write that takes a rev (a queue entry's) or changes an outpost
// notifies in its own transaction, in the batch of its writes: it is
// delivered at commit, in commit order, and never lost. A write that only
// appends events is notified just after it commits instead, by a goroutine
// of the store that coalesces such changes by session (lateNotifier): one
// statement tells of many. PostgreSQL serializes the commits of every
// transaction that notifies — it takes one lock for the whole cluster
// before the commit and holds it through the commit's flush to disk — so
// notifying in the transaction would make appends to different sessions,
// which otherwise commit in parallel (their flushes grouped), commit one
// flush at a time (BenchmarkAppendEventsParallel, fsync on, two cores:
// some 2,400–2,900 appends/s without notifications, 350–2,000 notifying
// in the transaction, 2,200–3,000 notified after). Writes of queue entries are serialized until their
// commit by the rev counter already, so they lose nothing by it. The
// notification of an append is lost if the process dies between its commit
// and the notification (or the database does not answer it): consumers
// poll as a backstop.

// changesChannel is the notification channel of the change feed.
const changesChannel = "outpost_changes"

// maxReplicaID bounds WithReplica's id, so that a payload stays far below
// PostgreSQL's 8000-byte limit (past it pg_notify, and so the commit,
// fails).
const maxReplicaID = 200

// WithReplica names the store's writer among the replicas sharing the
// database: every change it commits carries id as its Origin, so a
// replica can skip its own changes (it published them in process). Open
// refuses an id longer than 200 bytes. Without it Origin is "".
func WithReplica(id string) Option { return func(s *Store) { s.replica = id } }

// payload is a notification's body: a Change, compact. The rev is filled
// in by the database (notifySQL), which assigned it.
type payload struct {
	Origin  string `json:"o,omitempty"`
	Session string `json:"s,omitempty"`
	Outpost string `json:"p,omitempty"`
	Seq     int64  `json:"q,omitempty"`
	Rev     int64  `json:"r,omitempty"`
	Epoch   int64  `json:"e,omitempty"`
}

// notifySQL notifies a change of session $2: origin $1, outpost $3,
// highest event seq $4, and, when $6 (the transaction wrote the session's
// queue entry), its epoch $5 and the rev the transaction took — read from
// the counter row, which the transaction holds locked since it took it.
var notifySQL = `SELECT pg_notify('` + changesChannel + `', json_build_object(
	'o', $1::text, 's', $2::text, 'p', $3::text, 'q', $4::bigint, 'e', $5::bigint,
	'r', CASE WHEN $6::boolean THEN (SELECT value FROM counters WHERE name = 'rev') ELSE 0 END)::text)`

// lateNotifySQL notifies each payload of $1 (text[]).
const lateNotifySQL = `SELECT pg_notify('` + changesChannel + `', p) FROM unnest($1::text[]) AS p`

// lateTimeout bounds one statement of the lateNotifier.
const lateTimeout = 5 * time.Second

// lateNotifier notifies the appends of events once they committed (see
// above). Its goroutine runs from Open to Close.
type lateNotifier struct {
	mu sync.Mutex // guards pending
	// pending holds the changes not yet notified, by session: the highest
	// seq wins.
	pending map[string]store.Change

	wake chan struct{} // cap 1: pending has changes
	stop chan struct{} // closed by Close
	done chan struct{} // closed when the goroutine ended
}

func newLateNotifier() *lateNotifier {
	return &lateNotifier{pending: map[string]store.Change{}, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// add records that session id of outpost outpostID has events up to seq.
func (l *lateNotifier) add(id, outpostID string, seq int64) {
	l.mu.Lock()
	c := l.pending[id]
	c.SessionID, c.Seq = id, max(c.Seq, seq)
	if outpostID != "" {
		c.OutpostID = outpostID
	}
	l.pending[id] = c
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// runLateNotifier notifies pending changes until stop, then once more.
func (s *Store) runLateNotifier() {
	l := s.late
	defer close(l.done)
	for {
		select {
		case <-l.wake:
			s.flushLate()
		case <-l.stop:
			s.flushLate()
			return
		}
	}
}

// flushLate notifies every pending change in one statement. A failure
// loses them (the consumers' backstop finds what they told of).
func (s *Store) flushLate() {
	l := s.late
	l.mu.Lock()
	if len(l.pending) == 0 {
		l.mu.Unlock()
		return
	}
	bodies := make([]string, 0, len(l.pending))
	for _, c := range l.pending {
		b, _ := json.Marshal(payload{Origin: s.replica, Session: c.SessionID, Outpost: c.OutpostID, Seq: c.Seq}) // cannot fail
		bodies = append(bodies, string(b))
	}
	clear(l.pending)
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), lateTimeout)
	defer cancel()
	_, _ = s.pool.Exec(ctx, lateNotifySQL, bodies)
}

// outpostPayload is the notification of an outpost created or deleted.
func (s *Store) outpostPayload(outpostID string) string {
	b, _ := json.Marshal(payload{Origin: s.replica, Outpost: outpostID}) // cannot fail
	return string(b)
}

// parsePayload reads a notification's body; ok is false for one this
// version does not understand.
func parsePayload(body string) (store.Change, bool) {
	var p payload
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		return store.Change{}, false
	}
	return store.Change{Origin: p.Origin, SessionID: p.Session, OutpostID: p.Outpost, Seq: p.Seq, Rev: p.Rev, Epoch: p.Epoch}, true
}

// listenApplication is the application_name of the listen connection
// unless the database URL sets one.
const listenApplication = "outpost-listen"

// listenRetry spaces the attempts to connect the listen connection again:
// the first at once (a connection cut by a restart of its backend or a
// proxy is often back at the first try), then from 100ms doubling to 5s.
var listenRetry = backoff.Policy{Base: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.5}

// listenPing is how long the listen connection may be silent before it is
// pinged, so that a connection cut without a word (a host gone, a
// dropped route) is noticed within listenPing plus listenPingTimeout.
const (
	listenPing        = 10 * time.Second
	listenPingTimeout = 5 * time.Second
)

var _ store.ChangeFeed = (*Store)(nil)

// Listen calls fn with every change committed to the database, by this
// store or any other, until ctx ends; it returns ctx's error. Changes of
// queue entries and outposts come in commit order; appends of events come
// just after their commit, coalesced by session (see above). It holds a connection of its own (not one of the pool) that
// LISTENs for the changes. After it connects, and after each reconnect,
// it calls fn with a Resync change first: changes committed while it was
// not listening are lost, and the consumer must re-read what it follows.
// A lost connection is connected again at once, then with backoff from
// 100ms to 5s. fn runs on Listen's goroutine: it must be quick.
func (s *Store) Listen(ctx context.Context, fn func(store.Change)) error {
	var lost error
	for attempt := 0; ; attempt++ {
		if attempt > 1 {
			if err := listenRetry.Wait(ctx, nil, attempt-1); err != nil {
				return err
			}
		}
		conn, err := s.listenConn(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if lost == nil {
				lost = err
			}
			continue
		}
		attempt = 0
		fn(store.Change{Resync: true, Err: lost})
		lost = receive(ctx, conn, fn)
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = conn.Close(closeCtx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// listenConn connects a connection of its own to the store's database and
// LISTENs on the changes channel.
func (s *Store) listenConn(ctx context.Context) (*pgx.Conn, error) {
	cfg := s.pool.Config().ConnConfig
	if cfg.RuntimeParams["application_name"] == "" {
		// Named, so an operator tells it from the pool's in pg_stat_activity.
		cfg.RuntimeParams["application_name"] = listenApplication
	}
	cctx := ctx
	if cfg.ConnectTimeout == 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, connectTimeout)
		defer cancel()
	}
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: listen: connect to %s: %w", describe(cfg), oneLine{err})
	}
	if _, err := conn.Exec(cctx, `LISTEN `+changesChannel); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("postgres: listen: %w", err)
	}
	return conn, nil
}

// receive hands the notifications of conn to fn until the connection
// fails, which it returns, or ctx ends. An idle connection is pinged
// every listenPing.
func receive(ctx context.Context, conn *pgx.Conn, fn func(store.Change)) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, listenPing)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil:
			c, ok := parsePayload(n.Payload)
			if !ok {
				// Written by a newer version: what changed is unknown.
				c = store.Change{Resync: true}
			}
			fn(c)
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			pctx, cancel := context.WithTimeout(ctx, listenPingTimeout)
			err = conn.Ping(pctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("postgres: listen: ping: %w", err)
			}
		default:
			return fmt.Errorf("postgres: listen: %w", err)
		}
	}
}
