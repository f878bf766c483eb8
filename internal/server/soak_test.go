package server

import (
	"fmt"

	"sync"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestEverySessionServedOnce runs 20 claimers over 500 sessions: each
// claimer lists pending entries and claims; a winner ends the session and
// releases. Every session must be won exactly once.
func TestEverySessionServedOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("soak")
	}
	ts := startServer(t, Options{})
	ts.outpost("soak")
	const sessions, workers = 500, 20
	ids := make(map[string]bool, sessions)
	for range sessions {
		ids[ts.session("soak").Metadata.SessionID] = true
	}
	machine := ts.token([]string{api.ScopeMachine}, "soak")
	writer := ts.token([]string{api.ScopeSessionsWrite}, "soak")

	var mu sync.Mutex
	won := map[string]int{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			acceptor := fmt.Sprintf("worker-%d", w)
			for {
				// As the public orchestrators do: the entries of ended
				// sessions stay listed as pending for a while, so page
				// through the list and keep the claimable ones.
				var claimable []api.QueueEntry
				for cursor := ""; ; {
					var list api.QueueList
					if code := ts.do("GET", "/v1/queue?outpost=soak&phase=pending&first=50&cursor="+cursor, machine, nil, &list); code != 200 {
						t.Errorf("list: %d", code)
						return
					}
					for _, e := range list.Items {
						if e.Status.SessionStatus != api.QueueSessionTerminated && e.Status.SessionStatus != api.QueueSessionSuspended {
							claimable = append(claimable, e)
						}
					}
					if !list.HasNextPage {
						break
					}
					cursor = list.Cursor
				}
				if len(claimable) == 0 {
					return
				}
				for _, e := range claimable {
					id := e.Metadata.SessionID
					code := ts.do("POST", "/v1/queue/"+id+"/claim", machine, api.ClaimRequest{AcceptorID: acceptor}, nil)
					if code == 409 || code == 404 {
						continue
					}
					if code != 200 {
						t.Errorf("claim %s: %d", id, code)
						return
					}
					mu.Lock()
					won[id]++
					mu.Unlock()
					if code := ts.do("POST", "/v1/sessions/"+id+"/terminate", writer, nil, nil); code != 200 {
						t.Errorf("terminate %s: %d", id, code)
					}
					if code := ts.do("POST", "/v1/queue/"+id+"/release", machine, api.ClaimRequest{AcceptorID: acceptor}, nil); code != 200 {
						t.Errorf("release %s: %d", id, code)
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(won) != sessions {
		t.Fatalf("%d sessions served, want %d", len(won), sessions)
	}
	for id, n := range won {
		if !ids[id] || n != 1 {
			t.Fatalf("session %s served %d times", id, n)
		}
	}
	var o api.Outpost
	ts.mustDo(200, "GET", "/v1/outposts/soak", machine, nil, &o)
	if o.Status.QueueDepth != 0 || o.Status.ActiveClaims != 0 {
		t.Fatalf("outpost after soak: %+v", o.Status)
	}
}
