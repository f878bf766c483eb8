package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outpost-sh/outpost/internal/audit"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// Group commit of claims (a prototype).
//
// Every write of a queue entry takes the next rev from the counter row and
// holds that row's lock through its commit's flush, so that revs become
// visible in order. Under many concurrent claims that row is the serial
// section: one flush a claim. The combiner runs the claims that wait while
// one transaction of claims is under way in one transaction of the next:
//
//   - BEGIN and the locks of every session row the group names, in id
//     order (the order of any other writer that locks several), with
//     their states, in one round trip;
//   - each claim under a SAVEPOINT of its own: its reads (a claim by pick
//     picks FOR UPDATE SKIP LOCKED, which waits for nobody), its fn and
//     the writes the group does not hold back (below), sent with the next
//     claim's reads. A claim that fails is
//     rolled back to its savepoint and answered with its own error; the
//     others go on. The entries are held back to the COMMIT, so a claim
//     cannot read the entries of the claims before it: a pick skips
//     their sessions (sqlstore.Batch.Skip), a second claim of a session
//     runs alone after the group, and so does a claim of an outpost with
//     max_running that has a held entry (its count would miss it);
//   - a claim whose writes are only its session's state, events and
//     connect tokens (nearly all) leaves them for the end too, merged
//     with the other claims' into one statement of each kind (merge.go);
//   - the merged writes, then the entries, written once each in one
//     upsert that takes their revs, in session id order (KeepAlive's),
//     their notifications, and one COMMIT: one flush, and one hold of
//     the rev counter's row, for the whole group, in one round trip.
//
// Callers are answered once the COMMIT is durable. No claim of a group
// may wait for another row lock (a writer holding it could wait for one
// of the group's): the outpost row of a limited claim is locked NOWAIT
// (sqlstore.Grouped). A claim that finds it
// locked, or meets a serialization failure or a deadlock, is run again
// alone once the group committed, as is every claim of a group whose
// transaction failed before its COMMIT was sent; a COMMIT whose outcome is
// unknown (the connection lost) fails every claim of the group with its
// error, as it fails a claim alone.
//
// A claim that finds fewer than inflight groups (or claims alone) under
// way runs alone at once (writeBatch): without contention nothing waits
// and nothing is shared. Groups of one store run their claims side by
// side (their session rows are apart, and each takes the revs only with
// its COMMIT); claims that carry an audit entry always run alone.

// defaultGroupMax is the largest group when the store option and the
// environment set none; 0 turns the combiner off.
const defaultGroupMax = 32

// groupEnv overrides the default largest group (0: off), for benchmarks
// and tests of a server opened without options.
const groupEnv = "OUTPOST_PG_CLAIM_GROUP"

// groupUpdatesEnv, set to 1, groups every update of a session
// (UpdateSession: releases, renewals, a call's result) with the claims,
// not claims alone (an experiment; off by default).
const groupUpdatesEnv = "OUTPOST_PG_GROUP_UPDATES"

// defaultInflight is how many groups (or claims alone) run at once when
// the environment sets none (OUTPOST_PG_CLAIM_GROUPS_INFLIGHT): with the
// revs taken at the COMMIT, one group's claims run while another commits.
const defaultInflight = 2

// inflightEnv overrides defaultInflight.
const inflightEnv = "OUTPOST_PG_CLAIM_GROUPS_INFLIGHT"

// groupTimeout bounds a group's transaction, which runs apart from its
// callers' contexts.
const groupTimeout = time.Minute

// lockSessionsSQL locks the session rows of a group in id order and
// reads their state (sqlstore.StateCols), which each claim would
// otherwise read again, locked, with its first statements.
const lockSessionsSQL = `SELECT ` + sqlstore.StateCols + ` FROM sessions WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE`

// WithClaimGroup sets the largest number of claims that share one
// transaction and one commit; 0 or less runs every claim alone.
func WithClaimGroup(n int) Option {
	return func(s *Store) { s.groupMax = max(n, 0); s.groupSet = true }
}

