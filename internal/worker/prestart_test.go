//go:build unix

package worker

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/fleet"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// fakePrestarted is a shell remote that waits for its session as `outpost
// remote serve --session-from-stdin` does: it appends its pid to marks
// when it starts, says "ready" on its stdin socket, reads KEY=VALUE lines until EOF, then leaves its
// environment in $OUTPOST_STATE_DIR/env.txt and its pid in …/served, and
// both in the data dir too (<id>.env.txt, <id>.served), where they outlive
// the session. It exits 0 at once when nothing was handed over.
func fakePrestarted(marks string) []string {
	return []string{"sh", "-c", `echo $$ >> '` + marks + `'
echo ready >&0
got=
while IFS= read -r kv; do export "$kv"; got=1; done
[ -n "$got" ] || exit 0
env > "$OUTPOST_STATE_DIR/env.txt"
echo $$ > "$OUTPOST_STATE_DIR/served"
cp "$OUTPOST_STATE_DIR/env.txt" "$OUTPOST_STATE_DIR/../../$OUTPOST_SESSION_ID.env.txt"
cp "$OUTPOST_STATE_DIR/served" "$OUTPOST_STATE_DIR/../../$OUTPOST_SESSION_ID.served"`}
}

// marksOf reads the pids a fake pre-started remote appended.
func marksOf(path string) []int {
	b, _ := os.ReadFile(path)
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}

