package worker

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// TestRejectedRemoteKeepsClaim: a remote the gateway refused (exit
// api.RemoteExitRejected: another remote serves the session under the
// same claim) makes the worker leave the claim alone, where releasing it
// would take it from the process serving the session.
func TestRejectedRemoteKeepsClaim(t *testing.T) {
	t.Parallel()
	requireUnix(t)
	fs, c := newFakeServer(t, HostPlatform())
	fs.add(pendingEntry("sess-1"))
	ctx, _ := testContext(t)
	err := Run(ctx, Options{Client: c, Outpost: "dev", Once: true, AcceptorID: "w-dup",
		DataDir: t.TempDir(), Dir: t.TempDir(), Logger: testLogger(t), Stdout: io.Discard,
		RemoteCommand: []string{"sh", "-c", "echo 'error: gateway rejected the remote' >&2; exit 4"}})
	if err == nil || !strings.Contains(err.Error(), "refused the remote") {
		t.Fatalf("Run = %v, want the refusal", err)
	}
	claims, releases := fs.snapshot()
	if len(claims) != 1 || len(releases) != 0 {
		t.Errorf("claims %q, releases %q: want the claim left alone", claims, releases)
	}
}

// TestRemoteFailureReleases: any other failure of the remote still gives
// the claim back, so the session is served again at once.
func TestRemoteFailureReleases(t *testing.T) {
	t.Parallel()
	requireUnix(t)
	fs, c := newFakeServer(t, HostPlatform())
	fs.statusAfterExit = "running"
	fs.add(pendingEntry("sess-1"))
	ctx, _ := testContext(t)
	// The server still says running after the remote exits: the worker
	// waits its window for the status to change, on a fake clock the test
	// advances rather than for real.
	clk := clockwork.NewFakeClock()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Client: c, Outpost: "dev", Once: true, AcceptorID: "w-fail",
			DataDir: t.TempDir(), Dir: t.TempDir(), Logger: testLogger(t), Stdout: io.Discard, Clock: clk,
			RemoteCommand: []string{"sh", "-c", "exit 1"}})
	}()
	var err error
	advanceUntil(t, clk, time.Second, "return from Run", func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	if err == nil {
		t.Fatal("Run = nil, want the remote's failure")
	}
	if _, releases := fs.snapshot(); len(releases) != 1 {
		t.Errorf("releases %q, want the claim released", releases)
	}
}
