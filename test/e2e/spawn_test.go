//go:build linux

package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/worker"
)

// claimAs claims a session through the fleet API as a claimer outside
// Outpost would.
func claimAs(t *testing.T, c *cluster, id, token, acceptor string) api.QueueEntry {
	t.Helper()
	var e api.QueueEntry
	if code := c.api("POST", "/v1/queue/"+id+"/claim", token, api.ClaimRequest{AcceptorID: acceptor}, &e); code != 200 {
		t.Fatalf("claim %s: %d", id, code)
	}
	if e.Status.ConnectToken == "" || e.Status.GatewayURL == "" {
		t.Fatalf("claim answer without connect token or gateway URL: %+v", e.Status)
	}
	return e
}

// waitExit waits for p to exit by itself.
func waitExit(t *testing.T, p *proc, within time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(within):
		t.Fatalf("%s did not exit within %s:\n%s", p.name, within, p.out.String())
		return nil
	}
}

// sessionOutput is the output text of a session's transcript.
func sessionOutput(t *testing.T, c *cluster, id string) string {
	t.Helper()
	var b strings.Builder
	for _, ev := range c.events(id) {
		if ev.Type == api.EventOutput {
			b.WriteString(ev.Text)
		}
	}
	return b.String()
}

func requireFinished(t *testing.T, s api.Session) {
	t.Helper()
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
}

// TestRemoteServesWithPublicSpawnNames starts `outpost remote serve` the way
// software written for the public Outposts contract does: the claim's
// values under the DEVIN_* names only, with PATH and HOME. The remote serves
// the script to its end, exits 0, and the claimer releases.
func TestRemoteServesWithPublicSpawnNames(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "spawn")
	id := createSession(t, c, api.CreateSessionRequest{
		Outpost: "spawn", Title: "public spawn names",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			execStep(`pwd; echo "[${DEVIN_OUTPOST_CONNECT_TOKEN-unset}][${DEVIN_OUTPOST_GATEWAY_URL-unset}][${OUTPOST_CONNECT_TOKEN-unset}][$DEVIN_OUTPOST_SESSION_ID][$DEVIN_REMOTE_STATE_DIR]"`),
		}},
	})
	e := claimAs(t, c, id, token, "e2e-contract-claimer")

	workspace, stateDir := t.TempDir(), filepath.Join(t.TempDir(), "state")
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
		"DEVIN_OUTPOST_GATEWAY_URL=" + e.Status.GatewayURL,
		"DEVIN_OUTPOST_CONNECT_TOKEN=" + e.Status.ConnectToken,
		"DEVIN_OUTPOST_SESSION_ID=" + id,
		"DEVIN_REMOTE_STATE_DIR=" + stateDir,
	}
	r := startExact(t, "remote", env, workspace, "remote", "serve")
	if err := waitExit(t, r, 60*time.Second); err != nil {
		t.Fatalf("remote exit: %v\n%s", err, r.out.String())
	}
	requireFinished(t, c.waitFinal(id, 10*time.Second))
	if code := c.api("POST", "/v1/queue/"+id+"/release", token, api.ClaimRequest{AcceptorID: "e2e-contract-claimer"}, nil); code != 200 {
		t.Errorf("release after the remote exited: %d", code)
	}

	out := sessionOutput(t, c, id)
	// The agent's shell sees the session id and state dir, never the
	// connect token or gateway URL, and runs in the workspace.
	if want := fmt.Sprintf("%s\n[unset][unset][unset][%s][%s]\n", workspace, id, stateDir); !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "journal")); err != nil {
		t.Errorf("the remote did not keep its journal in DEVIN_REMOTE_STATE_DIR: %v", err)
	}
	if strings.Contains(r.out.String(), "no state dir set") {
		t.Errorf("the remote ignored DEVIN_REMOTE_STATE_DIR:\n%s", r.out.String())
	}
}