func prestartDirs(t *testing.T, dataDir string) []string {
	t.Helper()
	d, err := filepath.Glob(filepath.Join(dataDir, "sessions", prestartPrefix+"*"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestPrestartedRemoteServesSession: a worker's first session runs in the
// remote it started before the claim, which gets the session's spawn
// variables with its state dir renamed into place and nothing of the
// worker's environment; at the end no pre-started remote or state dir is
// left.
func TestPrestartedRemoteServesSession(t *testing.T) {
	requireUnix(t)
	t.Setenv("OUTPOST_TOKEN", "do-not-leak")
	fs, c := newFakeServer(t, HostPlatform())
	fs.add(pendingEntry("sess-1"))
	ctx, _ := testContext(t)
	dataDir, dir := t.TempDir(), t.TempDir()
	marks := filepath.Join(t.TempDir(), "marks")
	opts := Options{Client: c, Outpost: "dev", DataDir: dataDir, Dir: dir, Once: true, Logger: testLogger(t),
		RemoteCommand:   []string{"sh", "-c", `echo $$ > "$OUTPOST_STATE_DIR/served-at-claim"`},
		PrestartCommand: fakePrestarted(marks)}
	if err := Run(ctx, opts); err != nil {
		t.Fatalf("Run = %v", err)
	}
	stateDir := filepath.Join(dataDir, "sessions", "sess-1")
	served, err := os.ReadFile(filepath.Join(dataDir, "sess-1.served"))
	if err != nil {
		t.Fatalf("the session was not served by the pre-started remote: %v", err)
	}
	if pids := marksOf(marks); len(pids) != 1 || strings.TrimSpace(string(served)) != strconv.Itoa(pids[0]) {
		t.Errorf("served by pid %s, pre-started %v: want the one pre-started remote (Once starts no other)", served, pids)
	}
	env, err := os.ReadFile(filepath.Join(dataDir, "sess-1.env.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"OUTPOST_CONNECT_TOKEN=ct-1\n", "OUTPOST_SESSION_ID=sess-1\n",
		"OUTPOST_GATEWAY_URL=ws://gateway.test/v1/gateway\n", "OUTPOST_STATE_DIR=" + stateDir + "\n"} {
		if !strings.Contains(string(env), want) {
			t.Errorf("pre-started remote's env lacks %q:\n%s", want, env)
		}
	}
	if strings.Contains(string(env), "do-not-leak") || strings.Contains(string(env), "worker-secret-token") {
		t.Errorf("pre-started remote's env leaks the worker's environment:\n%s", env)
	}
	if _, err := os.Lstat(stateDir); !os.IsNotExist(err) {
		t.Errorf("the ended session's state dir is still there: %v", err)
	}
	if d := prestartDirs(t, dataDir); len(d) != 0 {
		t.Errorf("pre-start state dirs left: %q", d)
	}
	if claims, releases := fs.snapshot(); len(claims) != 1 || len(releases) != 1 {
		t.Errorf("claims %q, releases %q", claims, releases)
	}
}

// newTestPrestarter is a prestarter of a worker without isolation whose
// sessions would run self.
func newTestPrestarter(t *testing.T, command, self []string) (*prestarter, string) {
	t.Helper()
	dataDir := t.TempDir()
	w := &worker{opts: Options{DataDir: dataDir, Dir: t.TempDir(), GracePeriod: time.Second}, log: testLogger(t)}
	ps := newPrestarter(w, command, self)
	t.Cleanup(ps.close)
	return ps, dataDir
}

func claimEnv(id, stateDir string) []string {
	return []string{"OUTPOST_CONNECT_TOKEN=ct-" + id, "OUTPOST_GATEWAY_URL=ws://gateway.test/v1/gateway",
		"OUTPOST_SESSION_ID=" + id, "OUTPOST_STATE_DIR=" + stateDir}
}

// spawnEnv is a session's remote environment as a worker's consumer gives
// it (fleet.Session.Env).
func spawnEnv(id string) func(stateDir string) []string {
	claim := pendingEntry(id)
	claim.Status.GatewayURL, claim.Status.ConnectToken = "ws://gateway.test/v1/gateway", "ct-"+id
	return func(stateDir string) []string { return fleet.SpawnEnv(claim, stateDir, os.LookupEnv) }
}

// TestPrestartReplacesDeadRemote: a pre-started remote that dies while it
// waits is replaced, and the replacement serves the next session.
func TestPrestartReplacesDeadRemote(t *testing.T) {
	requireUnix(t)
	ctx, _ := testContext(t)
	marks := filepath.Join(t.TempDir(), "marks")
	self := []string{"remote-of-this-build"}
	ps, dataDir := newTestPrestarter(t, fakePrestarted(marks), self)
	ps.fill()
	waitfor.Until(ctx, t, "the first pre-started remote", func() bool { return len(marksOf(marks)) == 1 })
	first := marksOf(marks)[0]
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(ctx, t, "a replacement", func() bool { return len(marksOf(marks)) == 2 })
	second := marksOf(marks)[1]

	stateDir := filepath.Join(dataDir, "sessions", "sess-9")
	env := spawnEnv("sess-9")
	p := ps.take(self, "sess-9", stateDir, env)
	if p == nil {
		t.Fatal("take = nil, want the replacement")
	}
	if p.cmd.Process.Pid != second {
		t.Errorf("took pid %d, want the replacement %d", p.cmd.Process.Pid, second)
	}
	if err := <-p.exited; err != nil {
		t.Fatalf("the pre-started remote exited with %v", err)
	}
	p.logFile.Close()
	b, err := os.ReadFile(filepath.Join(stateDir, "env.txt"))
	if err != nil || !strings.Contains(string(b), "OUTPOST_STATE_DIR="+stateDir+"\n") || !strings.Contains(string(b), "OUTPOST_CONNECT_TOKEN=ct-sess-9\n") {
		t.Errorf("env.txt = %q, %v", b, err)
	}
	if d := prestartDirs(t, dataDir); len(d) != 0 {
		t.Errorf("state dirs left by the dead and the taken pre-started remote: %q", d)
	}
}

// TestPrestartOnlyWhenItFits: a session that runs another build (a pin)
// or whose state dir exists (a restarted session's journal) gets no
// pre-started remote, which waits on for a later one; closing the
// prestarter stops it and removes its state dir.
func TestPrestartOnlyWhenItFits(t *testing.T) {
	requireUnix(t)
	ctx, _ := testContext(t)
	marks := filepath.Join(t.TempDir(), "marks")
	self := []string{"remote-of-this-build"}
	ps, dataDir := newTestPrestarter(t, fakePrestarted(marks), self)
	ps.fill()
	waitfor.Until(ctx, t, "the pre-started remote", func() bool { return len(marksOf(marks)) == 1 })

	stateDir := filepath.Join(dataDir, "sessions", "sess-1")
	env := spawnEnv("sess-1")
	if p := ps.take([]string{"/cache/devin-remote_abc", "serve"}, "sess-1", stateDir, env); p != nil {
		t.Fatal("a pinned build was handed the pre-started remote of this build")
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if p := ps.take(self, "sess-1", stateDir, env); p != nil {
		t.Fatal("a session with a state dir of its own was handed the pre-started remote")
	}
	ps.mu.Lock()
	cur := ps.cur
	ps.mu.Unlock()
	if cur == nil {
		t.Fatal("the pre-started remote was dropped, want it kept for a later session")
	}
	ps.close()
	select {
	case <-cur.p.dead:
	default:
		t.Error("close left the pre-started remote running")
	}
	if d := prestartDirs(t, dataDir); len(d) != 0 {
		t.Errorf("close left pre-start state dirs: %q", d)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "served")); err == nil {
		t.Error("the pre-started remote served a session it was not handed")
	}
}

// TestBaseEnvDropsSessionVars: what a pre-started remote starts with is a
// session's environment without the claim's variables.
func TestBaseEnvDropsSessionVars(t *testing.T) {
	t.Parallel()
	env := append(claimEnv("s", "/d"), "PATH=/bin", "HOME=/h", "OUTPOST_CA_FILE=/ca.pem")
	got := baseEnv(env)
	want := []string{"PATH=/bin", "HOME=/h", "OUTPOST_CA_FILE=/ca.pem"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("baseEnv = %q, want %q", got, want)
	}
}

// TestPrestartWaitsUntilReady: a session is handed over only once the
// pre-started remote said it waits (under bwrap its sandbox may still be
// binding the state dir that the hand-over renames).
func TestPrestartWaitsUntilReady(t *testing.T) {
	requireUnix(t)
	marks := filepath.Join(t.TempDir(), "marks")
	self := []string{"remote-of-this-build"}
	slow := []string{"sh", "-c", `sleep 0.3; echo ready >> '` + marks + `'; echo ready >&0
while IFS= read -r kv; do export "$kv"; done
echo $$ > "$OUTPOST_STATE_DIR/served"`}
	ps, dataDir := newTestPrestarter(t, slow, self)
	ps.fill()
	stateDir := filepath.Join(dataDir, "sessions", "sess-1")
	p := ps.take(self, "sess-1", stateDir, spawnEnv("sess-1"))
	if p == nil {
		t.Fatal("take = nil, want the remote that is still starting")
	}
	if b, _ := os.ReadFile(marks); string(b) != "ready\n" {
		t.Errorf("handed over before the remote was ready (marks %q)", b)
	}
	if err := <-p.exited; err != nil {
		t.Fatalf("remote exit: %v", err)
	}
	p.logFile.Close()
	if _, err := os.Stat(filepath.Join(stateDir, "served")); err != nil {
		t.Errorf("the session was not served: %v", err)
	}
}
