package postgres

import (
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// Merged reads and writes of a group.
//
// A group locks its claims' session rows first, in one statement that
// reads their states too (lockSessionsSQL): each claim's own locking read
// of its state would find the same row, as the group holds its lock, so
// it is answered from there and not sent (lockedStates).
//
// A claim writes its session's state, appends its events and stores its
// connect token: three statements, each with its own executor start, plan
// check and protocol messages in PostgreSQL, which cost it more than the
// rows themselves. In a group those writes wait for the COMMIT like the
// entries do, and go as one statement of each kind for the whole group:
// every claim of the group locked its session and reads no session of
// another claim (a second claim of a session runs alone), so none of them
// can see the difference. A batch with anything else in it (a call's
// result, a webhook delivery, a check of rows changed) keeps its writes
// in order, sent with the next claim's first statements as before.
//
// A merged write that fails (a connect token's hash another session has)
// fails the COMMIT; nothing of the group is kept and each of its claims
// runs again alone, where the one at fault gets its own error.

// mergedWrites are the writes of a claim, besides its entry, that the
// group merges with the others' at the COMMIT.
type mergedWrites struct {
	state  *stateRow
	events eventRows
	tokens tokenRows
	prunes pruneRows
}

// stateRow is UpdateStateSQL's arguments, typed for unnest.
type stateRow struct {
	id, status, detail, reason string
	lastSeq                    int64
	caps                       *string
	updated                    int64
	started, ended             *int64
	usage, policy              *string
	worker                     string
	approvals                  *string
}

// mergeStateSQL is UpdateStateSQL for many sessions at once.
const mergeStateSQL = `UPDATE sessions s SET status = v.status, status_detail = v.detail, reason = v.reason,
	last_seq = v.last_seq, capabilities_json = v.caps, updated_at = v.updated, started_at = v.started,
	ended_at = v.ended, usage_json = v.usage, network_policy_json = v.policy, worker = v.worker,
	approvals_json = v.approvals
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::bigint[],
		$8::bigint[], $9::bigint[], $10::text[], $11::text[], $12::text[], $13::text[])
		AS v(id, status, detail, reason, last_seq, caps, updated, started, ended, usage, policy, worker, approvals)
	WHERE s.id = v.id`

// mergeTokensSQL is InsertConnectTokenSQL for many tokens at once.
const mergeTokensSQL = `INSERT INTO connect_tokens (` + sqlstore.ConnectTokenCols + `)
	SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[])`

// mergePrunesSQL is PruneConnectTokensSQL for many sessions at once.
const mergePrunesSQL = `DELETE FROM connect_tokens c USING unnest($1::text[], $2::bigint[]) AS v(id, epoch)
	WHERE c.session_id = v.id AND c.epoch < v.epoch`

// eventRows are insertEventsSQL's arguments.
type eventRows struct {
	ids    []string
	seqs   []int64
	bodies []string
}

// tokenRows are mergeTokensSQL's arguments.
type tokenRows struct {
	hashes, ids     []string
	epochs, created []int64
}

// pruneRows are mergePrunesSQL's arguments.
type pruneRows struct {
	ids    []string
	epochs []int64
}

// mergeable reports whether every statement of b is a write the group
// merges or holds (an entry, its notification), with exactly one entry,
// and if so returns the writes to merge. The arguments are typed as the
// statements' own are; a batch whose are not stays as it is.
func mergeable(b *sqlstore.Batch) (mergedWrites, bool) {
	var w mergedWrites
	entries := 0
	for _, it := range b.Items {
		if it.Affected != nil {
			return w, false
		}
		var ok bool
		switch it.SQL {
		case upsertEntrySQL:
			entries++
			ok = true
		case notifySQL:
			ok = it.Row == nil
		case sqlstore.UpdateStateSQL:
			if w.state != nil || it.Row != nil {
				return w, false
			}
			w.state, ok = stateOf(it.Args)
		case insertEventsSQL:
			ok = it.Row == nil && w.events.add(it.Args)
		case sqlstore.InsertConnectTokenSQL:
			ok = it.Row == nil && w.tokens.add(it.Args)
		case sqlstore.PruneConnectTokensSQL:
			ok = it.Row == nil && w.prunes.add(it.Args)
		}
		if !ok {
			return w, false
		}
	}
	return w, entries == 1
}

// stateArgs is the number of UpdateStateSQL's arguments.
const stateArgs = 13

// stateOf types UpdateStateSQL's arguments.
func stateOf(a []any) (*stateRow, bool) {
	if len(a) != stateArgs {
		return nil, false
	}
	var r stateRow
	ok := str(a[0], &r.id) && str(a[1], &r.status) && str(a[2], &r.detail) && str(a[3], &r.reason) &&
		num(a[4], &r.lastSeq) && nullStr(a[5], &r.caps) && num(a[6], &r.updated) &&
		nullNum(a[7], &r.started) && nullNum(a[8], &r.ended) && nullStr(a[9], &r.usage) &&
		nullStr(a[10], &r.policy) && str(a[11], &r.worker) && nullStr(a[12], &r.approvals)
	return &r, ok
}

func (e *eventRows) add(a []any) bool {
	if len(a) != 3 {
		return false
	}
	ids, ok1 := a[0].([]string)
	seqs, ok2 := a[1].([]int64)
	bodies, ok3 := a[2].([]string)
	if !ok1 || !ok2 || !ok3 || len(ids) != len(seqs) || len(ids) != len(bodies) {
		return false
	}
	e.ids, e.seqs, e.bodies = append(e.ids, ids...), append(e.seqs, seqs...), append(e.bodies, bodies...)
	return true
}

func (t *tokenRows) add(a []any) bool {
	var hash, id string
	var epoch, created int64
	if len(a) != 4 || !str(a[0], &hash) || !str(a[1], &id) || !num(a[2], &epoch) || !num(a[3], &created) {
		return false
	}
	t.hashes, t.ids, t.epochs, t.created = append(t.hashes, hash), append(t.ids, id), append(t.epochs, epoch), append(t.created, created)
	return true
}

func (p *pruneRows) add(a []any) bool {
	var id string
	var epoch int64
	if len(a) != 2 || !str(a[0], &id) || !num(a[1], &epoch) {
		return false
	}
	p.ids, p.epochs = append(p.ids, id), append(p.epochs, epoch)
	return true
}

func str(v any, p *string) bool {
	s, ok := v.(string)
	*p = s
	return ok
}

func num(v any, p *int64) bool {
	n, ok := v.(int64)
	*p = n
	return ok
}

func nullStr(v any, p **string) bool {
	if v == nil {
		return true
	}
	s, ok := v.(string)
	*p = &s
	return ok
}

func nullNum(v any, p **int64) bool {
	if v == nil {
		return true
	}
	n, ok := v.(int64)
	*p = &n
	return ok
}

// stateRows are mergeStateSQL's arguments.
type stateRows struct {
	ids, status, detail, reason, worker []string
	lastSeq, updated                    []int64
	caps, usage, policy, approvals      []*string
	started, ended                      []*int64
}

func (st *stateRows) add(r *stateRow) {
	st.ids, st.status = append(st.ids, r.id), append(st.status, r.status)
	st.detail, st.reason = append(st.detail, r.detail), append(st.reason, r.reason)
	st.lastSeq, st.caps = append(st.lastSeq, r.lastSeq), append(st.caps, r.caps)
	st.updated, st.started = append(st.updated, r.updated), append(st.started, r.started)
	st.ended, st.usage = append(st.ended, r.ended), append(st.usage, r.usage)
	st.policy, st.worker = append(st.policy, r.policy), append(st.worker, r.worker)
	st.approvals = append(st.approvals, r.approvals)
}

// queueMerged queues the merged writes of held, in the order one claim
// sends its own: states, events, tokens, then the deletes of older
// tokens (a write may add a token of an epoch it deletes).
func queueMerged(b *pgx.Batch, held []heldEntry) {
	var st stateRows
	var ev eventRows
	var tk tokenRows
	var pr pruneRows
	for _, h := range held {
		w := &h.writes
		if w.state != nil {
			st.add(w.state)
		}
		ev.ids, ev.seqs, ev.bodies = append(ev.ids, w.events.ids...), append(ev.seqs, w.events.seqs...), append(ev.bodies, w.events.bodies...)
		tk.hashes, tk.ids = append(tk.hashes, w.tokens.hashes...), append(tk.ids, w.tokens.ids...)
		tk.epochs, tk.created = append(tk.epochs, w.tokens.epochs...), append(tk.created, w.tokens.created...)
		pr.ids, pr.epochs = append(pr.ids, w.prunes.ids...), append(pr.epochs, w.prunes.epochs...)
	}
	if len(st.ids) > 0 {
		b.Queue(mergeStateSQL, st.ids, st.status, st.detail, st.reason, st.lastSeq, st.caps, st.updated,
			st.started, st.ended, st.usage, st.policy, st.worker, st.approvals)
	}
	if len(ev.ids) > 0 {
		b.Queue(insertEventsSQL, ev.ids, ev.seqs, ev.bodies)
	}
	if len(tk.ids) > 0 {
		b.Queue(mergeTokensSQL, tk.hashes, tk.ids, tk.epochs, tk.created)
	}
	if len(pr.ids) > 0 {
		b.Queue(mergePrunesSQL, pr.ids, pr.epochs)
	}
}

// lockedStates are the session states a group read with its locks, as
// PostgreSQL sent them, by session id.
type lockedStates struct {
	m      *pgtype.Map
	fields []pgconn.FieldDescription
	rows   map[string][][]byte
}

// getStateLockedSQL is a transaction's locking read of its session's
// state (sqlstore's getStateLocked in this dialect).
var getStateLockedSQL = sqlstore.GetStateSQL + dialect.Lock.Row

// read keeps the rows of lockSessionsSQL.
func (l *lockedStates) read(m *pgtype.Map, rows pgx.Rows) error {
	l.m, l.fields, l.rows = m, slices.Clone(rows.FieldDescriptions()), map[string][][]byte{}
	for rows.Next() {
		raw := rows.RawValues()
		values := make([][]byte, len(raw))
		for i, v := range raw {
			if v != nil {
				values[i] = slices.Clone(v)
			}
		}
		var id string
		if err := m.Scan(l.fields[0].DataTypeOID, l.fields[0].Format, values[0], &id); err != nil {
			return fmt.Errorf("locked session id: %w", err)
		}
		l.rows[id] = values
	}
	return rows.Err()
}

// use answers, from the rows read, b's locking reads of the state of a
// session the group locked, and returns b without them: the row is the
// one that read would find, as the group holds its lock and no statement
// of the group writes the row before that session's claim by id runs
// (claims by id run first, one a session, each writing its own). A read
// whose answer fails to scan stays in b, to fail there: its callback then
// runs twice, the second time with the row as sent.
func (l *lockedStates) use(b *sqlstore.Batch) *sqlstore.Batch {
	if len(l.rows) == 0 {
		return b
	}
	out := b.Items[:0]
	for _, it := range b.Items {
		if it.SQL == getStateLockedSQL && it.Row != nil && len(it.Args) == 1 {
			id, _ := it.Args[0].(string)
			if values, ok := l.rows[id]; ok && it.Row(lockedRow{l, values}) == nil {
				continue
			}
		}
		out = append(out, it)
	}
	b.Items = out
	return b
}

// lockedRow is a row of lockedStates, scanned as pgx scans a row.
type lockedRow struct {
	l      *lockedStates
	values [][]byte
}

func (r lockedRow) Scan(dest ...any) error {
	return pgx.ScanRow(r.l.m, r.l.fields, r.values, dest...)
}
