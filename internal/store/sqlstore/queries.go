package sqlstore

import (
	"fmt"
	"strings"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// Statements both dialects accept, by what they do. Their arguments are in
// placeholder order.
const (
	// GetSessionSQL reads SessionCols of session $1.
	GetSessionSQL = `SELECT ` + SessionCols + ` FROM sessions WHERE id = $1`
	// GetStateSQL reads StateCols of session $1.
	GetStateSQL = `SELECT ` + StateCols + ` FROM sessions WHERE id = $1`
	// SessionExistsSQL returns 1 when session $1 exists.
	SessionExistsSQL = `SELECT 1 FROM sessions WHERE id = $1`
	// ActiveSessionsSQL lists the ids of sessions whose status is not final
	// (see api.IsFinal), oldest first, through the partial index
	// sessions_active. It spells that index's WHERE exactly, the statuses
	// as literals: the planners prove a partial index usable from the
	// query's text, not from the values bound to it.
	ActiveSessionsSQL = `SELECT id FROM sessions WHERE status NOT IN ('` + api.StatusExit + `', '` + api.StatusError + `') ORDER BY created_at, id`
	// ListStartedSessionsSQL reads SessionCols of the sessions
	// ActiveSessionsSQL lists that have started, in its order, through
	// sessions_started, whose WHERE it spells exactly; the secrets are
	// left out (an empty JSON object in their place).
	ListStartedSessionsSQL = `SELECT id, outpost_id, spec_json, '{}', status, status_detail, reason, last_seq,
	capabilities_json, created_at, updated_at, started_at, ended_at, usage_json, artifacts_pruned_at,
	network_policy_json, worker, approvals_json FROM sessions WHERE status NOT IN ('` + api.StatusExit + `', '` + api.StatusError + `')
	AND started_at IS NOT NULL ORDER BY created_at, id`
	// FindResealSQL lists id and secrets_json of the sessions whose
	// secrets are not sealed under key $1, through the index of
	// secrets_key (rows under any other key, or none).
	FindResealSQL = `SELECT id, secrets_json FROM sessions WHERE secrets_key < $1 OR secrets_key > $1`
	// ResealSQL writes secrets $1 under key $2 to session $3 if its
	// secrets are still $4.
	ResealSQL = `UPDATE sessions SET secrets_json = $1, secrets_key = $2 WHERE id = $3 AND secrets_json = $4`

	// GetEntrySQL reads EntryCols of the queue entry of session $1.
	GetEntrySQL = `SELECT ` + EntryCols + ` FROM queue WHERE session_id = $1`
	// GetEntrySeqSQL is GetEntrySQL that also reads the highest event seq
	// of session $1 (0 when none), after EntryCols.
	GetEntrySeqSQL = `SELECT ` + EntryCols + `, (SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = $1) FROM queue WHERE session_id = $1`
	// NextRevSQL takes the next rev and returns it. The counter row stays
	// locked until the transaction ends, so revs commit in order.
	NextRevSQL = `UPDATE counters SET value = value + 1 WHERE name = 'rev' RETURNING value`
	// MaxRevSQL reads the highest rev assigned.
	MaxRevSQL = `SELECT value FROM counters WHERE name = 'rev'`

	// UpsertReplicaSQL heartbeats replica $1 at URL $2, started at $3 and
	// seen at $4.
	UpsertReplicaSQL = `INSERT INTO replicas (id, url, started_at, seen_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (id) DO UPDATE SET url = excluded.url, seen_at = excluded.seen_at`
	// ListReplicasSQL lists the replicas seen at or after $1, by id.
	ListReplicasSQL = `SELECT id, url, started_at, seen_at FROM replicas WHERE seen_at >= $1 ORDER BY id`
	// DeleteReplicaSQL removes replica $1.
	DeleteReplicaSQL = `DELETE FROM replicas WHERE id = $1`

	// MaxEventSeqSQL reads the highest event seq of session $1 (0 when none).
	MaxEventSeqSQL = `SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = $1`
	// ListCallsSQL reads CallCols of every call of session $1 in seq order.
	ListCallsSQL = `SELECT ` + CallCols + ` FROM calls WHERE session_id = $1 ORDER BY seq`

	// InsertConnectTokenSQL inserts ConnectTokenCols.
	InsertConnectTokenSQL = `INSERT INTO connect_tokens (` + ConnectTokenCols + `) VALUES ($1, $2, $3, $4)`
	// PruneConnectTokensSQL deletes the connect tokens of session $1 of
	// epochs before $2.
	PruneConnectTokensSQL = `DELETE FROM connect_tokens WHERE session_id = $1 AND epoch < $2`
	// LookupConnectTokenSQL reads ConnectTokenCols of the token of hash $1.
	LookupConnectTokenSQL = `SELECT ` + ConnectTokenCols + ` FROM connect_tokens WHERE hash = $1`

	// TokenByHashSQL reads TokenCols of the token of hash $1.
	TokenByHashSQL = `SELECT ` + TokenCols + ` FROM tokens WHERE hash = $1`
	// ListTokensSQL reads TokenCols of every token, newest first.
	ListTokensSQL = `SELECT ` + TokenCols + ` FROM tokens ORDER BY created_at DESC, id DESC`
	// ClaimTokenSQL reads whether token $1 is revoked and when it expires.
	ClaimTokenSQL = `SELECT revoked_at, expires_at FROM tokens WHERE id = $1`
	// RevokeTokenSQL marks token $2 revoked at $1 unless it already is.
	RevokeTokenSQL = `UPDATE tokens SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2`
	// CountTokensSQL counts every token.
	CountTokensSQL = `SELECT COUNT(*) FROM tokens`

	// DeleteOutpostSQL deletes outpost $1.
	DeleteOutpostSQL = `DELETE FROM outposts WHERE id = $1`
)

// Where builds a WHERE clause of conditions joined by AND, numbering the
// placeholders of its arguments in order.
type Where struct {
	conds []string
	args  []any
}

// Arg adds an argument and returns its placeholder.
func (w *Where) Arg(v any) string {
	w.args = append(w.args, v)
	return fmt.Sprintf("$%d", len(w.args))
}

// And adds a condition.
func (w *Where) And(cond string) { w.conds = append(w.conds, cond) }

// SQL is the clause without the WHERE keyword ("1 = 1" when empty) and its
// arguments. Later calls of Arg and And do not change what it returned.
func (w *Where) SQL() (string, []any) {
	if len(w.conds) == 0 {
		return "1 = 1", w.args
	}
	return strings.Join(w.conds, " AND "), w.args[:len(w.args):len(w.args)]
}

// Clone returns a copy that grows apart from w.
func (w *Where) Clone() *Where {
	return &Where{conds: append([]string(nil), w.conds...), args: append([]any(nil), w.args...)}
}

// LapsedClaimsSQL lists the ids of claimed ($1), live entries whose Expiry
// is at or before $2, earliest first, through the index queue_phase_expiry.
func (d Dialect) LapsedClaimsSQL() string {
	return `SELECT session_id FROM queue WHERE phase = $1 AND ` + d.Expiry() + ` <= $2 AND ` + d.NotDeleted + `
		ORDER BY ` + d.Expiry() + `, session_id`
}

// ClaimsOfTokenSQL lists the ids of claimed ($1), live entries whose
// claim_token_id is $2, oldest claim first. A token holds few claims and
// revoking one is rare: it reads the claimed entries through the index
// queue_phase_expiry rather than keep an index of its own.
func (d Dialect) ClaimsOfTokenSQL() string {
	return `SELECT session_id FROM queue WHERE phase = $1 AND claim_token_id = $2 AND ` + d.NotDeleted + `
		ORDER BY updated_at, session_id`
}

// ListQuery is a list method's two statements: the count of every match and
// the page of rows, read in one snapshot.
type ListQuery struct {
	Count     string
	CountArgs []any
	Page      string
	PageArgs  []any
}

// ListSessions is the ListQuery of f: the count of sessions matching f's
// OutpostID, Status, Title and Worker, and the page of SessionCols older than
// (BeforeCreated, BeforeID), newest first, up to Limit (0: no cap).
func (d Dialect) ListSessions(f store.SessionFilter) ListQuery {
	var w Where
	if f.OutpostID != "" {
		w.And("outpost_id = " + w.Arg(f.OutpostID))
	}
	if f.Status != "" {
		w.And("status = " + w.Arg(f.Status))
	}
	if f.Title != "" {
		w.And(d.Contains("title_fold", w.Arg(strings.ToLower(f.Title))))
	}
	if f.Worker != "" {
		w.And("worker = " + w.Arg(f.Worker))
	}
	if f.ForkedFrom != "" {
		w.And("forked_from = " + w.Arg(f.ForkedFrom))
	}
	var q ListQuery
	filter, args := w.SQL()
	q.Count, q.CountArgs = `SELECT COUNT(*) FROM sessions WHERE `+filter, args
	page := w.Clone()
	if !f.BeforeCreated.IsZero() {
		page.And(d.Before(page.Arg(f.BeforeCreated.UnixMilli()), page.Arg(f.BeforeID)))
	}
	cond, pargs := page.SQL()
	q.Page = `SELECT ` + SessionCols + ` FROM sessions WHERE ` + cond + ` ORDER BY created_at DESC, id DESC` + limit(f.Limit)
	q.PageArgs = pargs
	return q
}

// ListQueue is the ListQuery of f: the count of live entries matching f's
// OutpostID, Phase and AcceptorID, and the page of EntryCols after
// AfterRev in rev order (tombstones too with IncludeDeleted), up to Limit
// (0: no cap).
func (d Dialect) ListQueue(f store.QueueFilter) ListQuery {
	var w Where
	if f.OutpostID != "" {
		w.And("outpost_id = " + w.Arg(f.OutpostID))
	}
	if f.Phase != "" {
		w.And("phase = " + w.Arg(f.Phase))
	}
	if f.AcceptorID != "" {
		w.And("acceptor_id = " + w.Arg(f.AcceptorID))
	}
	page := w.Clone()
	w.And(d.NotDeleted)
	var q ListQuery
	filter, args := w.SQL()
	q.Count, q.CountArgs = `SELECT COUNT(*) FROM queue WHERE `+filter, args
	page.And("rev > " + page.Arg(f.AfterRev))
	if !f.IncludeDeleted {
		page.And(d.NotDeleted)
	}
	cond, pargs := page.SQL()
	order := ` ORDER BY rev`
	if f.ByPriority {
		order = ` ORDER BY ` + ClaimOrder
	}
	q.Page = `SELECT ` + EntryCols + ` FROM queue WHERE ` + cond + order + limit(f.Limit)
	q.PageArgs = pargs
	return q
}

// ClaimOrder is the order in which an outpost's pending entries are
// claimed: higher priority first, FIFO within one. The index
// queue_outpost_priority is on it.
const ClaimOrder = `priority DESC, created_at, session_id`

// ClaimNextSQL picks the session id of outpost $1's first claimable entry
// for f, in claim order, through the partial index queue_claimable of the
// entries a claim may pick (its condition is spelled with literals, so the
// planner can use it: the pick reads no deleted markers, and no entries of
// ended or suspended sessions, however many the retention keeps). A
// non-empty lock is appended (PostgreSQL's row lock of the pick; sessions
// then joins as s, and has no deleted column, so NotDeleted is the queue's).
func (d Dialect) ClaimNextSQL(outpostID string, f store.NextFilter, lock string) (string, []any) {
	args := []any{outpostID}
	var b strings.Builder
	b.WriteString(`SELECT q.session_id FROM queue q`)
	if lock != "" {
		b.WriteString(` JOIN sessions s ON s.id = q.session_id`)
	}
	b.WriteString(` WHERE q.outpost_id = $1 AND ` + d.Claimable())
	if f.Platform != "" {
		args = append(args, f.Platform)
		fmt.Fprintf(&b, ` AND q.platform IN ('', $%d)`, len(args))
	}
	if !f.Restricted {
		b.WriteString(` AND q.network_policy_json IS NULL`)
	}
	if !f.Placed {
		b.WriteString(` AND q.requirements_json IS NULL`)
	}
	if len(f.Exclude) > 0 {
		b.WriteString(` AND q.session_id NOT IN (`)
		for i, id := range f.Exclude {
			args = append(args, id)
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "$%d", len(args))
		}
		b.WriteString(`)`)
	}
	b.WriteString(` ORDER BY q.priority DESC, q.created_at, q.session_id LIMIT 1`)
	if lock != "" {
		b.WriteString(" " + lock)
	}
	return b.String(), args
}

