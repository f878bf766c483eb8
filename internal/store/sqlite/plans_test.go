package sqlite

import (
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// The queries of live work go through indexes that hold no history: the
// deleted queue entries and the ended sessions an outpost leaves behind
// would otherwise be read by every count, claim-order list, re-list and
// sweep (migration 0015_history), and the pick of a claim-next and the
// sweep of ended entries read only the entries they may take
// (0017_ended_entries).
func TestPlansSkipHistory(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	defer s.Close()
	listPending := dialect.ListQueue(store.QueueFilter{OutpostID: "op", Phase: api.PhasePending, ByPriority: true, Limit: 100})
	relist := dialect.ListQueue(store.QueueFilter{OutpostID: "op", AfterRev: 7, Limit: 100})
	byAcceptor := dialect.ListQueue(store.QueueFilter{OutpostID: "op", AcceptorID: "acc"})
	heldClaimsSQL := dialect.HeldClaimsSQL()
	claimNext, claimNextArgs := dialect.ClaimNextSQL("op", store.NextFilter{Platform: "linux", Exclude: []string{"ses_x"}}, "")
	for _, c := range []struct {
		name, query string
		args        []any
		index       string // one of them, separated by |
	}{
		{"live count", relist.Count, relist.CountArgs, "queue_live_rev"},
		{"live count by phase", listPending.Count, listPending.CountArgs, "queue_outpost_priority"},
		{"live count by acceptor", byAcceptor.Count, byAcceptor.CountArgs, "queue_live_rev"},
		{"claim order", listPending.Page, listPending.PageArgs, "queue_outpost_priority|queue_live_rev"},
		{"re-list", relist.Page, relist.PageArgs, "queue_live_rev"},
		{"held claims", heldClaimsSQL, []any{"op", api.PhaseClaimed, 5, "s"}, "queue_phase_expiry"},
		{"active sessions", sqlstore.ActiveSessionsSQL, nil, "sessions_active"},
		{"list started sessions", sqlstore.ListStartedSessionsSQL, nil, "sessions_started"},
		{"claim next", claimNext, claimNextArgs, "queue_claimable"},
		{"ended entries", endedEntriesSQL, []any{5, 100}, "queue_ended"},
	} {
		rows, err := s.r.QueryContext(t.Context(), `EXPLAIN QUERY PLAN `+c.query, c.args...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		p := strings.Join(plan, "; ") + " "
		ok := false
		for _, index := range strings.Split(c.index, "|") {
			ok = ok || strings.Contains(p, "INDEX "+index+" ")
		}
		if !ok {
			t.Errorf("%s: plan %q uses none of %s", c.name, p, c.index)
		}
	}
}

// A heartbeat of a live worker reads and writes by key, and its prune
// walks only the entries expired long ago, so its cost does not grow with
// the outpost's workers; the count a connecting worker needs reads the
// primary key's index alone, not the rows.
func TestPlansOfHeartbeats(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	defer s.Close()
	for _, c := range []struct {
		name, query string
		args        []any
		want        string
	}{
		{"prune", dialect.PruneWorkersSQL(), []any{"op", 5}, "SEARCH workers USING INDEX workers_expires (expires_at<?)"},
		{"the acceptor's entry", sqlstore.GetWorkerSQL, []any{"op", "acc", 5}, "SEARCH workers USING INDEX sqlite_autoindex_workers_1 (outpost_id=? AND acceptor_id=?)"},
		{"entries of the outpost", sqlstore.CountOutpostEntriesSQL, []any{"op"}, "SEARCH workers USING COVERING INDEX sqlite_autoindex_workers_1 (outpost_id=?)"},
	} {
		rows, err := s.r.QueryContext(t.Context(), `EXPLAIN QUERY PLAN `+c.query, c.args...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if p := strings.Join(plan, "; "); p != c.want {
			t.Errorf("%s: plan %q, want %q", c.name, p, c.want)
		}
	}
}
