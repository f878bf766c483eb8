package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
)

// idle counts the waiters parked (not claiming) on outpost's list, or on
// every list for "".
func (q *claimWaits) idle(outpost string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for id, l := range q.outposts {
		if outpost != "" && id != outpost {
			continue
		}
		for e := l.Front(); e != nil; e = e.Next() {
			if !e.Value.(*claimWaiter).busy {
				n++
			}
		}
	}
	return n
}

// claimWaitAnswer is a claim-next's answer as a waiting claimer sees it.
type claimWaitAnswer struct {
	code   int
	header string // api.HeaderClaimWait
	entry  api.QueueEntry
	err    error // the request failed (its context ended)
	took   time.Duration
	closed bool // the server closed the connection after it (a parked request's answer)
}

// askNext sends one claim-next to ts's outpost "dev" with ctx.
func askNext(ctx context.Context, hc *http.Client, url, token string, req api.ClaimNextRequest) claimWaitAnswer {
	body, _ := json.Marshal(req)
	r, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/outposts/dev/queue:claim", bytes.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+token)
	r.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := hc.Do(r)
	if err != nil {
		return claimWaitAnswer{err: err, took: time.Since(start)}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := claimWaitAnswer{code: resp.StatusCode, header: resp.Header.Get(api.HeaderClaimWait), took: time.Since(start), closed: resp.Close}
	if resp.StatusCode == 200 {
		a.err = json.Unmarshal(raw, &a.entry)
	}
	return a
}

// TestClaimNextWaitHerd: 50 idle claimers each park one waiting request;
// 10 sessions created one by one are claimed by 10 of them, each once, in
// the order they arrived, without a request more than the 50 (the
// server's counter says so) and about one wake per session; the 40 left
// whose clients go away leave the wait list (the gauge back to 0).
func TestClaimNextWaitHerd(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("dev")
	machine := ts.token([]string{api.ScopeMachine}, "dev")
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	t.Cleanup(hc.CloseIdleConnections)

	const n, k = 50, 10
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	answers := make(chan claimWaitAnswer, n)
	acceptorOf := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	order := make([]string, 0, n)
	for i := range n {
		acceptor := fmt.Sprintf("w%02d", i)
		// One at a time, so that their order on the list is known.
		before := testutil.ToFloat64(ts.srv.claimWaits.parked)
		wg.Go(func() {
			a := askNext(ctx, hc, ts.url, machine, api.ClaimNextRequest{AcceptorID: acceptor, WaitSeconds: 30})
			mu.Lock()
			if a.code == 200 {
				acceptorOf[a.entry.Metadata.SessionID] = acceptor
			}
			mu.Unlock()
			answers <- a
		})
		// Parked, not only joined: its first pick is over.
		waitUntil(t, "the claimer parks", func() bool { return ts.srv.claimWaits.idle("") == int(before)+1 })
		order = append(order, acceptor)
	}
	requests := testutil.ToFloat64(ts.srv.metrics.claimNextRequests)
	tx := testutil.ToFloat64(ts.srv.metrics.claimNextTx)
	wakes := testutil.ToFloat64(ts.srv.claimWaits.wakes)
	if requests != n {
		t.Fatalf("%v claim-next requests counted, want %d", requests, n)
	}
	var created []string
	for i := range k {
		id := ts.session("dev").Metadata.SessionID
		created = append(created, id)
		a := <-answers
		if a.code != 200 || a.entry.Metadata.SessionID != id || a.header == "" {
			t.Fatalf("session %d: answer %d %q (header %q, %v), want 200 %s with %s", i, a.code, a.entry.Metadata.SessionID, a.header, a.err, id, api.HeaderClaimWait)
		}
		if !a.closed {
			t.Errorf("session %d: a parked request was answered on a connection kept open: it was not parked on its hijacked connection", i)
		}
	}
	mu.Lock()
	for i, id := range created {
		if acceptorOf[id] != order[i] {
			t.Errorf("session %d claimed by %s, want %s (first come, first served)", i, acceptorOf[id], order[i])
		}
	}
	mu.Unlock()
	if got := testutil.ToFloat64(ts.srv.metrics.claimNextRequests) - requests; got != 0 {
		t.Errorf("%v claim-next requests more for %d sessions, want none", got, k)
	}
	if got := testutil.ToFloat64(ts.srv.claimWaits.wakes) - wakes; got < k || got > k+2 {
		t.Errorf("%v wakes for %d sessions, want about one each", got, k)
	}
	if got := testutil.ToFloat64(ts.srv.metrics.claimNextTx) - tx; got > k+2 {
		t.Errorf("%v claim-next transactions for %d sessions, want about one each", got, k)
	}
	if p := testutil.ToFloat64(ts.srv.claimWaits.parked); p != n-k {
		t.Errorf("%v requests parked, want %d", p, n-k)
	}
	// The rest go away: they leave the list.
	cancel()
	wg.Wait()
	waitUntil(t, "the parked requests whose clients left are gone", func() bool { return testutil.ToFloat64(ts.srv.claimWaits.parked) == 0 })
	ts.srv.claimWaits.mu.Lock()
	left := len(ts.srv.claimWaits.outposts)
	ts.srv.claimWaits.mu.Unlock()
	if left != 0 {
		t.Errorf("%d outposts keep a wait list after every request left", left)
	}
}

// TestClaimNextWaitFit: a waiter whose machine does not meet a session's
// requirements, parked first, does not keep it from a waiter behind it
// that does; the first still takes the next session it can. A wait out of
// range is a 400; a wait with nothing pending answers 204 at its end, and
// every answer says the server parks.
func TestClaimNextWaitFit(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("dev")
	machine := ts.token([]string{api.ScopeMachine}, "dev")
	hc := &http.Client{}
	ctx := t.Context()

	for _, wait := range []int{-1, api.MaxClaimNextWait + 1} {
		if code := ts.do("POST", "/v1/outposts/dev/queue:claim", machine, api.ClaimNextRequest{AcceptorID: "w", WaitSeconds: wait}, nil); code != 400 {
			t.Errorf("wait_seconds %d: status %d, want 400", wait, code)
		}
	}
	if a := askNext(ctx, hc, ts.url, machine, api.ClaimNextRequest{AcceptorID: "w"}); a.code != 204 || a.header == "" {
		t.Errorf("claim-next without a wait: %d, header %q; want 204 saying the server parks", a.code, a.header)
	}
	if a := askNext(ctx, hc, ts.url, machine, api.ClaimNextRequest{AcceptorID: "w", WaitSeconds: 1}); a.code != 204 || a.took < time.Second {
		t.Errorf("claim-next waiting 1s with nothing pending: %d after %v, want 204 after a second", a.code, a.took)
	}

	plain := make(chan claimWaitAnswer, 1)
	go func() {
		plain <- askNext(ctx, hc, ts.url, machine, api.ClaimNextRequest{AcceptorID: "plain", WaitSeconds: 30})
	}()
	waitUntil(t, "the plain claimer parks", func() bool { return ts.srv.claimWaits.idle("") == 1 })
	gpu := make(chan claimWaitAnswer, 1)
	go func() {
		gpu <- askNext(ctx, hc, ts.url, machine, api.ClaimNextRequest{AcceptorID: "gpu", WaitSeconds: 30,
			Machine: &api.ClaimMachine{Labels: map[string]string{"gpu": "h200"}}})
	}()
	waitUntil(t, "the gpu claimer parks", func() bool { return ts.srv.claimWaits.idle("") == 2 })

	var needs api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, map[string]any{
		"outpost": "dev", "title": "t", "requirements": map[string]any{"labels": map[string]string{"gpu": "h200"}},
		"agent": map[string]any{"kind": "script", "steps": []any{map[string]any{"tool": "exec", "args": map[string]any{"command": "true"}}}},
	}, &needs)
	select {
	case a := <-gpu:
		if a.code != 200 || a.entry.Metadata.SessionID != needs.Metadata.SessionID {
			t.Fatalf("gpu claimer: %d %q, want 200 %s", a.code, a.entry.Metadata.SessionID, needs.Metadata.SessionID)
		}
	case a := <-plain:
		t.Fatalf("the plain claimer was answered %d %q before the fitting one", a.code, a.entry.Metadata.SessionID)
	case <-time.After(20 * time.Second):
		t.Fatal("the session that needs a gpu was not handed to the parked gpu claimer")
	}
	if p := testutil.ToFloat64(ts.srv.claimWaits.parked); p != 1 {
		t.Errorf("%v requests parked, want the plain one", p)
	}
	other := ts.session("dev")
	select {
	case a := <-plain:
		if a.code != 200 || a.entry.Metadata.SessionID != other.Metadata.SessionID {
			t.Fatalf("plain claimer: %d %q, want 200 %s", a.code, a.entry.Metadata.SessionID, other.Metadata.SessionID)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the plain claimer was not handed the plain session")
	}
	// A request that may wait but finds a session at once is answered as
	// any other, its connection kept for the next.
	ready := ts.session("dev")
	if a := askNext(ctx, hc, ts.url, machine, api.ClaimNextRequest{AcceptorID: "quick", WaitSeconds: 30}); a.code != 200 || a.entry.Metadata.SessionID != ready.Metadata.SessionID || a.closed {
		t.Errorf("claim-next with a session pending: %d %q (connection closed: %v), want 200 %s on a kept connection", a.code, a.entry.Metadata.SessionID, a.closed, ready.Metadata.SessionID)
	}
}

// TestClaimNextWaitShutdown: a parked request answers 204 promptly when
// the server stops gracefully, long before its wait is over.
func TestClaimNextWaitShutdown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := New(ctx, Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Stdout: io.Discard, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	ts := &testServer{t: t, srv: srv, url: srv.URL(), admin: srv.AdminToken()}
	ts.outpost("dev")
	machine := ts.token([]string{api.ScopeMachine}, "dev")
	answer := make(chan claimWaitAnswer, 1)
	go func() {
		answer <- askNext(t.Context(), &http.Client{}, ts.url, machine, api.ClaimNextRequest{AcceptorID: "w", WaitSeconds: api.MaxClaimNextWait})
	}()
	waitUntil(t, "the claimer parks", func() bool { return srv.claimWaits.idle("") == 1 })
	cancel()
	select {
	case a := <-answer:
		if a.code != 204 || a.took > 15*time.Second {
			t.Errorf("parked request at shutdown: %d after %v (%v), want 204 at once", a.code, a.took, a.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the parked request was not answered at shutdown")
	}
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("serve: %v", err)
	}
}

// TestClaimNextWaitReplicas: a session created through replica B wakes a
// claim-next parked on replica A (the store's change feed, not the
// backstop's poll, which is set far off), which claims it; a session
// released on B wakes A's next waiter the same way.
func TestClaimNextWaitReplicas(t *testing.T) {
	t.Parallel()
	pg := pgtest.StartT(t, pgtest.Options{})
	rs := startReplicaSetC(t, pg.Database(t), 2, Options{}, func(_ int, o *Options) { o.fanoutPoll = time.Hour })
	a, b := rs[0], rs[1]
	a.outpost("dev")
	machine := a.token([]string{api.ScopeMachine}, "dev")
	hc := &http.Client{}
	park := func() <-chan claimWaitAnswer {
		before := testutil.ToFloat64(a.srv.claimWaits.parked)
		ch := make(chan claimWaitAnswer, 1)
		go func() {
			ch <- askNext(t.Context(), hc, a.url, machine, api.ClaimNextRequest{AcceptorID: "on-a", WaitSeconds: 30})
		}()
		waitUntil(t, "the claimer parks on A", func() bool { return a.srv.claimWaits.idle("") == int(before)+1 })
		return ch
	}
	expect := func(ch <-chan claimWaitAnswer, id, what string) {
		t.Helper()
		select {
		case ans := <-ch:
			if ans.code != 200 || ans.entry.Metadata.SessionID != id || ans.took > 15*time.Second {
				t.Fatalf("%s: %d %q after %v, want 200 %s at once", what, ans.code, ans.entry.Metadata.SessionID, ans.took, id)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: the request parked on A was not woken", what)
		}
	}
	ch := park()
	id := b.session("dev").Metadata.SessionID
	expect(ch, id, "created on B")

	ch = park()
	b.mustDo(200, "POST", "/v1/queue/"+id+"/release", machine, api.ClaimRequest{AcceptorID: "on-a"}, nil)
	expect(ch, id, "released on B")
}