// Claimable is the condition of an entry a claim-next may pick, spelled as
// the WHERE of the index queue_claimable: pending, live, and of a session
// neither suspended nor ended.
func (d Dialect) Claimable() string {
	return d.NotDeleted + ` AND phase = '` + api.PhasePending + `' AND session_status NOT IN ('` +
		api.QueueSessionSuspended + `', '` + api.QueueSessionTerminated + `')`
}

// Ended is the condition of the entry of an ended session that is still
// listed (released, or ended while pending), spelled as the WHERE of the
// index queue_ended.
func (d Dialect) Ended() string {
	return d.NotDeleted + ` AND phase = '` + api.PhasePending + `' AND session_status = '` + api.QueueSessionTerminated + `'`
}

// EndedEntriesSQL picks the session ids of up to $2 entries of ended
// sessions last written before $1 (Unix ms), oldest first, through the
// index queue_ended. A non-empty lock is appended (PostgreSQL's row lock of
// the session of each pick; sessions then joins as s).
func (d Dialect) EndedEntriesSQL(lock string) string {
	if lock == "" {
		return `SELECT session_id FROM queue WHERE ` + d.Ended() + ` AND updated_at < $1 ORDER BY updated_at, session_id LIMIT $2`
	}
	return `SELECT q.session_id FROM queue q JOIN sessions s ON s.id = q.session_id WHERE ` + d.Ended() +
		` AND q.updated_at < $1 ORDER BY q.updated_at, q.session_id LIMIT $2 ` + lock
}

