package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/budget"
)

// OutpostBudget returns an outpost's budget: nil when it has none,
// store.ErrNotFound when the outpost is absent.
func (s *Store) OutpostBudget(ctx context.Context, id string) (*api.OutpostBudget, error) {
	var v sql.NullString
	if err := s.db.QueryRow(ctx, `SELECT budget_json FROM outposts WHERE id = $1`, id).Scan(&v); err != nil {
		return nil, s.errorf(err, "get outpost budget %s", id)
	}
	if !v.Valid {
		return nil, nil
	}
	b := new(api.OutpostBudget)
	if err := json.Unmarshal([]byte(v.String), b); err != nil {
		return nil, s.errorf(fmt.Errorf("decode: %w", err), "get outpost budget %s", id)
	}
	return b, nil
}

// SetOutpostBudget replaces an outpost's budget (nil or a zero budget
// removes it); store.ErrNotFound when absent.
func (s *Store) SetOutpostBudget(ctx context.Context, id string, b *api.OutpostBudget) error {
	var v any // NULL for none
	if b != nil && !b.IsZero() {
		j, err := Marshal(b)
		if err != nil {
			return s.errorf(err, "set outpost budget %s", id)
		}
		v = j
	}
	if err := s.execOne(ctx, `UPDATE outposts SET budget_json = $2 WHERE id = $1`, id, v); err != nil {
		return s.errorf(err, "set outpost budget %s", id)
	}
	return nil
}

// OutpostSessionSpans lists the sessions of an outpost created at or
// after since, or not ended by then, as its budget counts them.
func (s *Store) OutpostSessionSpans(ctx context.Context, outpostID string, since time.Time) ([]budget.SessionSpan, error) {
	out, err := QueryAll(ctx, s.db, func(sc Scanner) (budget.SessionSpan, error) {
		var created int64
		var started, ended nullInt64
		var usage nullString
		if err := sc.Scan(&created, &started, &ended, &usage); err != nil {
			return budget.SessionSpan{}, err
		}
		sp := budget.SessionSpan{CreatedAt: FromMS(created), StartedAt: started.timePtr(), EndedAt: ended.timePtr()}
		if usage.valid {
			var u api.Usage
			if err := json.Unmarshal([]byte(usage.v), &u); err != nil {
				return budget.SessionSpan{}, fmt.Errorf("usage: %w", err)
			}
			sp.CostUSD = u.CostUSD
		}
		return sp, nil
	}, `SELECT created_at, started_at, ended_at, usage_json FROM sessions
		WHERE outpost_id = $1 AND (created_at >= $2 OR ended_at IS NULL OR ended_at >= $2)`, outpostID, MS(since))
	if err != nil {
		return nil, s.errorf(err, "list session spans of outpost %s", outpostID)
	}
	return out, nil
}
