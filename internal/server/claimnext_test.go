package server

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestClaimNext: POST /v1/outposts/{outpost}/queue:claim claims the
// outpost's pending sessions in claim order (priority, then oldest) with a
// connect token, as a claim by id answers; skips what exclude lists and
// what is claimed; answers 204 when nothing is left, 409 at max_running,
// 404 for an outpost the token may not see and 400 for a bad request.
func TestClaimNext(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	var o api.Outpost
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "dev", Platform: "linux", MaxRunning: 3}, &o)
	ts.outpost("other")
	machine := ts.token([]string{api.ScopeMachine}, "dev")
	var ids []string
	for _, prio := range []int{0, 7, 0, 3} {
		var s api.Session
		ts.mustDo(201, "POST", "/v1/sessions", ts.admin, map[string]any{
			"outpost": "dev", "title": "t", "priority": prio,
			"agent": map[string]any{"kind": "script", "steps": []any{map[string]any{"tool": "exec", "args": map[string]any{"command": "true"}}}},
		}, &s)
		ids = append(ids, s.Metadata.SessionID)
	}
	// ids[2] is claimed by id by someone else.
	ts.mustDo(200, "POST", "/v1/queue/"+ids[2]+"/claim", machine, api.ClaimRequest{AcceptorID: "rival"}, nil)

	next := func(req api.ClaimNextRequest) (int, api.QueueEntry) {
		t.Helper()
		var e api.QueueEntry
		code := ts.do("POST", "/v1/outposts/dev/queue:claim", machine, req, &e)
		return code, e
	}
	code, e := next(api.ClaimNextRequest{AcceptorID: "w1", Platform: api.PlatformLinux, Exclude: []string{ids[1]}})
	if code != 200 || e.Metadata.SessionID != ids[3] {
		t.Fatalf("first claim: %d %s, want 200 %s (priority 3; the 7 excluded)", code, e.Metadata.SessionID, ids[3])
	}
	if e.Status.ConnectToken == "" || !strings.HasPrefix(e.Status.GatewayURL, "ws://") || e.Status.ClaimDeadline == nil ||
		e.Status.Phase != api.PhaseClaimed || e.Status.AcceptorID == nil || *e.Status.AcceptorID != "w1" {
		t.Fatalf("claim answer %+v: want claimed by w1 with token, gateway and deadline", e.Status)
	}
	// max_running 3: the rival's and w1's are held; one more fits.
	if code, e = next(api.ClaimNextRequest{AcceptorID: "w2"}); code != 200 || e.Metadata.SessionID != ids[1] {
		t.Fatalf("second claim: %d %s, want 200 %s", code, e.Metadata.SessionID, ids[1])
	}
	if code := ts.do("POST", "/v1/outposts/dev/queue:claim", machine, api.ClaimNextRequest{AcceptorID: "w3"}, nil); code != 409 {
		t.Fatalf("claim beyond max_running: %d, want 409", code)
	}
	var patched api.Outpost
	ts.mustDo(200, "PATCH", "/v1/outposts/dev", ts.admin, map[string]any{"max_running": 0}, &patched)
	if code, e = next(api.ClaimNextRequest{AcceptorID: "w3"}); code != 200 || e.Metadata.SessionID != ids[0] {
		t.Fatalf("third claim: %d %s, want 200 %s", code, e.Metadata.SessionID, ids[0])
	}
	if code, _ = next(api.ClaimNextRequest{AcceptorID: "w4"}); code != 204 {
		t.Fatalf("claim with nothing pending: %d, want 204", code)
	}

	// Another outpost's token does not see this one.
	otherTok := ts.token([]string{api.ScopeMachine}, "other")
	ts.mustDo(404, "POST", "/v1/outposts/dev/queue:claim", otherTok, api.ClaimNextRequest{AcceptorID: "w"}, nil)
	ts.mustDo(404, "POST", "/v1/outposts/nope/queue:claim", ts.admin, api.ClaimNextRequest{AcceptorID: "w"}, nil)
	for name, req := range map[string]api.ClaimNextRequest{
		"no acceptor":    {},
		"bad platform":   {AcceptorID: "w", Platform: "amiga"},
		"empty excluded": {AcceptorID: "w", Exclude: []string{""}},
		"too many":       {AcceptorID: "w", Exclude: make([]string, api.MaxClaimNextExclude+1)},
	} {
		if code := ts.do("POST", "/v1/outposts/dev/queue:claim", machine, req, nil); code != 400 {
			t.Errorf("%s: status %d, want 400", name, code)
		}
	}
}