// HeldClaimsSQL counts the entries of outpost $1 other than session $4
// whose claim ($2) is held at $3, through the index
// queue_outpost_priority.
func (d Dialect) HeldClaimsSQL() string {
	return `SELECT COUNT(*) FROM queue WHERE outpost_id = $1 AND phase = $2 AND ` + d.NotDeleted + `
		AND ` + d.Expiry() + ` > $3 AND session_id <> $4`
}

// ClaimEntrySQL is what a claim of session $1 reads besides the session's
// state, in one statement: EntryCols of its queue entry (no row when it
// has none), then the highest event seq (0 when none); max_running and
// desktop_json of the entry's outpost (NULL when the outpost is gone); 1
// when some webhook is enabled, 0 when none is, so a claim emits no
// delivery that no subscription could take; and the lowest epoch of the
// session's connect tokens (NULL when it has none), so a claim deletes the
// tokens of older epochs only when there are some.
var ClaimEntrySQL = `SELECT ` + qualify("q", EntryCols) + `,
	(SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = $1),
	o.max_running, o.desktop_json,
	CASE WHEN EXISTS (SELECT 1 FROM webhooks WHERE disabled_at IS NULL) THEN 1 ELSE 0 END,
	(SELECT MIN(epoch) FROM connect_tokens WHERE session_id = $1)
	FROM queue q LEFT JOIN outposts o ON o.id = q.outpost_id WHERE q.session_id = $1`

