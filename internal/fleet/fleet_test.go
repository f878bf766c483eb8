package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/servertest"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

const testTimeout = 30 * time.Second

// fleetEnv is a real server over loopback (SQLite in a temp dir) with one
// outpost, and a proxy in front of it whose hooks can break or race
// requests.
type fleetEnv struct {
	t       *testing.T
	admin   *client.Client // straight to the server
	viaProx *client.Client // through the proxy
	outpost api.Outpost

	mu   sync.Mutex // guards hook and the counters
	hook func(w http.ResponseWriter, r *http.Request) bool
	hits map[string]int // "list", "watch", "claim", "claim_next" requests seen
	rp   http.Handler   // the proxy to the server, without the hook
}

func newFleetEnv(t *testing.T, opts server.Options) *fleetEnv {
	t.Helper()
	srv := servertest.Start(t, opts)
	e := &fleetEnv{t: t, hits: map[string]int{}}
	u, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	e.rp = rp
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		switch {
		case r.URL.Path == "/v1/queue" && r.URL.Query().Get("watch") == "true":
			e.hits["watch"]++
		case r.URL.Path == "/v1/queue":
			e.hits["list"]++
		case strings.HasSuffix(r.URL.Path, "/claim"):
			e.hits["claim"]++
		case strings.HasSuffix(r.URL.Path, "/queue:claim"):
			e.hits["claim_next"]++
		}
		hook := e.hook
		e.mu.Unlock()
		if hook != nil && hook(w, r) {
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	if e.admin, err = client.New(srv.URL(), srv.AdminToken()); err != nil {
		t.Fatal(err)
	}
	if e.viaProx, err = client.New(proxy.URL, srv.AdminToken()); err != nil {
		t.Fatal(err)
	}
	o, err := e.admin.Outposts.Create(context.Background(), api.CreateOutpostRequest{Name: "dev", Platform: api.PlatformLinux})
	if err != nil {
		t.Fatalf("create outpost: %v", err)
	}
	e.outpost = *o
	return e
}

func (e *fleetEnv) setHook(h func(w http.ResponseWriter, r *http.Request) bool) {
	e.mu.Lock()
	e.hook = h
	e.mu.Unlock()
}

func (e *fleetEnv) count(what string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.hits[what]
}

// session creates a pending session on the outpost.
func (e *fleetEnv) session(ctx context.Context) string {
	e.t.Helper()
	s, err := e.admin.Sessions.Create(ctx, api.CreateSessionRequest{Outpost: "dev", Prompt: "test",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"true"}`)}}}})
	if err != nil {
		e.t.Fatalf("create session: %v", err)
	}
	return s.Metadata.SessionID
}

// consumer returns a consumer of the outpost through the proxy.
func (e *fleetEnv) consumer(acceptor string, capacity int, r Runner) *Consumer {
	return &Consumer{Client: e.viaProx, Outpost: e.outpost, Identity: &Identity{AcceptorID: acceptor, Kind: api.WorkerKindWorker},
		Capacity: capacity, Runner: r, PollInterval: 50 * time.Millisecond, Logger: testLogger(e.t)}
}

// start runs c until the test ends, returning a channel with Run's error.
func start(t *testing.T, ctx context.Context, c *Consumer) <-chan error {
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return done
}

// runnerFunc is a Runner of a function.
type runnerFunc func(ctx context.Context, s *Session) Outcome

func (f runnerFunc) Run(ctx context.Context, s *Session) Outcome { return f(ctx, s) }

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func testContext(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx, cancel
}

func receive[T any](t *testing.T, ctx context.Context, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

func held(t *testing.T, ctx context.Context, c *client.Client, acceptor string) int {
	t.Helper()
	l, err := c.Queue.List(ctx, client.QueueFilter{Phase: api.PhaseClaimed, AcceptorID: acceptor, First: 200})
	if err != nil {
		t.Fatalf("list claimed: %v", err)
	}
	return len(l.Items)
}

// TestCapacityUnderBurst: of a burst of sessions a consumer of capacity 2
// never holds more than two claims; each session is run once, and the
// backlog is claimed as slots free up.
func TestCapacityUnderBurst(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{})
	ctx, cancel := testContext(t)
	const n, capacity = 6, 2
	for range n {
		e.session(ctx)
	}
	var active, peak atomic.Int32
	var mu sync.Mutex
	runs := map[string]int{}
	started := make(chan string, n)
	proceed := make(chan struct{})
	r := runnerFunc(func(ctx context.Context, s *Session) Outcome {
		a := active.Add(1)
		defer active.Add(-1)
		for p := peak.Load(); a > p && !peak.CompareAndSwap(p, a); p = peak.Load() {
		}
		mu.Lock()
		runs[s.ID]++
		mu.Unlock()
		started <- s.ID
		select {
		case <-proceed:
		case <-ctx.Done():
			return Outcome{}
		}
		if _, err := e.admin.Sessions.Terminate(ctx, s.ID, "done"); err != nil {
			t.Errorf("terminate %s: %v", s.ID, err)
		}
		return Exited(nil)
	})
	done := start(t, ctx, e.consumer("acc-burst", capacity, r))
	for i := 0; i < n; i += capacity {
		for range capacity {
			receive(t, ctx, "a session to start", started)
		}
		if got := held(t, ctx, e.admin, "acc-burst"); got != capacity {
			t.Fatalf("the server shows %d claims held, want %d", got, capacity)
		}
		for range capacity {
			proceed <- struct{}{}
		}
	}
	waitfor.Until(ctx, t, "every claim released", func() bool { return held(t, ctx, e.admin, "acc-burst") == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if p := peak.Load(); p != capacity {
		t.Errorf("peak of %d sessions at once, want %d", p, capacity)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != n {
		t.Errorf("ran %d sessions, want %d", len(runs), n)
	}
	for id, k := range runs {
		if k != 1 {
			t.Errorf("session %s ran %d times", id, k)
		}
	}
}

// countingObserver counts conflicts and failures.
type countingObserver struct {
	conflicts atomic.Int32
	mu        sync.Mutex
	failures  []string
}

func (o *countingObserver) Conflict() { o.conflicts.Add(1) }
func (o *countingObserver) Failure(op string) {
	o.mu.Lock()
	o.failures = append(o.failures, op)
	o.mu.Unlock()
}
func (o *countingObserver) Held(int) {}

// TestClaimConflictSkipped: a session another acceptor wins between the
// list and the claim (409) is skipped, and the next one is claimed.
func TestClaimConflictSkipped(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{})
	ctx, cancel := testContext(t)
	first := e.session(ctx)
	second := e.session(ctx)
	var raced atomic.Bool
	e.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if noClaimNext(w, r) {
			return true // the race is of claims by id
		}
		if strings.HasSuffix(r.URL.Path, "/"+first+"/claim") && raced.CompareAndSwap(false, true) {
			if _, err := e.admin.Queue.Claim(r.Context(), first, "rival"); err != nil {
				t.Errorf("rival claim: %v", err)
			}
		}
		return false
	})
	started := make(chan string, 2)
	r := runnerFunc(func(ctx context.Context, s *Session) Outcome {
		started <- s.ID
		<-s.Stopping()
		return Outcome{}
	})
	obs := &countingObserver{}
	c := e.consumer("acc-race", 2, r)
	c.Observer = obs
	done := start(t, ctx, c)
	if got := receive(t, ctx, "a session to start", started); got != second {
		t.Fatalf("ran %s, want %s (the first was the rival's)", got, second)
	}
	waitfor.Until(ctx, t, "the conflict to be counted", func() bool { return obs.conflicts.Load() == 1 })
	q, err := e.admin.Queue.Get(ctx, first)
	if err != nil || q.Status.AcceptorID == nil || *q.Status.AcceptorID != "rival" {
		t.Fatalf("first session %+v, %v: want it held by the rival", q, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	select {
	case id := <-started:
		t.Errorf("also ran %s", id)
	default:
	}
}

// TestBrokenWatchFallsBackToList: while every watch fails, the queue is
// listed every PollInterval, and a session queued meanwhile is claimed.
func TestBrokenWatchFallsBackToList(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{})
	ctx, cancel := testContext(t)
	e.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Query().Get("watch") != "true" {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":{"code":"unavailable","message":"watch broken by the test"}}`)
		return true
	})
	started := make(chan string, 1)
	r := runnerFunc(func(ctx context.Context, s *Session) Outcome {
		started <- s.ID
		<-s.Stopping()
		return Outcome{}
	})
	obs := &countingObserver{}
	c := e.consumer("acc-poll", 1, r)
	c.Observer = obs
	c.ClaimWait = -1 // a waiting claim would take the session without the list
	done := start(t, ctx, c)
	waitfor.Until(ctx, t, "a failed watch", func() bool { return e.count("watch") >= 1 })
	lists := e.count("list")
	id := e.session(ctx)
	if got := receive(t, ctx, "the session to start", started); got != id {
		t.Fatalf("ran %s, want %s", got, id)
	}
	if e.count("list") <= lists {
		t.Errorf("no list after the watch broke (%d before, %d after)", lists, e.count("list"))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if !strings.Contains(strings.Join(obs.failures, ","), "watch") {
		t.Errorf("failures %q, want the watch's", obs.failures)
	}
}

