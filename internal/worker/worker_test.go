package worker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/outpost-sh/outpost/api"
)

const testTimeout = 20 * time.Second

func testContext(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx, cancel
}

// syncBuffer is a bytes.Buffer safe for the remote's writers and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func requireUnix(t *testing.T) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the fake remotes are shell commands")
	}
}

func TestPlatformMismatchRefused(t *testing.T) {
	t.Parallel()
	other := api.PlatformWindows
	if HostPlatform() == api.PlatformWindows {
		other = api.PlatformLinux
	}
	fs, c := newFakeServer(t, other)
	fs.add(pendingEntry("sess-1"))
	ctx, _ := testContext(t)
	err := Run(ctx, Options{Client: c, Outpost: "dev", DataDir: t.TempDir(), Dir: t.TempDir(), Logger: testLogger(t)})
	if !errors.Is(err, ErrPlatformMismatch) || !strings.Contains(err.Error(), other) {
		t.Fatalf("Run = %v, want a platform mismatch naming %s", err, other)
	}
	if claims, _ := fs.snapshot(); len(claims) != 0 {
		t.Errorf("claims = %q, want none", claims)
	}
}

func TestServesListedSessionWithCleanEnv(t *testing.T) {
	requireUnix(t)
	t.Setenv("OUTPOST_TOKEN", "do-not-leak")
	t.Setenv("SOME_OTHER_VAR", "do-not-leak")
	fs, c := newFakeServer(t, HostPlatform())
	fs.add(pendingEntry("sess-1"))
	ctx, _ := testContext(t)
	dataDir, dir := t.TempDir(), t.TempDir()
	var out syncBuffer

	opts := Options{Client: c, Outpost: "dev", DataDir: dataDir, Dir: dir, Once: true, Logger: testLogger(t), Stdout: &out,
		RemoteCommand: []string{"sh", "-c", `env > "$OUTPOST_STATE_DIR/../../env.txt"; pwd; echo oops >&2; printf partial`}}
	if err := Run(ctx, opts); err != nil {
		t.Fatalf("Run = %v", err)
	}
	claims, releases := fs.snapshot()
	if len(claims) != 1 || len(releases) != 1 || claims[0] != releases[0] || !strings.HasPrefix(claims[0], "sess-1 worker-") {
		t.Fatalf("claims %q, releases %q", claims, releases)
	}
	stateDir := filepath.Join(dataDir, "sessions", "sess-1")
	env, err := os.ReadFile(filepath.Join(dataDir, "env.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"OUTPOST_CONNECT_TOKEN=ct-1\n", "OUTPOST_SESSION_ID=sess-1\n",
		"OUTPOST_GATEWAY_URL=ws://gateway.test/v1/gateway\n", "OUTPOST_STATE_DIR=" + stateDir + "\n"} {
		if !strings.Contains(string(env), want) {
			t.Errorf("remote env lacks %q:\n%s", want, env)
		}
	}
	if strings.Contains(string(env), "do-not-leak") || strings.Contains(string(env), "worker-secret-token") {
		t.Errorf("remote env leaks the worker's environment:\n%s", env)
	}
	for _, want := range []string{"[sess-1] " + dir + "\n", "[sess-1] oops\n", "[sess-1] partial\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("worker stdout lacks %q:\n%s", want, out.String())
		}
	}
	if _, err := os.Lstat(stateDir); !os.IsNotExist(err) {
		t.Errorf("the ended session's state dir is still there: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "repos")); err != nil || !fi.IsDir() {
		t.Errorf("workspace repos dir: %v", err)
	}

	// A second run keeps the acceptor id and claims from the watch.
	ev := pendingEntry("sess-2")
	fs.mu.Lock()
	delete(fs.entries, "sess-1")
	fs.watchEvents = []api.WatchEvent{{Type: api.WatchModified, Object: *ev, Cursor: "c2"}}
	fs.mu.Unlock()
	opts.RemoteCommand = []string{"true"}
	if err := Run(ctx, opts); err != nil {
		t.Fatalf("second Run = %v", err)
	}
	claims, _ = fs.snapshot()
	if len(claims) != 2 || !strings.HasPrefix(claims[1], "sess-2 ") || claims[1][len("sess-2 "):] != claims[0][len("sess-1 "):] {
		t.Errorf("claims across runs = %q, want sess-2 claimed by the same acceptor", claims)
	}
}

func TestLostClaimKillsRemote(t *testing.T) {
	t.Parallel()
	requireUnix(t)
	fs, c := newFakeServer(t, HostPlatform())
	fs.ttl = 2 * time.Second // renew after a second
	fs.refuseRenewals = true
	fs.add(pendingEntry("sess-1"))
	ctx, _ := testContext(t)
	// The renewal comes on a fake clock the test advances.
	clk := clockwork.NewFakeClockAt(time.Now())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Client: c, Outpost: "op-1", SessionID: "sess-1", AcceptorID: "w-lost",
			DataDir: t.TempDir(), Dir: t.TempDir(), Logger: testLogger(t), Stdout: io.Discard, Clock: clk,
			RemoteCommand: []string{"sleep", "60"}})
	}()
	var err error
	advanceUntil(t, clk, 100*time.Millisecond, "return from Run", func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	if err == nil || !strings.Contains(err.Error(), "lost the claim") {
		t.Fatalf("Run = %v, want a lost claim", err)
	}
	if _, releases := fs.snapshot(); len(releases) != 0 {
		t.Errorf("released a claim it no longer held: %q", releases)
	}
}

func TestShutdownReleasesClaim(t *testing.T) {
	t.Parallel()
	requireUnix(t)
	fs, c := newFakeServer(t, HostPlatform())
	fs.statusAfterExit = api.QueueSessionRunning
	fs.add(pendingEntry("sess-1"))
	ctx, cancel := testContext(t)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Client: c, Outpost: "dev", AcceptorID: "w-stop", DataDir: t.TempDir(), Dir: t.TempDir(),
			GracePeriod: 50 * time.Millisecond, Logger: testLogger(t), Stdout: io.Discard,
			RemoteCommand: []string{"sleep", "60"}})
	}()
	select {
	case <-fs.claimed:
	case <-ctx.Done():
		t.Fatal("no claim")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel = %v, want a clean exit", err)
	}
	if _, releases := fs.snapshot(); !slices.Equal(releases, []string{"sess-1 w-stop"}) {
		t.Errorf("releases = %q, want the claim released despite the canceled context", releases)
	}
}
