package server

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store/postgres"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
)

// TestClaimGroupMetrics: on PostgreSQL, claims made at once share
// transactions, every claim is answered once, and /metrics counts the
// groups and the claims in them as the store does.
func TestClaimGroupMetrics(t *testing.T) {
	t.Parallel()
	st, err := postgres.Open(t.Context(), pgtest.Shared(t).Database(t), postgres.WithClaimGroup(32))
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Options{DataDir: t.TempDir(), Store: st})
	ts.outpost("dev")
	machine := ts.token([]string{api.ScopeMachine}, "dev")
	ts.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}

	// Groups form only while claims wait for one another; a few rounds of
	// 40 at once make some on any machine.
	const n = 40
	for round := 0; round < 10; round++ {
		var ids []string
		for range n {
			ids = append(ids, ts.session("dev").Metadata.SessionID)
		}
		codes := make([]int, n)
		var wg sync.WaitGroup
		for i, id := range ids {
			wg.Go(func() {
				codes[i] = ts.do("POST", "/v1/queue/"+id+"/claim", machine, api.ClaimRequest{AcceptorID: fmt.Sprintf("w%d", i)}, nil)
			})
		}
		wg.Wait()
		for i, c := range codes {
			if c != 200 {
				t.Fatalf("round %d: claim of %s: %d, want 200", round, ids[i], c)
			}
		}
		if groups, _ := st.ClaimGroups(); groups > 0 {
			t.Logf("groups formed in round %d", round)
			break
		}
	}
	groups, claims := st.ClaimGroups()
	if groups == 0 || claims < 2*groups {
		t.Fatalf("store counted %d groups of %d claims: want groups of two or more", groups, claims)
	}
	gotGroups, ok1 := sample(t, ts, "outpost_store_claim_groups_total", "")
	gotClaims, ok2 := sample(t, ts, "outpost_store_grouped_claims_total", "")
	if !ok1 || !ok2 || int64(gotGroups) != groups || int64(gotClaims) != claims {
		t.Errorf("/metrics: groups %v (%v), claims %v (%v); the store counted %d and %d", gotGroups, ok1, gotClaims, ok2, groups, claims)
	}
}