// TestLostClaimCancelsRunner: when a renewal is refused (another acceptor
// holds the session now) the runner's context ends with ErrClaimLost, and
// the claim, someone else's, is not released.
func TestLostClaimCancelsRunner(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{ClaimTTL: 3 * time.Second}) // renewals every second
	ctx, cancel := testContext(t)
	id := e.session(ctx)
	started := make(chan struct{})
	causes := make(chan error, 1)
	r := runnerFunc(func(ctx context.Context, s *Session) Outcome {
		close(started)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return Outcome{}
	})
	done := start(t, ctx, e.consumer("acc-lost", 1, r))
	receive(t, ctx, "the runner to start", started)
	if _, err := e.admin.Queue.Release(ctx, id, "acc-lost"); err != nil {
		t.Fatalf("release behind the consumer's back: %v", err)
	}
	if _, err := e.admin.Queue.Claim(ctx, id, "rival"); err != nil {
		t.Fatalf("rival claim: %v", err)
	}
	if cause := receive(t, ctx, "the runner's context to end", causes); !errors.Is(cause, ErrClaimLost) {
		t.Errorf("cause %v, want ErrClaimLost", cause)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	q, err := e.admin.Queue.Get(context.Background(), id)
	if err != nil || q.Status.AcceptorID == nil || *q.Status.AcceptorID != "rival" {
		t.Errorf("entry %+v, %v: want it still the rival's", q, err)
	}
}

