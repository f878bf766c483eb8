package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// maxBatch bounds how many callers' transactions share one commit.
const maxBatch = 128

// errClosed is the error of a write after Close.
var errClosed = errors.New("sqlite: the store is closed")

// writer runs the store's write transactions on its one connection with
// group commit: the transactions that wait while one commit is under way
// run next, one after another, in one SQLite transaction with one COMMIT
// (one fsync), each inside its own SAVEPOINT. A transaction whose function
// fails, or whose caller's context ends before it starts, is rolled back to
// its savepoint and leaves the others as they are; each caller is answered
// only once the COMMIT that holds its writes is on disk, with that
// commit's error if it fails. A failure that ends the whole SQLite
// transaction (the disk full, an I/O error) fails every caller of the
// batch. Transactions run in the order they were queued, so the store's
// revs and seqs are assigned as one writer would assign them.
//
// The writer's goroutine is started by newWriter and ended by close, which
// waits for it.
type writer struct {
	db *sql.DB

	mu     sync.Mutex // guards the following
	queue  []*writeReq
	closed bool

	wake   chan struct{} // capacity 1: something was queued or close was called
	exited chan struct{} // closed when the goroutine returns

	// commits counts the SQLite transactions the writer committed or
	// rolled back, txs the callers' transactions they held (tests and
	// benchmarks read txs/commits as the mean batch).
	commits, txs atomic.Int64
}

// writeReq is one caller's transaction.
type writeReq struct {
	ctx context.Context
	fn  func(*sql.Tx) error

	err      error // the outcome, set before done is closed
	panicked any   // what fn panicked with, re-panicked in the caller
	done     chan struct{}

	taken bool // guarded by writer.mu: the writer has it; it will run
}

func newWriter(db *sql.DB) *writer {
	w := &writer{db: db, wake: make(chan struct{}, 1), exited: make(chan struct{})}
	go w.loop()
	return w
}

// do runs fn in a transaction of the writer and returns once that
// transaction's commit is durable: nil, fn's error (its writes rolled
// back), or the error of the commit. When ctx ends before fn starts, do
// returns ctx.Err() and fn never runs; once fn has started, do waits for
// the commit, so its answer is always the truth.
func (w *writer) do(ctx context.Context, fn func(*sql.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &writeReq{ctx: ctx, fn: fn, done: make(chan struct{})}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return errClosed
	}
	w.queue = append(w.queue, r)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		w.mu.Lock()
		if !r.taken {
			for i, q := range w.queue {
				if q == r {
					w.queue = append(w.queue[:i], w.queue[i+1:]...)
					break
				}
			}
			w.mu.Unlock()
			return ctx.Err()
		}
		w.mu.Unlock()
		<-r.done
	}
	if r.panicked != nil {
		panic(r.panicked)
	}
	return r.err
}

// close stops taking transactions, runs those already queued and waits
// for the goroutine to end.
func (w *writer) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	<-w.exited
}

func (w *writer) loop() {
	defer close(w.exited)
	for range w.wake {
		for {
			w.mu.Lock()
			n := min(len(w.queue), maxBatch)
			batch := make([]*writeReq, n)
			copy(batch, w.queue)
			w.queue = append(w.queue[:0], w.queue[n:]...)
			for _, r := range batch {
				r.taken = true
			}
			closed := w.closed && len(w.queue) == 0
			w.mu.Unlock()
			if n > 0 {
				w.run(batch)
			}
			if closed {
				return
			}
			if n == 0 {
				break
			}
		}
	}
}

// run runs batch in one transaction and answers each of its callers.
func (w *writer) run(batch []*writeReq) {
	defer func() {
		for _, r := range batch {
			close(r.done)
		}
	}()
	w.commits.Add(1)
	w.txs.Add(int64(len(batch)))
	// The transaction belongs to no caller: one giving up must not roll
	// back the others' writes (the writer's connection ignores
	// cancellation too, see cachedConn).
	bg := context.Background()
	tx, err := w.db.BeginTx(bg, nil)
	if err != nil {
		for _, r := range batch {
			r.err = err
		}
		return
	}
	if len(batch) == 1 {
		// Alone: no savepoint needed.
		r := batch[0]
		if r.err = r.ctx.Err(); r.err == nil {
			r.err = r.call(tx)
		}
		if r.err != nil {
			_ = tx.Rollback()
			return
		}
		r.err = commit(tx, w.db)
		return
	}
	var ok []*writeReq // the members whose writes are in tx
	for _, r := range batch {
		if r.err = r.ctx.Err(); r.err != nil {
			continue // never started: nothing of it to undo
		}
		if _, err := tx.ExecContext(bg, `SAVEPOINT member`); err != nil {
			w.abort(tx, batch, r, fmt.Errorf("savepoint: %w", err))
			return
		}
		if r.err = r.call(tx); r.err != nil {
			if _, err := tx.ExecContext(bg, `ROLLBACK TO member`); err != nil {
				// SQLite ended the whole transaction (an I/O error, a
				// full disk): the others' writes went with it.
				w.abort(tx, batch, r, fmt.Errorf("%w (rolling back: %w)", r.err, err))
				return
			}
		}
		if _, err := tx.ExecContext(bg, `RELEASE member`); err != nil {
			w.abort(tx, batch, r, fmt.Errorf("release savepoint: %w", err))
			return
		}
		if r.err == nil {
			ok = append(ok, r)
		}
	}
	if len(ok) == 0 {
		_ = tx.Rollback()
		return
	}
	if err := commit(tx, w.db); err != nil {
		for _, r := range ok {
			r.err = err
		}
	}
}

// abort rolls tx back after at failed in a way that took the whole
// transaction down, failing every member that had not failed on its own.
func (w *writer) abort(tx *sql.Tx, batch []*writeReq, at *writeReq, cause error) {
	_ = tx.Rollback()
	for _, r := range batch {
		switch {
		case r == at:
			r.err = cause
		case r.err == nil:
			r.err = fmt.Errorf("sqlite: the transaction this write shared with others failed: %w", cause)
		}
	}
}

// commit commits tx. Should COMMIT fail with the transaction still open
// (SQLITE_BUSY), database/sql hands the connection back as it is, so the
// transaction is rolled back on it, or the next BEGIN would fail.
func commit(tx *sql.Tx, db *sql.DB) error {
	err := tx.Commit()
	if err != nil {
		_, _ = db.ExecContext(context.Background(), `ROLLBACK`)
	}
	return err
}

// call runs the caller's function, turning a panic into an error for the
// writer and keeping its value to panic with again in the caller.
func (r *writeReq) call(tx *sql.Tx) (err error) {
	defer func() {
		if v := recover(); v != nil {
			r.panicked = v
			err = fmt.Errorf("sqlite: write transaction panicked: %v", v)
		}
	}()
	return r.fn(tx)
}