// TestWorkerPublicEnvNames runs a queue worker configured by the public
// names only: DEVIN_API_URL (an origin), DEVIN_OUTPOSTS_TOKEN and
// DEVIN_WORKER_ACCEPTOR_ID, with an empty HOME (no saved login).
func TestWorkerPublicEnvNames(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "public-env")
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
		"DEVIN_API_URL=" + c.url, "DEVIN_OUTPOSTS_TOKEN=" + token, "DEVIN_WORKER_ACCEPTOR_ID=public-acceptor",
	}
	w := startExact(t, "worker", env, t.TempDir(), "worker", "start", "--outpost", "public-env", "--once")
	id := createSession(t, c, api.CreateSessionRequest{
		Outpost: "public-env", Title: "public env names",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{execStep("echo served-by-public-names")}},
	})
	requireFinished(t, c.waitFinal(id, 60*time.Second))
	if err := waitExit(t, w, 30*time.Second); err != nil {
		t.Fatalf("worker --once exit: %v", err)
	}
	if out := sessionOutput(t, c, id); !strings.Contains(out, "served-by-public-names") {
		t.Errorf("output: %q", out)
	}
	claimed := false
	for _, ev := range c.events(id) {
		claimed = claimed || ev.Type == api.EventClaim && ev.AcceptorID == "public-acceptor"
	}
	if !claimed {
		t.Errorf("no claim event names the acceptor DEVIN_WORKER_ACCEPTOR_ID gave")
	}
}

// recorder notes every request it forwards to the server (or, without a
// target, answers 500 to).
type recorder struct {
	mu       sync.Mutex // guards the fields below
	requests []string   // "METHOD /path"
	conns    int
}

func (rec *recorder) start(t *testing.T, target string) *httptest.Server {
	t.Helper()
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "this address must not be called", http.StatusInternalServerError)
	})
	if target != "" {
		u, err := url.Parse(target)
		if err != nil {
			t.Fatal(err)
		}
		h = httputil.NewSingleHostReverseProxy(u)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.requests = append(rec.requests, r.Method+" "+r.URL.Path)
		rec.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			rec.mu.Lock()
			rec.conns++
			rec.mu.Unlock()
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

func (rec *recorder) snapshot() ([]string, int) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]string(nil), rec.requests...), rec.conns
}

// procScan is a script step that looks through every /proc/*/environ and
// /proc/*/cmdline the session can read for the machine token, given in
// two halves so the step's own command line never holds it whole. As a
// check that the scan does see other processes, it also counts the
// remote's environment (the only one with this session's id and a connect
// token), and it counts DEVIN_REMOTE_SESSION_TOKEN, which only the
// direct-serve worker's environment holds.
func procScan(secret string) api.Step {
	half := len(secret) / 2
	return execStep(fmt.Sprintf(`a='%s'; b='%s'
printf '%%s%%s\n' "$a" "$b" > .needle-machine
printf 'OUTPOST_SESSION_ID=%%s\n' "$OUTPOST_SESSION_ID" > .needle-session
files=0; machine=0; remote=0; sessiontoken=0
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do
  ( tr '\0' '\n' < "$f" ) > .blob 2>/dev/null || continue
  files=$((files+1))
  if grep -qFf .needle-machine .blob; then machine=$((machine+1)); echo "machine token in $f"; fi
  if grep -qxFf .needle-session .blob && grep -q '^OUTPOST_CONNECT_TOKEN=' .blob; then remote=$((remote+1)); fi
  if grep -q '^DEVIN_REMOTE_SESSION_TOKEN=' .blob; then sessiontoken=$((sessiontoken+1)); fi
done
rm -f .needle-machine .needle-session .blob
echo "scan files=$files machine=$machine remote=$remote session_token=$sessiontoken"`, secret[:half], secret[half:]))
}

