package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/internal/audit"
	"github.com/outpost-sh/outpost/internal/store"
)

// auditCols are the columns of audit_log, in ScanAudit's order.
const auditCols = `seq, audit_log_id, created_at, action, actor_kind, actor_id, actor_name, source_ip, object_kind, object_id, data_json, hash`

// ChainHeadSQL reads the chain's head and anchor; a dialect appends its
// row lock when appending.
const ChainHeadSQL = `SELECT head_seq, head_hash, anchor_seq, anchor_hash FROM audit_chain WHERE id = 1`

// AppendAudit appends e to the audit log on tx, the transaction of the
// change e records: it takes the chain's head (locked with lock, the
// dialect's row lock: appends serialise on it), numbers and hashes e, and
// moves the head. It sets e's Seq, ID and Hash, and CreatedAt when zero.
// Every write path of a store calls it with the entry its context carries
// (audit.Pending) just before it commits.
func AppendAudit(ctx context.Context, tx Querier, lock string, e *audit.Entry) error {
	if e.Skip {
		return nil
	}
	if len(e.Data) > 0 && !json.Valid(e.Data) {
		return fmt.Errorf("audit entry %s: data is not valid JSON", e.Action)
	}
	var seq, anchorSeq int64
	var prev, anchorHash string
	if err := tx.QueryRow(ctx, ChainHeadSQL+lock).Scan(&seq, &prev, &anchorSeq, &anchorHash); err != nil {
		return fmt.Errorf("audit chain head: %w", err)
	}
	if e.CreatedAt.IsZero() {
		e.CreatedAt = time.Now()
	}
	e.CreatedAt = FromMS(MS(e.CreatedAt))
	e.Seq = seq + 1
	e.ID = audit.IDFor(e.Seq)
	e.Hash = audit.Chain(prev, e)
	var data any // NULL when none
	if len(e.Data) > 0 {
		data = string(e.Data)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO audit_log (`+auditCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
		e.Seq, e.ID, MS(e.CreatedAt), e.Action, e.Actor.Kind, e.Actor.ID, e.Actor.Name, e.SourceIP, e.Object.Kind, e.Object.ID, data, e.Hash); err != nil {
		return fmt.Errorf("append audit entry %s: %w", e.Action, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE audit_chain SET head_seq = $1, head_hash = $2 WHERE id = 1`, e.Seq, e.Hash); err != nil {
		return fmt.Errorf("move audit chain head: %w", err)
	}
	return nil
}

// ScanAudit reads auditCols.
func ScanAudit(sc Scanner) (audit.Entry, error) {
	var e audit.Entry
	var created int64
	var data sql.NullString
	if err := sc.Scan(&e.Seq, &e.ID, &created, &e.Action, &e.Actor.Kind, &e.Actor.ID, &e.Actor.Name, &e.SourceIP, &e.Object.Kind, &e.Object.ID, &data, &e.Hash); err != nil {
		return audit.Entry{}, err
	}
	e.CreatedAt = FromMS(created)
	if data.Valid {
		e.Data = json.RawMessage(data.String)
	}
	return e, nil
}

// errNoEntry is RecordAudit's error for a context without an entry.
var errNoEntry = errors.New("the context carries no audit entry")

// RecordAudit appends the entry ctx carries in a transaction of its own.
func (s *Store) RecordAudit(ctx context.Context) error {
	if e, _ := audit.Pending(ctx); e == nil {
		return s.errorf(errNoEntry, "record audit entry")
	}
	// The write path appends the entry; the transaction has nothing else.
	if err := s.db.Write(ctx, nil, func(Tx) error { return nil }); err != nil {
		return s.errorf(err, "record audit entry")
	}
	return nil
}

// ListAudit returns a page of entries, newest first, and the count of f's
// matches without its cursor.
func (s *Store) ListAudit(ctx context.Context, f store.AuditFilter) ([]audit.Entry, int, error) {
	var w Where
	if !f.TimeAfter.IsZero() {
		w.And("created_at >= " + w.Arg(MS(f.TimeAfter)))
	}
	if !f.TimeBefore.IsZero() {
		w.And("created_at < " + w.Arg(MS(f.TimeBefore)))
	}
	if f.Action != "" {
		w.And("action = " + w.Arg(f.Action))
	}
	if f.Actor != "" {
		a := w.Arg(f.Actor)
		w.And("(actor_id = " + a + " OR actor_name = " + a + ")")
	}
	count, countArgs := w.SQL()
	page := w.Clone()
	if f.Before > 0 {
		page.And("seq < " + page.Arg(f.Before))
	}
	// The limit is an argument, not a condition: SQL leaves it out of
	// the clause but passes it.
	limit := page.Arg(s.limit(f.Limit))
	cond, args := page.SQL()
	var out []audit.Entry
	var total int
	err := s.db.Read(ctx, func(tx Tx) error {
		if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM audit_log WHERE `+count, countArgs...).Scan(&total); err != nil {
			return err
		}
		var err error
		out, err = QueryAll(ctx, tx, ScanAudit, `SELECT `+auditCols+` FROM audit_log WHERE `+cond+` ORDER BY seq DESC LIMIT `+limit, args...)
		return err
	})
	if err != nil {
		return nil, 0, s.errorf(err, "list audit log")
	}
	return out, total, nil
}

// VerifyAudit checks every entry from the anchor to the head in one
// snapshot, reading them in seq order.
func (s *Store) VerifyAudit(ctx context.Context) (audit.Verification, error) {
	var res audit.Verification
	err := s.db.Read(ctx, func(tx Tx) error {
		var head, anchor int64
		var headHash, anchorHash string
		if err := tx.QueryRow(ctx, ChainHeadSQL).Scan(&head, &headHash, &anchor, &anchorHash); err != nil {
			return err
		}
		v := audit.NewVerifier(anchor, anchorHash)
		rows, err := tx.Query(ctx, `SELECT `+auditCols+` FROM audit_log WHERE seq > $1 ORDER BY seq`, anchor)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			e, err := ScanAudit(rows)
			if err != nil {
				return err
			}
			if !v.Next(&e) {
				break
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		res = v.Finish(head, headHash)
		return nil
	})
	if err != nil {
		return audit.Verification{}, s.errorf(err, "verify audit log")
	}
	return res, nil
}

// PruneAudit removes the oldest entries created before before, up to
// limit, and anchors the chain at the last one removed, in one
// transaction that holds the chain's head (appends wait for it).
func (s *Store) PruneAudit(ctx context.Context, before time.Time, limit int) (int, error) {
	var n int64
	err := s.db.Write(ctx, nil, func(tx Tx) error {
		n = 0
		var head, anchor int64
		var headHash, anchorHash string
		if err := tx.QueryRow(ctx, ChainHeadSQL+s.d.Lock.Row).Scan(&head, &headHash, &anchor, &anchorHash); err != nil {
			return err
		}
		var last int64
		var lastHash string
		err := tx.QueryRow(ctx, `SELECT seq, hash FROM (SELECT seq, hash FROM audit_log WHERE created_at < $1 ORDER BY seq LIMIT $2) o ORDER BY seq DESC LIMIT 1`,
			MS(before), s.limit(limit)).Scan(&last, &lastHash)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if n, err = tx.Exec(ctx, `DELETE FROM audit_log WHERE seq <= $1`, last); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE audit_chain SET anchor_seq = $1, anchor_hash = $2 WHERE id = 1`, last, lastHash)
		return err
	})
	if err != nil {
		return 0, s.errorf(err, "prune audit log")
	}
	return int(n), nil
}
