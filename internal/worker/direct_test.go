package worker

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/waitfor"
)

// directOptions are the options of a direct-serve run with remote as its
// remote: no Client at all.
func directOptions(t *testing.T, remote string) Options {
	return Options{SessionID: "sess-d", ConnectToken: "ct-direct", GatewayURL: newGatewayServer(t, "").gatewayURL(),
		DataDir: t.TempDir(), Dir: t.TempDir(), Logger: testLogger(t), Stdout: io.Discard,
		RemoteCommand: []string{"sh", "-c", remote}}
}

// TestServeDirect serves a session claimed elsewhere without a client: the
// remote runs under the spawn contract in the workspace with the state dir
// DataDir/sessions/<id>, its output passes through, and its exit code
// decides the result.
func TestServeDirect(t *testing.T) {
	t.Parallel()
	requireUnix(t)
	ctx, _ := testContext(t)
	var out syncBuffer
	opts := directOptions(t, `env > "$OUTPOST_STATE_DIR/../../env.txt"; pwd; echo served`)
	opts.Stdout = &out
	if err := Run(ctx, opts); err != nil {
		t.Fatalf("Run = %v", err)
	}
	stateDir := filepath.Join(opts.DataDir, "sessions", "sess-d")
	env, err := os.ReadFile(filepath.Join(opts.DataDir, "env.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"OUTPOST_CONNECT_TOKEN=ct-direct\n", "OUTPOST_SESSION_ID=sess-d\n",
		"OUTPOST_GATEWAY_URL=" + opts.GatewayURL + "\n", "OUTPOST_STATE_DIR=" + stateDir + "\n"} {
		if !strings.Contains(string(env), want) {
			t.Errorf("remote env lacks %q:\n%s", want, env)
		}
	}
	for _, want := range []string{"[sess-d] " + opts.Dir + "\n", "[sess-d] served\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("worker stdout lacks %q:\n%s", want, out.String())
		}
	}

	if _, err := os.Lstat(stateDir); !os.IsNotExist(err) {
		t.Errorf("the ended session's state dir is still there: %v", err)
	}

	// A remote that fails leaves the session to run again: its state dir
	// keeps the journal and remote.log, which the error names, and
	// nothing else.
	opts = directOptions(t, `cd "$OUTPOST_STATE_DIR" && mkdir -p journal tmp home && echo j > journal/journal.log &&
echo tok > git-credentials && echo t > tmp/t && echo broken >&2; exit 3`)
	err = Run(ctx, opts)
	stateDir = filepath.Join(opts.DataDir, "sessions", "sess-d")
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "before the session ended") ||
		!strings.Contains(err.Error(), filepath.Join(stateDir, "remote.log")) {
		t.Fatalf("Run with a failing remote = %v", err)
	}
	if got := stateDirFiles(t, stateDir); got != "journal/journal.log remote.log" {
		t.Errorf("the failed remote's state dir holds %q, want the journal and remote.log only", got)
	}
	if logged, _ := os.ReadFile(filepath.Join(stateDir, remoteLogName)); !strings.Contains(string(logged), "broken\n") {
		t.Errorf("remote.log = %q", logged)
	}
}

// stateDirFiles lists the files (not directories) under dir, by their
// paths relative to it, sorted and space-separated.
func stateDirFiles(t *testing.T, dir string) string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	return strings.Join(files, " ")
}

// TestServeDirectNeedsClaim: without the session, token or gateway the
// error says which, before anything starts.
func TestServeDirectNeedsClaim(t *testing.T) {
	t.Parallel()
	ctx, _ := testContext(t)
	opts := directOptions(t, `touch "$OUTPOST_STATE_DIR/started"`)
	opts.GatewayURL, opts.SessionID = "", ""
	err := ServeDirect(ctx, opts)
	if err == nil || !strings.Contains(err.Error(), "session id (--session)") || !strings.Contains(err.Error(), "DEVIN_OUTPOST_GATEWAY_URL") ||
		strings.Contains(err.Error(), "connect token") {
		t.Fatalf("ServeDirect = %v", err)
	}
	if entries, _ := os.ReadDir(opts.DataDir); len(entries) != 0 {
		t.Errorf("data dir has %d entries, want none", len(entries))
	}
}

// TestServeDirectShutdown: when ctx ends the remote gets the grace period,
// then SIGTERM. One that exits 0 on it makes a clean exit; one killed by it
// is an error saying the session did not end.
func TestServeDirectShutdown(t *testing.T) {
	t.Parallel()
	requireUnix(t)
	for _, tc := range []struct {
		name, remote, errHas string
	}{
		{"remote exits 0", `trap 'echo got-term; exit 0' TERM; echo ready; while :; do sleep 0.05; done`, ""},
		{"remote killed", `echo ready; exec sleep 60`, "stopped the remote of session sess-d before the session ended (signal: terminated)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := testContext(t)
			var out syncBuffer
			opts := directOptions(t, tc.remote)
			opts.Stdout, opts.GracePeriod = &out, 100*time.Millisecond
			done := make(chan error, 1)
			go func() { done <- ServeDirect(ctx, opts) }()
			wctx, wcancel := context.WithTimeout(ctx, testTimeout/2)
			defer wcancel()
			if !waitfor.Poll(wctx, func() bool { return strings.Contains(out.String(), "ready") }) {
				t.Fatalf("the remote did not start; output: %q", out.String())
			}
			start := time.Now()
			cancel()
			err := <-done
			if took := time.Since(start); took < opts.GracePeriod {
				t.Errorf("stopped after %s, before the grace period", took)
			}
			switch {
			case tc.errHas == "" && err != nil:
				t.Fatalf("ServeDirect = %v, want a clean exit", err)
			case tc.errHas == "" && !strings.Contains(out.String(), "got-term"):
				t.Errorf("the remote got no SIGTERM: %q", out.String())
			case tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)):
				t.Fatalf("ServeDirect = %v, want %q", err, tc.errHas)
			}
		})
	}
}

// TestGatewayURLFallback: a claim answer without a gateway URL gets
// Options.GatewayURL.
func TestGatewayURLFallback(t *testing.T) {
	t.Parallel()
	requireUnix(t)
	fs, c := newFakeServer(t, HostPlatform())
	fs.noGatewayURL = true
	fs.add(pendingEntry("sess-1"))
	ctx, _ := testContext(t)
	dataDir := t.TempDir()
	err := Run(ctx, Options{Client: c, Outpost: "dev", SessionID: "sess-1", GatewayURL: "wss://fallback.test/v1/gateway",
		DataDir: dataDir, Dir: t.TempDir(), Logger: testLogger(t), Stdout: io.Discard,
		RemoteCommand: []string{"sh", "-c", `echo "$OUTPOST_GATEWAY_URL" > "$OUTPOST_STATE_DIR/../../gw"`}})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if gw, _ := os.ReadFile(filepath.Join(dataDir, "gw")); string(gw) != "wss://fallback.test/v1/gateway\n" {
		t.Errorf("remote's gateway URL = %q", gw)
	}
}
