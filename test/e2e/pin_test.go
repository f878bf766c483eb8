//go:build linux

package e2e

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/dist"
	"github.com/outpost-sh/outpost/internal/orchestrator/podmantest"
)

// distServer publishes a dist dir on a loopback URL of its own, not the
// API's, and counts the requests for each published name.
type distServer struct {
	url string

	mu   sync.Mutex
	hits map[string]int
}

func serveDist(t *testing.T, dir string) *distServer {
	t.Helper()
	h, err := dist.NewHandler(dist.HandlerOptions{Dir: dir, NoSelf: true})
	if err != nil {
		t.Fatal(err)
	}
	ds := &distServer{hits: map[string]int{}}
	mux := http.NewServeMux()
	mux.Handle("/builds/", http.StripPrefix("/builds/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ds.mu.Lock()
		ds.hits[r.URL.Path]++
		ds.mu.Unlock()
		h.ServeHTTP(w, r)
	})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ds.url = srv.URL + "/builds/"
	return ds
}

// downloads is how often the binary of build id was fetched.
func (ds *distServer) downloads(id string) int {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	return ds.hits[dist.BinaryName(id, dist.HostSuffix())]
}

// servedBy asserts that session s ended finished, served by a remote of
// version want (or, with want empty, not by the pinned build).
func servedBy(t *testing.T, s api.Session, want string) {
	t.Helper()
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session %s ended %s/%s: %s", s.Metadata.SessionID, s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	got := ""
	if s.Status.Capabilities != nil {
		got = s.Status.Capabilities.RemoteVersion
	}
	if want != "" && got != want || want == "" && (got == "" || got == pinnedVersion) {
		t.Errorf("session %s served by remote version %q, want %q", s.Metadata.SessionID, got, want)
	}
}

// TestDirectServePinnedBuild: a claimer that starts `worker start --session`
// with only the claim's connect token and gateway (direct-serve), the static
// base URL on another loopback server than the API and a cache dir: the
// worker learns the session's pin from the server, downloads that build
// from the static base URL, verifies and caches it, and it serves the
// session; a second session pinned to it (the pin passed by the claimer
// this time) downloads nothing; a build whose SHA-256 does not match its
// check line starts nothing, with an error naming the pin and the URL.
func TestDirectServePinnedBuild(t *testing.T) {
	t.Parallel()
	suffix := dist.HostSuffix()
	if suffix == "" {
		t.Skip("no distribution platform for this machine")
	}
	distDir, pinned := pinnedDistDir(t, suffix)
	ds := serveDist(t, distDir)
	c := startCluster(t) // its own /dist/ publishes only its own build
	token := pinnedOutpost(t, c, "direct", "")
	cache := filepath.Join(t.TempDir(), "worker", "cache")
	serve := func(id string, passPin bool) *proc {
		t.Helper()
		var e api.QueueEntry
		if code := c.api("POST", "/v1/queue/"+id+"/claim", token, api.ClaimRequest{AcceptorID: "pod-claimer"}, &e); code != 200 {
			t.Fatalf("claim %s: %d", id, code)
		}
		env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
			"DEVIN_REMOTE_SESSION_TOKEN=" + e.Status.ConnectToken, "DEVIN_OUTPOST_GATEWAY_URL=" + e.Status.GatewayURL,
			"DEVIN_WORKER_STATIC_BASE_URL=" + ds.url, "DEVIN_WORKER_CACHE_DIR=" + cache}
		if passPin && e.Spec.RemoteBinarySHA != nil {
			env = append(env, "DEVIN_WORKER_REMOTE_SHA="+*e.Spec.RemoteBinarySHA)
		}
		return startExact(t, "direct-serve "+id, env, t.TempDir(), "worker", "start", "--session", id)
	}
	waitExit := func(p *proc) {
		t.Helper()
		select {
		case <-p.done:
		case <-time.After(90 * time.Second):
			t.Fatalf("%s did not exit", p.name)
		}
	}

	id := createSession(t, c, echoSession("direct", pinnedID))
	p := serve(id, false)
	waitExit(p)
	if p.err != nil {
		t.Fatalf("%s: %v\n%s", p.name, p.err, p.out.String())
	}
	servedBy(t, c.waitFinal(id, 30*time.Second), pinnedVersion)
	if !strings.Contains(p.out.String(), "as the server says") {
		t.Errorf("the worker did not learn the pin from the server:\n%s", p.out.String())
	}
	if n := ds.downloads(pinnedID); n != 1 {
		t.Errorf("the pinned build was downloaded %d times, want 1", n)
	}
	cached, err := os.ReadFile(dist.CachedPath(cache, pinnedID, suffix))
	if err != nil || fileSHA(t, cached) != fileSHA(t, pinned) {
		t.Errorf("cached build: %v", err)
	}

	// The same cache: the build is verified again, not downloaded again.
	id = createSession(t, c, echoSession("direct", pinnedID))
	p = serve(id, true)
	waitExit(p)
	if p.err != nil {
		t.Fatalf("%s: %v\n%s", p.name, p.err, p.out.String())
	}
	servedBy(t, c.waitFinal(id, 30*time.Second), pinnedVersion)
	if n := ds.downloads(pinnedID); n != 1 {
		t.Errorf("the pinned build was downloaded %d times after the second session, want 1", n)
	}

	// A tampered build: the worker exits non-zero naming the pin and the
	// URL, and no remote ever connects.
	id = createSession(t, c, echoSession("direct", tamperedID))
	p = serve(id, false)
	waitExit(p)
	out := p.out.String()
	if p.err == nil {
		t.Errorf("the worker exited 0 after refusing the build:\n%s", out)
	}
	for _, want := range []string{tamperedID, ds.url + dist.BinaryName(tamperedID, suffix), "refusing to run it"} {
		if !strings.Contains(out, want) {
			t.Errorf("worker output does not say %q:\n%s", want, out)
		}
	}
	if s := c.session(id); s.Status.Capabilities != nil || api.IsFinal(s.Status.Status) {
		t.Errorf("a remote served the tampered session: %s, %+v", s.Status.Status, s.Status.Capabilities)
	}
	if _, err := os.Stat(dist.CachedPath(cache, tamperedID, suffix)); !os.IsNotExist(err) {
		t.Errorf("the tampered build is in the cache: %v", err)
	}
}

