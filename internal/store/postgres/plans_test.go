package postgres

import (
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// The pick of a claim-next and the sweep of ended entries can go through
// the partial indexes of the entries they may take (0016_ended_entries),
// and the sweeps' list of started sessions through sessions_started: with
// sequential scans off, as the planner chooses once the tables hold more
// than a handful of rows, each plan names its index.
func TestPlansUseEndedIndexes(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	defer s.Close()
	claimNext, claimNextArgs := dialect.ClaimNextSQL("op", store.NextFilter{Platform: "linux", Exclude: []string{"ses_x"}}, "FOR UPDATE OF s SKIP LOCKED")
	for _, c := range []struct {
		name, query string
		args        []any
		index       string
	}{
		{"claim next", claimNext, claimNextArgs, "queue_claimable"},
		{"ended entries", endedEntriesSQL, []any{int64(5), 100}, "queue_ended"},
		{"started sessions", sqlstore.ListStartedSessionsSQL, nil, "sessions_started"},
	} {
		tx, err := s.pool.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(t.Context(), `SET LOCAL enable_seqscan = off`); err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(t.Context(), `EXPLAIN `+c.query, c.args...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		_ = tx.Rollback(t.Context())
		// An index scan names it "using", a bitmap index scan "on".
		if p := strings.Join(plan, "\n"); !strings.Contains(p, "using "+c.index+" ") && !strings.Contains(p, "Bitmap Index Scan on "+c.index+" ") {
			t.Errorf("%s: plan does not use %s:\n%s", c.name, c.index, p)
		}
	}
}