// qualify prefixes each column of cols, a comma-separated list, with
// table alias t.
func qualify(t, cols string) string {
	fields := strings.Split(cols, ",")
	for i, f := range fields {
		f = strings.TrimSpace(f)
		fields[i] = t + "." + f
	}
	return strings.Join(fields, ", ")
}

// OutpostLimitSQL reads max_running of outpost $1, to be locked (the
// dialect's Lock.Outpost).
const OutpostLimitSQL = `SELECT o.max_running FROM outposts o WHERE o.id = $1`

// SetOutpostLimitsSQL writes max_running $2, max_attempts $3 and
// max_snapshot_bytes $4, network_policy_json $5 and desktop_json $6 of
// outpost $1.
const SetOutpostLimitsSQL = `UPDATE outposts SET max_running = $2, max_attempts = $3, max_snapshot_bytes = $4,
	network_policy_json = $5, desktop_json = $6 WHERE id = $1`

// OutpostStatsSQL counts the live entries of outpost $1 that are pending
// ($2) but not of an ended session ($5), and those claimed ($3) with an
// Expiry after $4; with oldest, it also reads the least updated_at of the
// pending ones (NULL when none).
func (d Dialect) OutpostStatsSQL(oldest bool) string {
	pending := `phase = $2 AND session_status <> $5`
	q := `SELECT ` + d.CountIf(pending) + `, ` + d.CountIf(`phase = $3 AND `+d.Expiry()+` > $4`)
	if oldest {
		q += `, ` + d.MinIf("updated_at", pending)
	}
	return q + ` FROM queue WHERE outpost_id = $1 AND ` + d.NotDeleted
}

