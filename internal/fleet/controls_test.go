package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// createSession creates a pending session on outpost with priority.
func createSession(t *testing.T, ctx context.Context, c *client.Client, outpost string, priority int) string {
	t.Helper()
	s, err := c.Sessions.Create(ctx, api.CreateSessionRequest{Outpost: outpost, Prompt: "test", Priority: priority,
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"true"}`)}}}})
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	return s.Metadata.SessionID
}

// claimedOnServer is how many of the outpost's entries the server shows
// claimed.
func claimedOnServer(t *testing.T, ctx context.Context, c *client.Client, outpost string) int {
	t.Helper()
	l, err := c.Queue.List(ctx, client.QueueFilter{Outpost: outpost, Phase: api.PhaseClaimed, First: 1})
	if err != nil {
		if ctx.Err() == nil {
			t.Errorf("list claimed: %v", err)
		}
		return 0
	}
	return l.Total
}

// TestMaxRunningHoldsAcrossConsumers: 50 sessions on an outpost with
// max_running 3, served by 10 consumers with room for 20: the server never
// shows more than 3 claimed at once, each batch fills the 3 slots, and all
// 50 sessions end, each run once.
func TestMaxRunningHoldsAcrossConsumers(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{})
	// Ten consumers and a monitor on one server: slow under the race
	// detector on a busy machine.
	ctx, cancel := context.WithTimeout(context.Background(), 4*testTimeout)
	t.Cleanup(cancel)
	const n, maxRunning, consumers = 50, 3, 10
	o, err := e.admin.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "capped", MaxRunning: maxRunning})
	if err != nil {
		t.Fatalf("create outpost: %v", err)
	}
	if o.Spec.MaxRunning != maxRunning {
		t.Fatalf("outpost max_running = %d, want %d", o.Spec.MaxRunning, maxRunning)
	}
	for range n {
		createSession(t, ctx, e.admin, "capped", 0)
	}

	// The server's state, sampled all along.
	var peak atomic.Int32
	mctx, stopMonitor := context.WithCancel(ctx)
	monitorDone := make(chan struct{})
	go func() {
		defer close(monitorDone)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for mctx.Err() == nil {
			if k := int32(claimedOnServer(t, mctx, e.admin, "capped")); k > peak.Load() {
				peak.Store(k)
			}
			select {
			case <-mctx.Done():
			case <-tick.C:
			}
		}
	}()

	var mu sync.Mutex
	proceed := map[string]chan struct{}{}
	runs := map[string]int{}
	started := make(chan string, n)
	r := runnerFunc(func(ctx context.Context, s *Session) Outcome {
		ch := make(chan struct{})
		mu.Lock()
		proceed[s.ID] = ch
		runs[s.ID]++
		mu.Unlock()
		started <- s.ID
		select {
		case <-ch:
		case <-ctx.Done():
			return Outcome{}
		}
		if _, err := e.admin.Sessions.Terminate(ctx, s.ID, "done"); err != nil {
			t.Errorf("terminate %s: %v", s.ID, err)
		}
		return Exited(nil)
	})
	var dones []<-chan error
	for i := range consumers {
		c := e.consumer(fmt.Sprintf("acc-cap-%d", i), 2, r)
		c.Outpost = *o
		c.Client = e.admin
		dones = append(dones, start(t, ctx, c))
	}
	for finished := 0; finished < n; {
		batch := min(maxRunning, n-finished)
		var ids []string
		for range batch {
			ids = append(ids, receive(t, ctx, "a session to start", started))
		}
		// The last batch may start while a session of the one before is
		// not yet released.
		if got := claimedOnServer(t, ctx, e.admin, "capped"); got < batch || got > maxRunning {
			t.Fatalf("the server shows %d sessions claimed while %d run, want %d to %d", got, batch, batch, maxRunning)
		}
		select {
		case id := <-started:
			t.Fatalf("session %s started beyond max_running", id)
		default:
		}
		mu.Lock()
		for _, id := range ids {
			close(proceed[id])
		}
		mu.Unlock()
		finished += batch
	}
	waitfor.Until(ctx, t, "every session ended", func() bool {
		l, err := e.admin.Sessions.List(ctx, client.SessionFilter{Outpost: "capped", Status: api.StatusExit, First: 1})
		return err == nil && l.Total == n
	})
	stopMonitor()
	<-monitorDone
	cancel()
	for _, d := range dones {
		if err := <-d; err != nil {
			t.Errorf("Run = %v", err)
		}
	}
	if p := peak.Load(); p > maxRunning || p == 0 {
		t.Errorf("the server showed at most %d sessions claimed at once, want 1 to %d", p, maxRunning)
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

// TestClaimOrderByPriority: a consumer claims higher priorities first,
// FIFO within one; the server's order=priority list agrees.
func TestClaimOrderByPriority(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{})
	ctx, cancel := testContext(t)
	var want []string
	byPriority := map[int][]string{}
	for _, p := range []int{0, 5, -3, 5, 10, 0} {
		id := createSession(t, ctx, e.admin, "dev", p)
		byPriority[p] = append(byPriority[p], id)
	}
	for _, p := range []int{10, 5, 0, -3} {
		want = append(want, byPriority[p]...)
	}
	l, err := e.admin.Queue.List(ctx, client.QueueFilter{Outpost: "dev", Order: "priority"})
	if err != nil {
		t.Fatalf("list by priority: %v", err)
	}
	var listed []string
	for _, q := range l.Items {
		listed = append(listed, q.Metadata.SessionID)
	}
	if strings.Join(listed, " ") != strings.Join(want, " ") {
		t.Errorf("order=priority lists %v, want %v", listed, want)
	}
	var mu sync.Mutex
	var order []string
	r := runnerFunc(func(ctx context.Context, s *Session) Outcome {
		mu.Lock()
		order = append(order, s.ID)
		mu.Unlock()
		if s.Claim.Spec.Priority != priorityOf(byPriority, s.ID) {
			t.Errorf("claim of %s shows priority %d", s.ID, s.Claim.Spec.Priority)
		}
		if _, err := e.admin.Sessions.Terminate(ctx, s.ID, "done"); err != nil {
			t.Errorf("terminate %s: %v", s.ID, err)
		}
		return Exited(nil)
	})
	done := start(t, ctx, e.consumer("acc-prio", 1, r))
	waitfor.Until(ctx, t, "every session run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == len(want)
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(order, " ") != strings.Join(want, " ") {
		t.Errorf("claimed %v, want %v", order, want)
	}
}

func priorityOf(byPriority map[int][]string, id string) int {
	for p, ids := range byPriority {
		for _, x := range ids {
			if x == id {
				return p
			}
		}
	}
	return -1
}

// TestAttemptsRunOut: a session whose machine fails every time is tried
// max_attempts times (the outpost's 2 here, the session's own 3 for the
// other) and then ends in error, its reason and transcript naming every
// attempt's failure.
func TestAttemptsRunOut(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{})
	ctx, cancel := testContext(t)
	o, err := e.admin.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "flaky", MaxAttempts: 2})
	if err != nil {
		t.Fatalf("create outpost: %v", err)
	}
	if o.Spec.MaxAttempts != 2 {
		t.Fatalf("outpost max_attempts = %d, want 2", o.Spec.MaxAttempts)
	}
	outpostLimit := createSession(t, ctx, e.admin, "flaky", 0)
	own, err := e.admin.Sessions.Create(ctx, api.CreateSessionRequest{Outpost: "flaky", Prompt: "test", Limits: api.Limits{MaxAttempts: 3},
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"true"}`)}}}})
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	var mu sync.Mutex
	runs := map[string]int{}
	r := runnerFunc(func(ctx context.Context, s *Session) Outcome {
		mu.Lock()
		runs[s.ID]++
		k := runs[s.ID]
		mu.Unlock()
		return NotStarted(fmt.Errorf("machine %d of the session exploded", k))
	})
	c := e.consumer("acc-flaky", 1, r)
	c.Outpost = *o
	done := start(t, ctx, c)
	for id, want := range map[string]int{outpostLimit: 2, own.Metadata.SessionID: 3} {
		waitfor.Until(ctx, t, "the session to end", func() bool {
			s, err := e.admin.Sessions.Get(ctx, id)
			return err == nil && api.IsFinal(s.Status.Status)
		})
		s, err := e.admin.Sessions.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if s.Status.Status != api.StatusError || s.Status.StatusDetail != api.DetailError {
			t.Errorf("%s ended %s/%s, want error/error", id, s.Status.Status, s.Status.StatusDetail)
		}
		for k := 1; k <= want; k++ {
			if w := fmt.Sprintf("Attempt %d: Released by acc-flaky: machine %d of the session exploded.", k, k); !strings.Contains(s.Status.Reason, w) {
				t.Errorf("%s's reason %q does not say %q", id, s.Status.Reason, w)
			}
		}
		if w := fmt.Sprintf("after %d failed attempts (max_attempts %d)", want, want); !strings.Contains(s.Status.Reason, w) {
			t.Errorf("%s's reason %q does not say %q", id, s.Status.Reason, w)
		}
		evs, err := e.admin.Sessions.Events(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		releases, ends := 0, 0
		for _, ev := range evs.Items {
			switch ev.Type {
			case api.EventRelease:
				releases++
			case api.EventEnd:
				ends++
				if ev.Reason != s.Status.Reason {
					t.Errorf("end event reason %q, want the session's", ev.Reason)
				}
			}
		}
		if releases != want || ends != 1 {
			t.Errorf("%s's transcript has %d releases and %d ends, want %d and 1", id, releases, ends, want)
		}
		// Listed as ended for the server's retention, never claimable.
		if qe, err := e.admin.Queue.Get(ctx, id); err != nil || qe.Status.Phase != api.PhasePending || qe.Status.AcceptorID != nil ||
			qe.Status.SessionStatus != api.QueueSessionTerminated {
			t.Errorf("%s's queue entry after its end: %+v, %v; want it pending, unclaimed and terminated", id, qe, err)
		}
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("Run = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if runs[outpostLimit] != 2 || runs[own.Metadata.SessionID] != 3 {
		t.Errorf("runs %v, want 2 (the outpost's max_attempts) and 3 (the session's)", runs)
	}
}

// TestShutdownIsNoAttempt: a consumer that stops while serving a session
// gives it back with its reason, and that spends none of its attempts.
func TestShutdownIsNoAttempt(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{})
	ctx, cancel := testContext(t)
	id := e.session(ctx)
	running := make(chan struct{})
	r := runnerFunc(func(ctx context.Context, s *Session) Outcome {
		close(running)
		<-s.Stopping()
		return Stopped(errors.New("the test's consumer is stopping"))
	})
	done := start(t, ctx, e.consumer("acc-stop", 1, r))
	receive(t, ctx, "the runner to start", running)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	q, err := e.admin.Queue.Get(context.Background(), id)
	if err != nil || q.Status.Phase != api.PhasePending || q.Status.Attempts != 0 {
		t.Fatalf("entry %+v, %v: want it pending with no attempt spent", q, err)
	}
	s, err := e.admin.Sessions.Get(context.Background(), id)
	if err != nil || !strings.Contains(s.Status.Reason, "the test's consumer is stopping") {
		t.Fatalf("session %+v, %v: want the release's reason on it", s, err)
	}
}