// TestRunnerErrorReleasesWithReason: a runner that cannot give the session
// a machine has the claim released with its reason on the session, and the
// session is left to others for RetryAfter.
func TestRunnerErrorReleasesWithReason(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{})
	ctx, cancel := testContext(t)
	id := e.session(ctx)
	var runs atomic.Int32
	r := runnerFunc(func(ctx context.Context, s *Session) Outcome {
		runs.Add(1)
		return NotStarted(errors.New("the test's machine exploded")).Postponed()
	})
	c := e.consumer("acc-fail", 1, r)
	c.RetryAfter = time.Hour
	done := start(t, ctx, c)
	waitfor.Until(ctx, t, "the reason on the session", func() bool {
		s, err := e.admin.Sessions.Get(ctx, id)
		return err == nil && strings.Contains(s.Status.Reason, "the test's machine exploded")
	})
	q, err := e.admin.Queue.Get(ctx, id)
	if err != nil || q.Status.Phase != api.PhasePending {
		t.Fatalf("entry %+v, %v: want it pending again", q, err)
	}
	// The release's own event reaches the consumer; it must not claim the
	// session again before RetryAfter.
	waitfor.Until(ctx, t, "a list after the release", func() bool { return e.count("list") >= 1 })
	if n := runs.Load(); n != 1 {
		t.Errorf("ran %d times, want once (postponed)", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}

// TestRunWaitsForEverything: Run returns only after its runners have
// returned (a runner still finishing its session after shutdown keeps Run
// waiting), and no goroutine of the consumer or its presence outlives it.
func TestRunWaitsForEverything(t *testing.T) {
	e := newFleetEnv(t, server.Options{})
	ctx, cancel := testContext(t)
	e.session(ctx)
	started := make(chan struct{})
	finish := make(chan struct{})
	var returned atomic.Bool
	r := runnerFunc(func(ctx context.Context, s *Session) Outcome {
		close(started)
		<-s.Stopping()
		<-finish // the session's grace period
		returned.Store(true)
		return Outcome{}
	})
	c := e.consumer("acc-wait", 1, r)
	c.Identity.Instance = NewInstanceID()
	c.Presence = NewPresence(e.viaProx, e.outpost.Metadata.OutpostID, "acc-wait",
		api.WorkerInfo{Kind: api.WorkerKindWorker, Instance: c.Identity.Instance}, 20*time.Millisecond, nil, testLogger(t))
	done := start(t, ctx, c)
	receive(t, ctx, "the runner to start", started)
	cancel()
	// Run must not return while the runner runs. Shutdown began (ctx is
	// over): were Run not waiting for the runner it would return about now.
	waitfor.True(t, "the consumer to stop its feed", func() bool { return !consumerFrames("(*Consumer).feed") })
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) while its runner was still running", err)
	default:
	}
	close(finish)
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if !returned.Load() {
		t.Error("Run returned before its runner")
	}
	// A goroutine that has called its WaitGroup's Done (or closed its done
	// channel) is still on the stack until its deferred calls return, so
	// give those a moment; one that stays is a leak.
	lingering := func() bool {
		return consumerFrames("fleet.(*Consumer)") || consumerFrames("fleet.(*Presence)")
	}
	lctx, lcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer lcancel()
	if !waitfor.Poll(lctx, func() bool { return !lingering() }) {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines of the consumer outlive Run:\n%s", buf[:runtime.Stack(buf, true)])
	}
}