// TestOrchestratePinnedBuild: `outpost orchestrate` with --static-base-url
// on another loopback server than the API runs the build a session pins,
// with the process backend and with the exec backend (whose commands start
// "$OUTPOST_BIN" remote serve); an unpinned session runs the orchestrator's
// own build; a tampered build fails the provisioning with an error naming
// the pin and the URL.
func TestOrchestratePinnedBuild(t *testing.T) {
	t.Parallel()
	suffix := dist.HostSuffix()
	if suffix == "" {
		t.Skip("no distribution platform for this machine")
	}
	distDir, _ := pinnedDistDir(t, suffix)
	ds := serveDist(t, distDir)
	c := startCluster(t)

	procState := t.TempDir()
	startOrchestrator(t, c, "orch-process", pinnedOutpost(t, c, "orch-process", ""), procState,
		"--backend", "process", "--max-concurrent", "2", "--static-base-url", ds.url)
	execState := t.TempDir()
	startOrchestrator(t, c, "orch-exec", pinnedOutpost(t, c, "orch-exec", ""), execState,
		"--backend", "exec", "--static-base-url", ds.url,
		"--provision-cmd", `mkdir -p state work && cd work && { setsid "$OUTPOST_BIN" remote serve >../remote.log 2>&1 & echo $! > "$OUTPOST_WORKSPACE/pid"; }`,
		"--teardown-cmd", `pid=$(cat "$OUTPOST_WORKSPACE/pid") && [ "$(readlink /proc/$pid/cwd)" = "$OUTPOST_WORKSPACE/work" ] && kill -TERM -- "-$pid" "$pid" 2>/dev/null; true`,
		"--status-cmd", `pid=$(cat "$OUTPOST_WORKSPACE/pid") && [ "$(readlink /proc/$pid/cwd)" = "$OUTPOST_WORKSPACE/work" ]`)

	pinnedProc := createSession(t, c, echoSession("orch-process", pinnedID))
	plain := createSession(t, c, echoSession("orch-process", ""))
	pinnedExec := createSession(t, c, echoSession("orch-exec", pinnedID))
	servedBy(t, c.waitFinal(pinnedProc, 90*time.Second), pinnedVersion)
	servedBy(t, c.waitFinal(plain, 90*time.Second), "")
	servedBy(t, c.waitFinal(pinnedExec, 90*time.Second), pinnedVersion)
	for _, state := range []string{procState, execState} {
		if _, err := os.Stat(dist.CachedPath(filepath.Join(state, "cache"), pinnedID, suffix)); err != nil {
			t.Errorf("no cached build in %s: %v", state, err)
		}
	}
	if n := ds.downloads(pinnedID); n != 2 {
		t.Errorf("the pinned build was downloaded %d times, want once per orchestrator", n)
	}

	tampered := createSession(t, c, echoSession("orch-process", tamperedID))
	var failed api.Event
	for _, ev := range assertMachineSteps(t, c, tampered, api.MachineStepFailed) {
		if ev.Step == api.MachineStepFailed {
			failed = ev
		}
	}
	for _, want := range []string{tamperedID, ds.url + dist.BinaryName(tamperedID, suffix), "refusing to run it"} {
		if !strings.Contains(failed.Reason, want) {
			t.Errorf("the failed step does not say %q: %s", want, failed.Reason)
		}
	}
	if s := c.session(tampered); s.Status.Capabilities != nil {
		t.Errorf("a remote served the tampered session: %+v", s.Status.Capabilities)
	}
}

// TestOrchestrateSandboxPinnedBuild: the bwrap and docker backends run the
// build a session pins too (bound into the sandbox as devin-remote, mounted
// into the container as outpost), downloaded from --static-base-url.
func TestOrchestrateSandboxPinnedBuild(t *testing.T) {
	t.Parallel()
	suffix := dist.HostSuffix()
	if suffix == "" {
		t.Skip("no distribution platform for this machine")
	}
	distDir, _ := pinnedDistDir(t, suffix)
	ds := serveDist(t, distDir)
	c := startCluster(t)
	for _, tc := range []struct {
		backend string
		args    func(t *testing.T) []string
	}{
		{"bwrap", func(t *testing.T) []string { requireBwrap(t); return nil }},
		{"docker", func(t *testing.T) []string {
			return []string{"--docker-host", podmantest.API(t), "--docker-image", podmantest.Image, "--docker-network", "host"}
		}},
	} {
		t.Run(tc.backend, func(t *testing.T) {
			t.Parallel()
			outpost := "pin-" + tc.backend
			args := append([]string{"--backend", tc.backend, "--static-base-url", ds.url}, tc.args(t)...)
			startOrchestrator(t, c, outpost, pinnedOutpost(t, c, outpost, pinnedID), t.TempDir(), args...)
			servedBy(t, c.waitFinal(createSession(t, c, echoSession(outpost, "")), 120*time.Second), pinnedVersion)
		})
	}
}