// TestWorkerDirectServe runs `outpost worker start --session ID` the way the
// Kubernetes operator's pods do: the test claims the session with a machine
// token, then starts the worker with only the claim's connect token and
// gateway URL (DEVIN_REMOTE_SESSION_TOKEN, DEVIN_OUTPOST_GATEWAY_URL), no
// account token in its environment or arguments and no saved login. The
// session runs to its end, the worker exits 0 and the test releases.
//
// Proof that the worker never calls the API: its gateway URL goes through a
// proxy that records every request (only the gateway's may appear: its
// WebSocket, and once the session's pin, which the worker asks with the
// connect token since this claimer passes none), and
// DEVIN_API_URL, the one variable beyond the operator's, points at an
// address that records every connection (without it the worker would have
// a default server the test cannot watch): none may reach it.
func TestWorkerDirectServe(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "direct")
	id := createSession(t, c, api.CreateSessionRequest{
		Outpost: "direct", Title: "direct-serve",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			procScan(token),
			execStep(`pwd; echo "[${DEVIN_REMOTE_SESSION_TOKEN-unset}][${OUTPOST_CONNECT_TOKEN-unset}][${DEVIN_OUTPOSTS_TOKEN-unset}][${OUTPOST_TOKEN-unset}]"`),
		}},
	})
	e := claimAs(t, c, id, token, "e2e-operator")

	var gwRec, apiRec recorder
	proxy := gwRec.start(t, c.url)
	noAPI := apiRec.start(t, "")
	gw := strings.Replace(e.Status.GatewayURL, c.url[len("http://"):], proxy.URL[len("http://"):], 1)
	if gw == e.Status.GatewayURL {
		t.Fatalf("gateway URL %q is not on the server's address %s", gw, c.url)
	}
	home, workspace := t.TempDir(), t.TempDir()
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home,
		"DEVIN_REMOTE_SESSION_TOKEN=" + e.Status.ConnectToken,
		"DEVIN_OUTPOST_GATEWAY_URL=" + gw,
		"DEVIN_API_URL=" + noAPI.URL,
	}
	w := startExact(t, "worker", env, workspace, "worker", "start", "--session", id)
	if err := waitExit(t, w, 90*time.Second); err != nil {
		t.Fatalf("worker exit: %v\n%s", err, w.out.String())
	}
	requireFinished(t, c.waitFinal(id, 10*time.Second))
	if code := c.api("POST", "/v1/queue/"+id+"/release", token, api.ClaimRequest{AcceptorID: "e2e-operator"}, nil); code != 200 {
		t.Errorf("release after the worker exited: %d", code)
	}

	out := sessionOutput(t, c, id)
	scan := ""
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "scan ") {
			scan = line
		}
	}
	var files, machine, remote, sessionToken int
	if _, err := fmt.Sscanf(scan, "scan files=%d machine=%d remote=%d session_token=%d", &files, &machine, &remote, &sessionToken); err != nil {
		t.Fatalf("no scan result (%v) in the output:\n%s", err, out)
	}
	t.Log(scan)
	if machine != 0 {
		t.Errorf("the machine token is readable from the session: %s\n%s", scan, out)
	}
	// The scan read the environment of processes of the session (the
	// remote's own is not readable: it is not dumpable).
	if files < 4 {
		t.Errorf("the scan read too few environments to prove anything: %s", scan)
	}
	// Root may read any process's environment; others cannot read the
	// worker's, which it marks not dumpable.
	if os.Geteuid() != 0 && sessionToken != 0 {
		t.Errorf("the worker's connect token variable is readable from the session: %s", scan)
	}
	if want := workspace + "\n[unset][unset][unset][unset]\n"; !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	// The remote's state dir was in the default data dir, and went with
	// the session.
	dataDir, _ := worker.WorkspaceDataDir(home, workspace)
	if fi, err := os.Stat(filepath.Join(dataDir, "sessions")); err != nil || !fi.IsDir() {
		t.Errorf("the remote's state dir was not in the default data dir: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dataDir, "sessions", id)); !os.IsNotExist(err) {
		t.Errorf("the ended session's state dir is still there: %v", err)
	}

	reqs, _ := gwRec.snapshot()
	t.Logf("requests through the gateway proxy: %q", reqs)
	if len(reqs) == 0 {
		t.Error("the remote did not go through the gateway proxy")
	}
	pinAsked := 0
	for _, r := range reqs {
		switch r {
		case "GET " + api.GatewayPath:
		case "GET " + api.GatewaySessionPath:
			pinAsked++
		default:
			t.Errorf("the worker or remote called %q on the server; only the gateway may be called", r)
		}
	}
	if pinAsked != 1 {
		t.Errorf("the worker asked for the session's pin %d times, want once", pinAsked)
	}
	if reqs, conns := apiRec.snapshot(); conns != 0 || len(reqs) != 0 {
		t.Errorf("the worker called the API URL: %d connections, requests %q", conns, reqs)
	}
	if strings.Contains(w.out.String(), token) {
		t.Error("the machine token appears in the worker's output")
	}
}