// consumerFrames reports whether a goroutine's stack holds a frame whose
// name contains s.
func consumerFrames(s string) bool {
	buf := make([]byte, 1<<20)
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, s) {
			return true
		}
	}
	return false
}

// TestStopEndsRun: a session whose outcome says Stop (the worker's --once)
// ends Run after it, with nothing more claimed; an over session is no
// error.
func TestStopEndsRun(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{})
	ctx, _ := testContext(t)
	e.session(ctx)
	e.session(ctx)
	var runs atomic.Int32
	r := runnerFunc(func(ctx context.Context, s *Session) Outcome {
		runs.Add(1)
		if _, err := e.admin.Sessions.Terminate(ctx, s.ID, "done"); err != nil {
			t.Errorf("terminate: %v", err)
		}
		return Exited(nil).StopAfter()
	})
	if err := e.consumer("acc-once", 1, r).Run(ctx); err != nil {
		t.Fatalf("Run = %v, want nil after one session", err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("ran %d sessions, want 1", n)
	}
	if n := held(t, ctx, e.admin, "acc-once"); n != 0 {
		t.Errorf("%d claims left held", n)
	}
}

// TestKeepRenewsOnItsClock: the claim is renewed at a third of the time
// left before its deadline on the consumer's clock, and a refused renewal
// reports the claim lost.
func TestKeepRenewsOnItsClock(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{ClaimTTL: time.Minute})
	ctx, _ := testContext(t)
	id := e.session(ctx)
	claim, err := e.admin.Queue.Claim(ctx, id, "acc-keep")
	if err != nil {
		t.Fatal(err)
	}
	clk := clockwork.NewFakeClockAt(time.Now())
	c := e.consumer("acc-keep", 1, runnerFunc(func(context.Context, *Session) Outcome { return Outcome{} }))
	c.Clock = clk
	if err := c.init(); err != nil {
		t.Fatal(err)
	}
	s := &Session{ID: id, Claim: *claim, c: c, ended: make(chan struct{})}
	kept := make(chan bool, 1)
	go func() { kept <- c.keep(ctx, s, c.log) }()

	if err := clk.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	claims := e.count("claim")
	clk.Advance(19 * time.Second) // not yet a third of the minute left
	if err := clk.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if n := e.count("claim"); n != claims {
		t.Fatalf("renewed after 19s of a 60s claim (%d claims, want %d)", n, claims)
	}
	clk.Advance(2 * time.Second)
	waitfor.Until(ctx, t, "the renewal", func() bool { return e.count("claim") == claims+1 })
	// The renewal has reached the server; wait until keep has its answer
	// and waits for the next round, so the release below comes after it.
	if err := clk.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}

	if _, err := e.admin.Queue.Release(ctx, id, "acc-keep"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.Queue.Claim(ctx, id, "rival"); err != nil {
		t.Fatal(err)
	}
	if err := clk.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	if receive(t, ctx, "keep to return", kept) {
		t.Error("keep = true after the rival took the session, want false (lost)")
	}
}