// TestClaimNextIsExclusive: 20 claimers asking for the next session of an
// outpost with 30 pending get 30 different sessions, then 204s; none is a
// conflict.
func TestClaimNextIsExclusive(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("dev")
	const n, claimers = 30, 20
	for range n {
		ts.session("dev")
	}
	machine := ts.token([]string{api.ScopeMachine}, "dev")
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for g := range claimers {
		wg.Go(func() {
			for {
				var e api.QueueEntry
				code := ts.do("POST", "/v1/outposts/dev/queue:claim", machine, api.ClaimNextRequest{AcceptorID: fmt.Sprintf("w%d", g)}, &e)
				switch code {
				case 200:
					mu.Lock()
					got[e.Metadata.SessionID]++
					mu.Unlock()
				case 204:
					return
				default:
					t.Errorf("claim next: status %d", code)
					return
				}
			}
		})
	}
	wg.Wait()
	if len(got) != n {
		t.Errorf("%d sessions claimed, want %d", len(got), n)
	}
	for id, k := range got {
		if k != 1 {
			t.Errorf("%s claimed %d times", id, k)
		}
	}
}

// TestClaimNextRestricted: a claim-next that does not say it enforces
// network policies (a claimer that cannot, or a build from before them)
// is never given a restricted session, whatever its priority; one that
// says so is. A policy enabled later keeps the entry from such claimers,
// and a claim by id (the contract's) still takes it.
func TestClaimNextRestricted(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("dev")
	machine := ts.token([]string{api.ScopeMachine}, "dev")
	create := func(prio int, policy *api.NetworkPolicy) string {
		body := map[string]any{"outpost": "dev", "title": "t", "priority": prio,
			"agent": map[string]any{"kind": "script", "steps": []any{map[string]any{"tool": "exec", "args": map[string]any{"command": "true"}}}}}
		if policy != nil {
			body["network_policy"] = policy
		}
		var s api.Session
		ts.mustDo(201, "POST", "/v1/sessions", ts.admin, body, &s)
		return s.Metadata.SessionID
	}
	restricted := create(9, &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "a.example.test"}}})
	stored := create(8, &api.NetworkPolicy{Enabled: false, Allow: []api.NetworkPolicyRule{{Hostname: "a.example.test"}}})
	open := create(0, nil)
	next := func(req api.ClaimNextRequest) (int, string) {
		t.Helper()
		var e api.QueueEntry
		code := ts.do("POST", "/v1/outposts/dev/queue:claim", machine, req, &e)
		return code, e.Metadata.SessionID
	}
	if code, id := next(api.ClaimNextRequest{AcceptorID: "old"}); code != 200 || id != stored {
		t.Fatalf("claim without enforcement: %d %s, want 200 %s (a disabled policy is unrestricted)", code, id, stored)
	}
	if code, id := next(api.ClaimNextRequest{AcceptorID: "old"}); code != 200 || id != open {
		t.Fatalf("second claim without enforcement: %d %s, want 200 %s", code, id, open)
	}
	if code, id := next(api.ClaimNextRequest{AcceptorID: "old"}); code != 204 {
		t.Fatalf("third claim without enforcement: %d %s, want 204: only the restricted one is left", code, id)
	}
	if code, id := next(api.ClaimNextRequest{AcceptorID: "enforcer", NetworkPolicy: true}); code != 200 || id != restricted {
		t.Fatalf("claim by an enforcer: %d %s, want 200 %s", code, id, restricted)
	}

	// Restricted after it was created: its outpost's policy is enabled.
	later := create(0, nil)
	ts.mustDo(200, "PATCH", "/v1/outposts/dev", ts.admin, map[string]any{"network_policy": map[string]any{"enabled": true, "allow": []any{}}}, nil)
	if code, id := next(api.ClaimNextRequest{AcceptorID: "old"}); code != 204 {
		t.Fatalf("claim without enforcement after the outpost's policy was enabled: %d %s, want 204", code, id)
	}
	ts.mustDo(200, "POST", "/v1/queue/"+later+"/claim", machine, api.ClaimRequest{AcceptorID: "third-party"}, nil)
}