// WithGroupUpdates groups every update of a session (UpdateSession) with
// the claims, not claims alone, when the combiner is on.
func WithGroupUpdates(on bool) Option {
	return func(s *Store) { s.groupUpdates, s.groupUpdatesSet = on, true }
}

// ClaimGroups reports how many transactions of claims the combiner ran
// (groups of two or more) and how many claims they held.
func (s *Store) ClaimGroups() (groups, claims int64) {
	if s.group == nil {
		return 0, 0
	}
	return s.group.groups.Load(), s.group.claims.Load()
}

// inflightFromEnv is how many groups may run at once.
func inflightFromEnv() int {
	if n, err := strconv.Atoi(os.Getenv(inflightEnv)); err == nil && n > 0 {
		return n
	}
	return defaultInflight
}

// groupMaxFromEnv is the largest group the environment asks for, or def.
func groupMaxFromEnv(def int) int {
	if v, ok := os.LookupEnv(groupEnv); ok {
		if n, err := strconv.Atoi(v); err == nil {
			return max(n, 0)
		}
	}
	return def
}

// combiner groups the claims of a store.
type combiner struct {
	s   *Store
	max int

	// inflight is how many claims alone or groups may run at once.
	inflight int

	mu      sync.Mutex // guards queue and running
	queue   []*claimReq
	running int // claims alone and groups running; at inflight, claims that come queue

	groups, claims atomic.Int64
}

// claimReq is one caller's claim transaction.
type claimReq struct {
	ctx context.Context
	id  string // the session it locks first; "" when it picks
	// first queues the claim's first statements, in group g (nil when
	// alone): a pick skips the sessions whose entries g holds, and the
	// state of a session g locked is the one g read.
	first func(b *pgx.Batch, g *groupTx)
	fn    func(pgx.Tx) error

	err  error // the answer, set before done is closed
	solo bool  // run it again alone: its try in the group could not finish
	// in: its writes are in the group's transaction (not undone, not
	// left to run alone).
	in   bool
	done chan struct{}
}