// TestHandBackClaimedAgain: a session a capacity-1 consumer hands back (its
// runner returned before the session ended) is claimed again from the
// watch, also when the watch shows it pending before the release's answer
// arrives.
func TestHandBackClaimedAgain(t *testing.T) {
	e := newFleetEnv(t, server.Options{})
	ctx, cancel := testContext(t)
	e.session(ctx)
	var c *Consumer
	var delayed atomic.Bool
	e.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.HasSuffix(r.URL.Path, "/release") || delayed.Swap(true) {
			return false
		}
		var req api.ClaimRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		sid := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/queue/"), "/release")
		out, err := e.admin.Queue.ReleaseWithReason(r.Context(), sid, req.AcceptorID, req.Reason)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return true
		}
		// The watch event showing the session pending again reaches the
		// consumer before this answer does.
		waitfor.Until(ctx, t, "the watch to show the session pending", func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			cur, ok := c.entries[sid]
			return ok && cur.Status.Phase == api.PhasePending
		})
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
		return true
	})
	var runs atomic.Int32
	c = e.consumer("acc-handback", 1, runnerFunc(func(ctx context.Context, s *Session) Outcome {
		if runs.Add(1) == 1 {
			return Stopped(errors.New("machine died"))
		}
		return Outcome{}
	}))
	done := start(t, ctx, c)
	waitfor.Until(ctx, t, "the handed-back session to be claimed again", func() bool { return runs.Load() >= 2 })
	cancel()
	<-done
}

// TestFailedClaimWaitsItsBackoff: a claim answered with a server error is
// not tried again before its backoff, however many watch events wake the
// scheduler meanwhile; after the wait (on the consumer's clock) it is.
func TestFailedClaimWaitsItsBackoff(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{})
	ctx, cancel := testContext(t)
	id := e.session(ctx)
	var failing atomic.Bool
	failing.Store(true)
	e.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if noClaimNext(w, r) {
			return true // the backoff is of claims by id
		}
		if strings.HasSuffix(r.URL.Path, "/"+id+"/claim") && failing.Load() {
			http.Error(w, `{"error":{"code":"internal","message":"injected"}}`, http.StatusInternalServerError)
			return true
		}
		return false
	})
	clk := clockwork.NewFakeClock()
	ran := make(chan string, 8)
	c := e.consumer("acc-backoff", 1, runnerFunc(func(ctx context.Context, s *Session) Outcome {
		if _, err := e.admin.Sessions.Terminate(ctx, s.ID, "done"); err != nil {
			t.Errorf("terminate %s: %v", s.ID, err)
		}
		ran <- s.ID
		return Exited(nil)
	}))
	c.Clock = clk
	c.PollInterval = time.Hour // nothing but watch events and the retry wake it
	done := start(t, ctx, c)
	waitfor.Until(ctx, t, "the first claim", func() bool { return e.count("claim") == 1 })
	// Events on the outpost wake the scheduler: other sessions, claimed
	// and run at once.
	for range 3 {
		other := e.session(ctx)
		if got := receive(t, ctx, "the other session to run", ran); got != other {
			t.Fatalf("ran %s, want %s", got, other)
		}
	}
	// 1 failed claim of id, 3 claims of the others: id was not retried.
	if n := e.count("claim"); n != 4 {
		t.Fatalf("%d claims, want 4: the failed claim was retried before its backoff", n)
	}
	failing.Store(false)
	clk.Advance(claimBackoff.Bound(1))
	if got := receive(t, ctx, "the failed session after its backoff", ran); got != id {
		t.Fatalf("ran %s, want %s", got, id)
	}
	cancel()
	<-done
}