// SessionCountsSQL counts the sessions of outpost $1 whose status is $2 and
// those whose status is $3, through the index sessions_outpost_status.
const SessionCountsSQL = `SELECT
		(SELECT COUNT(*) FROM sessions WHERE outpost_id = $1 AND status = $2),
		(SELECT COUNT(*) FROM sessions WHERE outpost_id = $1 AND status = $3)`

// SnapshotBytesSQL sums the sizes of the snapshots of outpost $1's
// sessions.
const SnapshotBytesSQL = `SELECT COALESCE(SUM(sn.size), 0) FROM snapshots sn
		JOIN sessions s ON s.id = sn.session_id WHERE s.outpost_id = $1`

// limit is the LIMIT clause of n rows; none when n is 0 or less.
func limit(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(" LIMIT %d", n)
}

// Pruning queue tombstones, so that lists and replays do not count all of
// history.

// QueueHorizonSQL reads the highest rev of a pruned tombstone of outpost
// $1, or of any outpost when $1 is ”.
const QueueHorizonSQL = `SELECT COALESCE(MAX(rev), 0) FROM queue_horizons WHERE $1 = '' OR outpost_id = $1`

// RaiseQueueHorizonSQL raises outpost $1's horizon to rev $2.
func (d Dialect) RaiseQueueHorizonSQL() string {
	return `INSERT INTO queue_horizons (outpost_id, rev) VALUES ($1, $2)
		ON CONFLICT (outpost_id) DO UPDATE SET rev = ` + d.Greatest + `(queue_horizons.rev, excluded.rev)`
}

// PruneQueueSQL deletes up to $4 tombstones (the condition tombstone,
// the store's spelling of q.deleted, for the index queue_tombstones) last
// written before $1 (Unix ms) of sessions whose status is $2 or $3
// (api.StatusExit, api.StatusError), oldest first, returning their outposts and revs. The
// CROSS JOIN keeps SQLite's planner on queue_tombstones, in its order,
// rather than scanning every ended session by status, which grows with
// history.
func PruneQueueSQL(tombstone string) string {
	return `DELETE FROM queue WHERE session_id IN (
		SELECT q.session_id FROM queue q CROSS JOIN sessions s
		WHERE s.id = q.session_id AND ` + tombstone + ` AND q.updated_at < $1 AND s.status IN ($2, $3)
		ORDER BY q.updated_at LIMIT $4) RETURNING outpost_id, rev`
}

// Pruned is a tombstone PruneQueueSQL deleted.
type Pruned struct {
	OutpostID string
	Rev       int64
}

// ScanPruned scans a row of PruneQueueSQL.
func ScanPruned(sc Scanner) (Pruned, error) {
	var p Pruned
	err := sc.Scan(&p.OutpostID, &p.Rev)
	return p, err
}

// Horizons is the highest rev pruned per outpost.
func Horizons(pruned []Pruned) map[string]int64 {
	out := map[string]int64{}
	for _, p := range pruned {
		out[p.OutpostID] = max(out[p.OutpostID], p.Rev)
	}
	return out
}

// TombstoneEndedSQL turns the ended entry of session $1 into a tombstone
// (deleted, the dialect's true) written at $2 (Unix ms) under rev $3, if
// it is still an ended entry (Ended) last written before $4, and returns
// its EntryCols.
func (d Dialect) TombstoneEndedSQL(deleted string) string {
	return `UPDATE queue SET deleted = ` + deleted + `, updated_at = $2, rev = $3
		WHERE session_id = $1 AND ` + d.Ended() + ` AND updated_at < $4 RETURNING ` + EntryCols
}
