package worker

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// TestPresenceHeartbeatsAndGoodbye: the worker announces itself with its
// capabilities on start, says which session it serves while it serves it,
// and says goodbye when it stops.
func TestPresenceHeartbeatsAndGoodbye(t *testing.T) {
	t.Parallel()
	requireUnix(t)
	fs, c := newFakeServer(t, HostPlatform())
	fs.add(pendingEntry("sess-1"))
	ctx, cancel := testContext(t)
	done := make(chan error, 1)
	// The beats between the ones that changes send come from the fake
	// clock, which paces the worker's queue consumer too: the test
	// advances it rather than waiting for them.
	clk := clockwork.NewFakeClock()
	const every = time.Minute
	go func() {
		done <- Run(ctx, Options{Client: c, Outpost: "dev", AcceptorID: "w-presence", DataDir: t.TempDir(), Dir: t.TempDir(),
			HeartbeatInterval: every, Clock: clk, Logger: testLogger(t), Stdout: io.Discard,
			RemoteCommand: []string{"sleep", "0.5"}})
	}()
	waitHeartbeat := func(what string, cond func(api.WorkerInfo) bool) {
		t.Helper()
		waitfor.Within(t, 10*time.Second, "a heartbeat "+what, func() bool {
			hb, _ := fs.presence()
			return slices.ContainsFunc(hb, cond) // in arrival order
		})
	}
	waitHeartbeat("with capabilities", func(i api.WorkerInfo) bool {
		return i.Kind == api.WorkerKindWorker && i.Capabilities != nil && i.Capabilities.OS == runtime.GOOS &&
			i.Capabilities.Arch == runtime.GOARCH && i.Capabilities.Git != "" && i.MaxSessions == 1
	})
	waitHeartbeat("while serving", func(i api.WorkerInfo) bool { return i.SessionID == "sess-1" && i.ActiveSessions == 1 })
	serving := false
	waitHeartbeat("idle again after the session", func(i api.WorkerInfo) bool {
		if i.SessionID == "sess-1" {
			serving = true
		}
		return serving && i.SessionID == "" && i.ActiveSessions == 0
	})
	// Idle, the worker beats once an interval: advancing the clock an
	// interval at a time sends the next beat.
	for i := range 2 {
		n := len(mustHeartbeats(fs))
		advanceUntil(t, clk, every, fmt.Sprintf("heartbeat %d an interval later", i+1), func() bool { return len(mustHeartbeats(fs)) > n })
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if _, goodbyes := fs.presence(); !slices.Equal(goodbyes, []string{"op-1 w-presence"}) {
		t.Errorf("goodbyes = %q, want one for op-1 w-presence", goodbyes)
	}
}

// advanceUntil advances clk by step until cond holds, polling for 10s;
// each step fires whatever waits on clk (heartbeats, polls, renewals,
// retries), so cond need not know which comes first.
func advanceUntil(t *testing.T, clk *clockwork.FakeClock, step time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10s", what)
		}
		clk.Advance(step)
		time.Sleep(5 * time.Millisecond)
	}
}

func mustHeartbeats(fs *fakeServer) []api.WorkerInfo {
	hb, _ := fs.presence()
	return hb
}

// TestHeartbeatFailureNeverStopsTheWorker: with every heartbeat refused,
// the worker still serves its session.
func TestHeartbeatFailureNeverStopsTheWorker(t *testing.T) {
	t.Parallel()
	requireUnix(t)
	fs, c := newFakeServer(t, HostPlatform())
	fs.failHeartbeats = true
	fs.add(pendingEntry("sess-1"))
	ctx, _ := testContext(t)
	err := Run(ctx, Options{Client: c, Outpost: "dev", Once: true, AcceptorID: "w-fail", DataDir: t.TempDir(), Dir: t.TempDir(),
		HeartbeatInterval: 20 * time.Millisecond, Logger: testLogger(t), Stdout: io.Discard,
		RemoteCommand: []string{"sleep", "0.3"}})
	if err != nil {
		t.Fatalf("Run = %v, want the session served despite failing heartbeats", err)
	}
	if claims, releases := fs.snapshot(); len(claims) != 1 || len(releases) != 1 {
		t.Errorf("claims %q, releases %q", claims, releases)
	}
}