// do runs a claim: at once and alone when nothing runs, else in the next
// group.
func (c *combiner) do(ctx context.Context, id string, first func(*pgx.Batch, *groupTx), fn func(pgx.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	if c.running < c.inflight {
		c.running++
		c.mu.Unlock()
		err := c.s.writeBatch(ctx, alone(first), fn)
		c.next()
		return err
	}
	r := &claimReq{ctx: ctx, id: id, first: first, fn: fn, done: make(chan struct{})}
	c.queue = append(c.queue, r)
	c.mu.Unlock()
	// Once queued the claim may be running: its answer is awaited, so it
	// is always the truth.
	<-r.done
	if r.solo {
		return c.s.writeBatch(ctx, alone(first), fn)
	}
	return r.err
}

// alone is first in a transaction of its own, where a pick has nothing
// to skip and nothing is read before it.
func alone(first func(*pgx.Batch, *groupTx)) func(*pgx.Batch) {
	if first == nil {
		return nil
	}
	return func(b *pgx.Batch) { first(b, nil) }
}

// next starts the group of the claims that queued, or marks the combiner
// idle when none did.
func (c *combiner) next() {
	c.mu.Lock()
	if len(c.queue) == 0 {
		c.running--
		c.mu.Unlock()
		return
	}
	n := min(len(c.queue), c.max)
	g := slices.Clone(c.queue[:n])
	c.queue = slices.Delete(c.queue, 0, n)
	c.mu.Unlock()
	go func() {
		c.run(g)
		c.next()
	}()
}

// run runs a group and answers its claims.
func (c *combiner) run(g []*claimReq) {
	defer func() {
		for _, r := range g {
			close(r.done)
		}
	}()
	live := g[:0:0]
	for _, r := range g {
		if err := r.ctx.Err(); err != nil {
			r.err = err
			continue
		}
		live = append(live, r)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		live[0].solo = true
		return
	}
	// The first caller's values (tracing) go with the group; its end
	// does not.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(live[0].ctx), groupTimeout)
	defer cancel()
	committing, err := c.try(ctx, live)
	if err == nil {
		// Only the claims whose writes the COMMIT held count: not those
		// undone, nor those that run again alone.
		n := 0
		for _, r := range live {
			if r.in {
				n++
			}
		}
		if n >= 2 {
			c.groups.Add(1)
			c.claims.Add(int64(n))
		}
		return
	}
	var pe *pgconn.PgError
	if committing && !errors.As(err, &pe) {
		// The COMMIT was sent and no answer came: it may have committed
		// the claims in it. One undone to its savepoint keeps its own
		// answer; one never begun runs again alone.
		for _, r := range live {
			if r.in {
				r.err = err
			}
		}
		return
	}
	// Nothing committed: each claim runs again alone.
	for _, r := range live {
		r.err, r.solo, r.in = nil, true, false
	}
}

// try runs the claims of g in one transaction and commits it. committing
// tells that the COMMIT was sent.
func (c *combiner) try(ctx context.Context, g []*claimReq) (committing bool, err error) {
	conn, err := c.s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release()
	var ids []string
	for _, r := range g {
		if r.id != "" {
			ids = append(ids, r.id)
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	b := &pgx.Batch{}
	// Read committed whatever the database's default: each statement
	// of a transaction sees what committed before it began, which the
	// locks taken by the statements before it order (a session's row,
	// a token's lock).
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	var locked lockedStates
	if len(ids) > 0 {
		b.Queue(lockSessionsSQL, ids).Query(func(rows pgx.Rows) error {
			return locked.read(conn.Conn().TypeMap(), rows)
		})
	}
	br := conn.Conn().SendBatch(ctx, b)
	tx := br.Tx()
	defer func() {
		if conn.Conn().PgConn().TxStatus() != 'I' {
			tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // the group failed already
		}
	}()
	if err := br.Close(); err != nil {
		return false, err
	}
	// Claims by id run in id order, picks after them, so that a pick
	// can skip every session claimed before it (groupTx.skip); and so
	// that no statement of the group writes a session's row before that
	// session's claim by id runs, which lets it take the state read with
	// the lock (lockedStates.use).
	slices.SortStableFunc(g, func(a, b *claimReq) int {
		switch {
		case a.id == b.id:
			return 0
		case a.id == "":
			return 1
		case b.id == "":
			return -1
		}
		return strings.Compare(a.id, b.id)
	})
	// A second claim of a session would read the entry as it was before
	// the first, whose write waits for the COMMIT: it runs alone, after.
	for i := 1; i < len(g); i++ {
		if g[i].id != "" && g[i].id == g[i-1].id {
			g[i].solo = true
		}
	}
	gtx := &groupTx{Tx: tx, ctx: ctx, locked: locked}
	// undo rolls claim r back to its savepoint, the last taken, and keeps
	// its answer: err, or to run again alone. A transaction that cannot
	// be rolled back to it is lost, and the group with it.
	undo := func(r *claimReq, held int, err error) error {
		if _, rerr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT claim"); rerr != nil {
			return rerr
		}
		gtx.held, gtx.last = gtx.held[:held], nil
		r.in = false
		if retryable(err) || lockNotAvailable(err) || errors.Is(err, sqlstore.ErrRunAlone) {
			r.solo = true
		} else {
			r.err = err
		}
		return nil
	}
	// The writes of each claim (its SendLast) the group does not merge
	// go with the next claim's SAVEPOINT and reads, the last claim's with
	// the COMMIT: n+2 round trips for n claims.
	var prev *claimReq
	prevHeld := 0
	for _, r := range g {
		if r.solo {
			continue
		}
		held := len(gtx.held)
		writes := gtx.last
		gtx.last = nil
		started := false
		begin := func(b *pgx.Batch) {
			b.Queue("SAVEPOINT claim").Exec(func(pgconn.CommandTag) error { started = true; return nil })
			if r.first != nil {
				r.first(b, gtx)
			}
		}
		mb := &pgx.Batch{}
		if writes != nil {
			mb.QueuedQueries = append(mb.QueuedQueries, writes.QueuedQueries...)
		}
		begin(mb)
		err := tx.SendBatch(ctx, mb).Close()
		if err != nil && writes != nil && !started {
			// The previous claim's writes failed, before this claim
			// began: that claim alone is undone, and this one begins
			// anew.
			if uerr := undo(prev, prevHeld, err); uerr != nil {
				return false, uerr
			}
			held = len(gtx.held)
			mb = &pgx.Batch{}
			begin(mb)
			err = tx.SendBatch(ctx, mb).Close()
		}
		if err == nil {
			err = r.fn(gtx)
		}
		if err == nil {
			r.in = true
			prev, prevHeld = r, held
			continue
		}
		if uerr := undo(r, held, err); uerr != nil {
			return false, uerr
		}
		prev = nil
	}
	return true, gtx.commit(ctx, conn.Conn())
}

// lockNotAvailable reports a lock a NOWAIT statement found held (SQLSTATE
// 55P03).
func lockNotAvailable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}

// groupTx is the transaction of a group as its claims see it: a claim's
// last statements (pgTx.SendLast) go with what the group sends next, it
// reports itself Grouped, and they run under the group's context, not
// the caller's: a caller that gives up must not break the connection the
// others share (its claim is answered all the same, as it is alone once
// its commit is under way).
type groupTx struct {
	pgx.Tx
	ctx context.Context
	// last are the writes a claim left to send last (pgTx.SendLast),
	// sent with the next claim's first statements or the COMMIT, or
	// before any other statement.
	last *pgx.Batch
	// held are the queue entries of the claims so far, in the order
	// their claims ran, to be written with their revs at the COMMIT.
	held []heldEntry
	// locked are the states of the sessions the group locked, read with
	// their locks.
	locked lockedStates
}

// heldEntry is the write of a session's queue entry, held back to the
// COMMIT, where it takes its rev.
type heldEntry struct {
	id      string
	outpost string
	args    []any                        // upsertEntrySQL's arguments
	scan    func(sqlstore.Scanner) error // the write's own reading of its rev
	notify  []any                        // notifySQL's arguments; nil: none
	// writes are the claim's other writes, merged with the group's
	// (mergeable), when its last batch held only those.
	writes mergedWrites
}

// entryArgs is the number of upsertEntrySQL's arguments: EntryCols but
// the rev.
const entryArgs = 22

// upsertHeldSQL writes n entries, each with upsertEntrySQL's arguments in
// turn after $1 (n), and gives the ith of them the ith of n revs taken at
// once: the counter row is locked from here to the COMMIT, in the
// COMMIT's round trip. The rows are written, and so locked, in the order
// given (session id order, KeepAlive's).
func upsertHeldSQL(n int) string {
	var b strings.Builder
	b.WriteString(`WITH r AS (UPDATE counters SET value = value + $1 WHERE name = 'rev' RETURNING value)
	INSERT INTO queue (` + sqlstore.EntryCols + `) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(")
		for a := range entryArgs {
			if a > 0 {
				b.WriteString(", ")
			}
			if a == 9 {
				// the rev, the tenth column
				fmt.Fprintf(&b, "(SELECT value FROM r) - $1::bigint + %d, ", i+1)
			}
			fmt.Fprintf(&b, "$%d", 2+i*entryArgs+a)
		}
		b.WriteString(")")
	}
	b.WriteString(" " + dialect.EntryConflictSQL() + " RETURNING session_id, rev")
	return b.String()
}

// notifyHeldSQL notifies the writes of the entries of sessions $2, in
// that order, as notifySQL does each: of replica $1, outposts $3, seqs
// $4, epochs $5, each with its entry's rev.
var notifyHeldSQL = `SELECT pg_notify('` + changesChannel + `', json_build_object(
	'o', $1::text, 's', n.s, 'p', n.p, 'q', n.q, 'e', n.e, 'r', q.rev)::text)
	FROM unnest($2::text[], $3::text[], $4::bigint[], $5::bigint[]) WITH ORDINALITY AS n(s, p, q, e, ord)
	JOIN queue q ON q.session_id = n.s ORDER BY n.ord`

// hold rewrites a batch of a claim in the group: the write of its queue
// entry and its notification are left for the end (commit), and so, when
// the batch is the claim's last and holds nothing else, are its other
// writes, to be merged with the group's. A second write of an entry the
// group holds is refused (sqlstore.ErrRunAlone): the claim that makes it
// read the entry as it was before the first.
func (g *groupTx) hold(b *sqlstore.Batch, last bool) (*sqlstore.Batch, error) {
	if !slices.ContainsFunc(b.Items, func(it sqlstore.BatchItem) bool { return it.SQL == upsertEntrySQL || it.SQL == notifySQL }) {
		return b, nil
	}
	var writes mergedWrites
	merge := false
	if last {
		writes, merge = mergeable(b)
	}
	out := &sqlstore.Batch{Items: make([]sqlstore.BatchItem, 0, len(b.Items))}
	for _, it := range b.Items {
		switch it.SQL {
		case upsertEntrySQL:
			id, _ := it.Args[0].(string)
			outpost, _ := it.Args[1].(string)
			if slices.ContainsFunc(g.held, func(h heldEntry) bool { return h.id == id }) {
				return nil, fmt.Errorf("a second write of the entry of session %s in one group: %w", id, sqlstore.ErrRunAlone)
			}
			h := heldEntry{id: id, outpost: outpost, args: it.Args, scan: it.Row}
			if merge {
				h.writes = writes
			}
			g.held = append(g.held, h)
		case notifySQL:
			id, _ := it.Args[1].(string)
			for i := len(g.held) - 1; i >= 0; i-- {
				if g.held[i].id == id {
					g.held[i].notify = it.Args
					break
				}
			}
		default:
			if !merge {
				out.Items = append(out.Items, it)
			}
		}
	}
	return out, nil
}

// skip is the sessions whose entries the group holds (none when alone:
// g nil).
func (g *groupTx) skip() []string {
	if g == nil || len(g.held) == 0 {
		return nil
	}
	ids := make([]string, len(g.held))
	for i, h := range g.held {
		ids[i] = h.id
	}
	return ids
}

// Defers reports whether the group holds an entry of outpost outpostID.
func (g *groupTx) Defers(outpostID string) bool {
	return slices.ContainsFunc(g.held, func(h heldEntry) bool { return h.outpost == outpostID })
}

// commit gives the held entries their revs, notifies them, and commits,
// in one round trip; the entries' own readings of their revs run as the
// revs come.
func (g *groupTx) commit(ctx context.Context, conn *pgx.Conn) error {
	b := &pgx.Batch{}
	if g.last != nil {
		// The last claim's writes: should one fail, the COMMIT does, and
		// every claim of the group runs again alone.
		b.QueuedQueries = append(b.QueuedQueries, g.last.QueuedQueries...)
		g.last = nil
	}
	if len(g.held) > 0 {
		// One write a session (hold), in session id order, each with its
		// rev in that order.
		held := slices.SortedFunc(slices.Values(g.held), func(a, b heldEntry) int { return strings.Compare(a.id, b.id) })
		queueMerged(b, held)
		ids := make([]string, len(held))
		args := make([]any, 1, 1+len(held)*entryArgs)
		args[0] = int64(len(held))
		for i, h := range held {
			ids[i] = h.id
			args = append(args, h.args...)
		}
		b.Queue(upsertHeldSQL(len(ids)), args...).Query(func(rows pgx.Rows) error {
			revs := map[string]int64{}
			for rows.Next() {
				var id string
				var rev int64
				if err := rows.Scan(&id, &rev); err != nil {
					return err
				}
				revs[id] = rev
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if len(revs) != len(ids) {
				return fmt.Errorf("group commit: %d queue entries written, %d meant", len(revs), len(ids))
			}
			for _, h := range held {
				if h.scan != nil {
					if err := h.scan(revRow(revs[h.id])); err != nil {
						return err
					}
				}
			}
			return nil
		})
		// The last notification of each session, in the order of ids.
		var replica string
		var ns, np []string
		var nq, ne []int64
		for _, h := range held {
			a := h.notify
			if a == nil {
				continue
			}
			replica, _ = a[0].(string)
			id, _ := a[1].(string)
			outpost, _ := a[2].(string)
			seq, _ := a[3].(int64)
			epoch, _ := a[4].(int64)
			ns, np, nq, ne = append(ns, id), append(np, outpost), append(nq, seq), append(ne, epoch)
		}
		if len(ns) > 0 {
			b.Queue(notifyHeldSQL, replica, ns, np, nq, ne)
		}
	}
	b.Queue("COMMIT").Exec(func(tag pgconn.CommandTag) error {
		if tag.String() == "ROLLBACK" {
			return pgx.ErrTxCommitRollback
		}
		return nil
	})
	return conn.SendBatch(ctx, b).Close()
}

// revRow is a row of one rev.
type revRow int64

func (r revRow) Scan(dest ...any) error {
	if len(dest) != 1 {
		return fmt.Errorf("a rev is one column; %d asked", len(dest))
	}
	p, ok := dest[0].(*int64)
	if !ok {
		return fmt.Errorf("a rev is read into an *int64, not a %T", dest[0])
	}
	*p = int64(r)
	return nil
}

// flush sends the writes held back now.
func (g *groupTx) flush() error {
	if g.last == nil {
		return nil
	}
	b := g.last
	g.last = nil
	return g.Tx.SendBatch(g.ctx, b).Close()
}

func (g *groupTx) Begin(context.Context) (pgx.Tx, error) {
	if err := g.flush(); err != nil {
		return nil, err
	}
	return g.Tx.Begin(g.ctx)
}

func (g *groupTx) SendBatch(_ context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := g.flush(); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return g.Tx.SendBatch(g.ctx, b)
}

func (g *groupTx) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := g.flush(); err != nil {
		return pgconn.CommandTag{}, err
	}
	return g.Tx.Exec(g.ctx, sql, args...)
}

func (g *groupTx) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := g.flush(); err != nil {
		return nil, err
	}
	return g.Tx.Query(g.ctx, sql, args...)
}

func (g *groupTx) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	if err := g.flush(); err != nil {
		return errRow{err}
	}
	return g.Tx.QueryRow(g.ctx, sql, args...)
}

// sendLast holds b, rewritten by hold, back to send with what comes next.
func (g *groupTx) sendLast(b *sqlstore.Batch) error {
	if err := g.flush(); err != nil {
		return err
	}
	b, err := g.hold(b, true)
	if err != nil {
		return err
	}
	if b.Len() > 0 {
		g.last = &pgx.Batch{}
		queue(g.last, b)
	}
	return nil
}

// WriteClaim runs a claim's transaction through the combiner, or alone
// when the combiner is off or ctx carries an audit entry.
func (p plugin) WriteClaim(ctx context.Context, id string, claim bool, first func(*sqlstore.Batch), fn func(sqlstore.Tx) error) error {
	if p.s.group == nil || !claim && !p.s.groupUpdates {
		return p.Write(ctx, first, fn)
	}
	if e, _ := audit.Pending(ctx); e != nil {
		return p.Write(ctx, first, fn)
	}
	var begin func(*pgx.Batch, *groupTx)
	if first != nil {
		begin = func(pb *pgx.Batch, g *groupTx) {
			b := &sqlstore.Batch{Items: make([]sqlstore.BatchItem, 0, 4), Skip: g.skip()}
			first(b)
			if g != nil {
				b = g.locked.use(b)
			}
			queue(pb, b)
		}
	}
	return p.s.group.do(ctx, id, begin, func(tx pgx.Tx) error { return fn(pgTx{tx}) })
}

// Grouped reports a transaction shared by a group of claims.
func (t pgTx) Grouped() bool {
	_, ok := t.tx.(*groupTx)
	return ok
}

// Defers reports whether the group, if tx is one, holds back the entry of
// a claim of outpost outpostID.
func (t pgTx) Defers(outpostID string) bool {
	g, ok := t.tx.(*groupTx)
	return ok && g.Defers(outpostID)
}
