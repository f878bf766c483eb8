//go:build linux

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// The claimers in this file are written against the public Outposts
// contract only — its paths, JSON fields, environment names and binary
// layout — as the public Kubernetes operator and sandbox orchestrators are.
// They import nothing of Outpost's but for the tests' assertions, and they
// are configured with nothing but the server's URL and a token.

// contractEntry is a queue entry as the public contract spells it.
type contractEntry struct {
	Metadata struct {
		SessionID string `json:"session_id"`
		OutpostID string `json:"outpost_id"`
		// CreatedAt and UpdatedAt are Unix seconds, as every timestamp.
		CreatedAt int64 `json:"created_at"`
		UpdatedAt int64 `json:"updated_at"`
	} `json:"metadata"`
	Spec struct {
		Kind            string  `json:"kind"`
		Platform        string  `json:"platform"`
		RemoteBinarySHA *string `json:"remote_binary_sha"`
	} `json:"spec"`
	Status struct {
		Phase         string  `json:"phase"`
		AcceptorID    *string `json:"acceptor_id"`
		ClaimDeadline *int64  `json:"claim_deadline"`
		SessionStatus string  `json:"session_status"`
		ConnectToken  string  `json:"connect_token"`
		GatewayURL    string  `json:"gateway_url"`
	} `json:"status"`
}

// contractClient speaks the public fleet API under /opbeta/outposts.
type contractClient struct {
	t     *testing.T
	api   string // the origin, as DEVIN_API_URL
	token string
}

// do sends a request and decodes a 2xx JSON answer into out; it returns
// the status code.
func (c *contractClient) do(method, path string, body, out any) int {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.api+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 == 2 && out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			c.t.Fatalf("%s %s: %v in %s", method, path, err, raw)
		}
	}
	return resp.StatusCode
}

// entries lists the outpost's queue, following the cursor until
// has_next_page is false, later pages winning.
func (c *contractClient) entries(outpost, phase string) []contractEntry {
	c.t.Helper()
	out, _ := c.entriesCursor(outpost, phase)
	return out
}

// entriesCursor is entries, also returning the last page's cursor: where a
// watch of the changes after the list starts.
func (c *contractClient) entriesCursor(outpost, phase string) ([]contractEntry, string) {
	c.t.Helper()
	q := url.Values{"outpost": {outpost}}
	if phase != "" {
		q.Set("phase", phase)
	}
	seen := map[string]int{}
	var out []contractEntry
	for {
		var page struct {
			Items       []contractEntry `json:"items"`
			Cursor      string          `json:"cursor"`
			HasNextPage bool            `json:"has_next_page"`
		}
		if code := c.do("GET", "/opbeta/outposts/devins?"+q.Encode(), nil, &page); code != 200 {
			c.t.Fatalf("list queue: %d", code)
		}
		for _, e := range page.Items {
			if i, ok := seen[e.Metadata.SessionID]; ok {
				out[i] = e
				continue
			}
			seen[e.Metadata.SessionID] = len(out)
			out = append(out, e)
		}
		if !page.HasNextPage {
			return out, page.Cursor
		}
		q.Set("cursor", page.Cursor)
	}
}

// claimable is the public orchestrators' filter: pending, and neither
// suspended nor terminated.
func claimable(e contractEntry) bool {
	return e.Status.Phase == "pending" && e.Status.SessionStatus != "suspended" && e.Status.SessionStatus != "terminated" &&
		(e.Spec.Platform == "" || e.Spec.Platform == "linux")
}

// fetchRemote downloads the remote the entry pins (or the latest) from the
// static base URL and checks it as the contract says: the .sha256 check
// line, verified with sha256sum -c after saving the binary as
// devin-remote. It returns the path of the executable.
func fetchRemote(t *testing.T, staticBase, pin, dir string) string {
	t.Helper()
	get := func(name string) []byte {
		t.Helper()
		resp, err := http.Get(staticBase + name)
		if err != nil {
			t.Fatalf("GET %s: %v", name, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s%s: %d %s", staticBase, name, resp.StatusCode, b)
		}
		return b
	}
	sha := pin
	if sha == "" {
		sha = strings.TrimSpace(string(get("latest_linux_x64")))
	}
	if !regexp.MustCompile(`^[0-9a-f]{6,40}$`).MatchString(sha) {
		t.Fatalf("remote version %q is not a short git sha", sha)
	}
	bin := filepath.Join(dir, "bin-"+sha)
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(bin, "devin-remote")
	if _, err := os.Stat(exe); err == nil {
		return exe
	}
	name := "devin-remote_" + sha + "_linux_x64"
	if err := os.WriteFile(exe, get(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe+".sha256", get(name+".sha256"), 0o644); err != nil {
		t.Fatal(err)
	}
	check := exec.Command("sha256sum", "-c", "devin-remote.sha256")
	check.Dir = bin
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("sha256sum -c: %v\n%s", err, out)
	}
	return exe
}

// sandboxClaimer is the sandbox-platform orchestrator: it polls for
// pending sessions, claims each once and never renews, downloads the
// remote from the static distribution, runs `devin-remote serve` under the
// spawn contract's DEVIN_* names in a clean environment, and when the remote
// exits re-reads session_status until it is terminated, then releases.
type sandboxClaimer struct {
	c          *contractClient
	outpost    string
	acceptor   string
	staticBase string
	dir        string
	// gateway, when set, rewrites the claim's gateway URL (to route the
	// remote through a proxy).
	gateway func(string) string

	mu       sync.Mutex
	releases map[string]int // session -> release status code
	exits    map[string]error
}

func (s *sandboxClaimer) serveOne(t *testing.T, e contractEntry) {
	id := e.Metadata.SessionID
	var claimed contractEntry
	if code := s.c.do("POST", "/opbeta/outposts/devins/"+id+"/claim", map[string]string{"acceptor_id": s.acceptor}, &claimed); code != 200 {
		return // 409: someone else won
	}
	if claimed.Status.ConnectToken == "" || claimed.Status.GatewayURL == "" {
		t.Errorf("claim of %s has no connect_token or gateway_url", id)
		return
	}
	pin := ""
	if claimed.Spec.RemoteBinarySHA != nil {
		pin = *claimed.Spec.RemoteBinarySHA
	}
	exe := fetchRemote(t, s.staticBase, pin, s.dir)
	work := filepath.Join(s.dir, "sandbox-"+id)
	state := filepath.Join(s.dir, "state-"+id)
	for _, d := range []string{work, state} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Error(err)
			return
		}
	}
	gateway := claimed.Status.GatewayURL
	if s.gateway != nil {
		gateway = s.gateway(gateway)
	}
	cmd := exec.Command(exe, "serve")
	cmd.Dir = work
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + work, "LANG=C.UTF-8",
		"DEVIN_OUTPOST_GATEWAY_URL=" + gateway,
		"DEVIN_OUTPOST_CONNECT_TOKEN=" + claimed.Status.ConnectToken,
		"DEVIN_OUTPOST_SESSION_ID=" + id,
		"DEVIN_REMOTE_STATE_DIR=" + state,
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		t.Logf("remote of %s: %v\n%s", id, err, out.String())
	}
	// A clean exit is the session's end: read session_status a few times.
	for range 10 {
		var cur contractEntry
		code := s.c.do("GET", "/opbeta/outposts/devins/"+id, nil, &cur)
		if code == 404 || cur.Status.SessionStatus == "terminated" || cur.Status.SessionStatus == "suspended" {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	code := s.c.do("POST", "/opbeta/outposts/devins/"+id+"/release", map[string]string{"acceptor_id": s.acceptor}, nil)
	s.mu.Lock()
	s.releases[id], s.exits[id] = code, err
	s.mu.Unlock()
}

// run polls until n sessions were served. Like the public sandbox
// orchestrators it fetches the latest remote first, so that a claim's
// short deadline is spent starting the remote, not downloading it.
func (s *sandboxClaimer) run(t *testing.T, n int, within time.Duration) {
	fetchRemote(t, s.staticBase, "", s.dir)
	var wg sync.WaitGroup
	started := map[string]bool{}
	deadline := time.Now().Add(within)
	for len(started) < n && time.Now().Before(deadline) {
		for _, e := range s.c.entries(s.outpost, "pending") {
			if !claimable(e) || started[e.Metadata.SessionID] {
				continue
			}
			started[e.Metadata.SessionID] = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.serveOne(t, e)
			}()
		}
		time.Sleep(200 * time.Millisecond)
	}
	wg.Wait()
}

// longSessions creates n script sessions of steps one-second steps each.
func longSessions(t *testing.T, c *cluster, outpost string, n, steps int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		var st []api.Step
		for j := range steps {
			st = append(st, execStep(fmt.Sprintf("sleep 1; echo step %d of session %d", j+1, i+1)))
		}
		ids = append(ids, createSession(t, c, api.CreateSessionRequest{
			Outpost: outpost, Title: fmt.Sprintf("long %d", i+1),
			Agent: api.Agent{Kind: api.AgentScript, Steps: st},
		}))
	}
	return ids
}

// assertServedOnce checks that each session ended exit/finished, was
// claimed once by acceptor, never lapsed or moved, and ran each call once.
func assertServedOnce(t *testing.T, c *cluster, ids []string, acceptor string, steps int) {
	t.Helper()
	for _, id := range ids {
		s := c.waitFinal(id, 60*time.Second)
		if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
			t.Errorf("session %s ended %s/%s: %s", id, s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
		}
		claims, results := 0, 0
		for _, ev := range c.events(id) {
			switch ev.Type {
			case api.EventClaim:
				claims++
				if ev.AcceptorID != acceptor {
					t.Errorf("session %s claimed by %s", id, ev.AcceptorID)
				}
			case api.EventRelease:
				if !strings.HasPrefix(ev.Reason, "Released by "+acceptor) {
					t.Errorf("session %s: the claim lapsed or moved mid-session: %s", id, ev.Reason)
				}
			case api.EventResume:
				t.Errorf("session %s resumed: %s", id, ev.Reason)
			case api.EventResult:
				results++
			}
		}
		if claims != 1 || results != steps {
			t.Errorf("session %s: %d claims and %d results, want 1 and %d", id, claims, results, steps)
		}
	}
}

// TestSandboxStyleClaimerNeverRenews runs sessions many claim TTLs long
// through a claimer that claims once and never renews, spawning
// devin-remote from the server's distribution with the DEVIN_* names.
func TestSandboxStyleClaimerNeverRenews(t *testing.T) {
	t.Parallel()
	// Each session runs four claim TTLs or more. The TTL is also the time
	// a claimed session's remote has to connect, which on a loaded machine
	// (the remote's start, under the race detector) can take seconds.
	const ttl, steps = 5, 20
	c := startCluster(t, "--claim-ttl", fmt.Sprintf("%ds", ttl))
	token := setupOutpost(t, c, "sandbox")
	ids := longSessions(t, c, "sandbox", 3, steps)
	var o struct {
		Metadata struct {
			OutpostID string `json:"outpost_id"`
		} `json:"metadata"`
	}
	cc := &contractClient{t: t, api: c.url, token: token}
	if code := cc.do("GET", "/opbeta/outposts/outposts/sandbox", nil, &o); code != 200 {
		t.Fatalf("get outpost: %d", code)
	}
	s := &sandboxClaimer{c: cc, outpost: o.Metadata.OutpostID, acceptor: "vercel-sandbox-e2e", staticBase: c.url + "/dist/",
		dir: t.TempDir(), releases: map[string]int{}, exits: map[string]error{}}
	s.run(t, len(ids), 30*time.Second)
	assertServedOnce(t, c, ids, s.acceptor, steps)
	for _, id := range ids {
		if s.exits[id] != nil {
			t.Errorf("remote of %s exited %v, want 0", id, s.exits[id])
		}
		if s.releases[id] != 200 {
			t.Errorf("release of %s after its end: %d, want 200", id, s.releases[id])
		}
	}
}

// TestNetworkCutShorterThanGrace cuts a never-renewing claimer's remote
// off the gateway for longer than the claim TTL but less than the
// reconnect grace: the same remote reconnects and finishes the session,
// which never lapses or moves.
func TestNetworkCutShorterThanGrace(t *testing.T) {
	t.Parallel()
	const steps = 12
	c := startCluster(t, "--claim-ttl", "3s", "--reconnect-grace", "30s")
	token := setupOutpost(t, c, "cut")
	ids := longSessions(t, c, "cut", 1, steps)
	proxy := newCutProxy(t, c.addr)
	cc := &contractClient{t: t, api: c.url, token: token}
	var o struct {
		Metadata struct {
			OutpostID string `json:"outpost_id"`
		} `json:"metadata"`
	}
	if code := cc.do("GET", "/opbeta/outposts/outposts/cut", nil, &o); code != 200 {
		t.Fatalf("get outpost: %d", code)
	}
	s := &sandboxClaimer{c: cc, outpost: o.Metadata.OutpostID, acceptor: "sandbox-cut", staticBase: c.url + "/dist/",
		dir: t.TempDir(), releases: map[string]int{}, exits: map[string]error{},
		gateway: func(u string) string { return strings.Replace(u, c.addr, proxy.addr(), 1) }}
	served := make(chan struct{})
	go func() {
		defer close(served)
		s.run(t, 1, 30*time.Second)
	}()
	waitEvent(t, c, ids[0], "the second call", func(ev api.Event) bool { return ev.Type == api.EventCall && ev.CallSeq == 2 })
	proxy.setDown(true)
	if n := proxy.cut(); n == 0 {
		t.Fatal("the remote's connection did not pass the proxy")
	}
	time.Sleep(4 * time.Second) // longer than the claim TTL
	proxy.setDown(false)
	<-served
	assertServedOnce(t, c, ids, s.acceptor, steps)
	disconnects := 0
	for _, ev := range c.events(ids[0]) {
		if ev.Type == api.EventRemoteDisconnected {
			disconnects++
		}
	}
	if disconnects == 0 {
		t.Error("the transcript shows no disconnect: the cut did not happen")
	}
	if s.releases[ids[0]] != 200 {
		t.Errorf("release after the end: %d, want 200", s.releases[ids[0]])
	}
}

// operatorClaimer is the Kubernetes operator: a level-based reconcile loop
// that lists the whole outpost queue each pass, claims claimable rows up to
// its capacity, starts one "pod" per claimed session — `worker start
// --session ID` in direct-serve mode, holding only the connect token
// written once at claim time — renews claims close to their deadline
// (throwing the new token away), and on terminated releases and deletes
// the pod.
type operatorClaimer struct {
	c          *contractClient
	outpost    string
	acceptor   string
	staticBase string
	dir        string
	capacity   int
	margin     time.Duration

	pods     map[string]*exec.Cmd
	podOut   map[string]*bytes.Buffer
	podDone  map[string]chan error
	renewals int
	released map[string]int
}

func (o *operatorClaimer) startPod(t *testing.T, e contractEntry, token string) {
	id := e.Metadata.SessionID
	work := filepath.Join(o.dir, "pod-"+id)
	if err := os.MkdirAll(work, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "worker", "start", "--session", id)
	cmd.Dir = work
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + work,
		"DEVIN_REMOTE_SESSION_TOKEN=" + token,
		"DEVIN_OUTPOST_GATEWAY_URL=" + e.Status.GatewayURL,
		"DEVIN_WORKER_CACHE_DIR=" + filepath.Join(work, "worker", "cache"),
		"DEVIN_WORKER_STATIC_BASE_URL=" + o.staticBase,
	}
	if e.Spec.RemoteBinarySHA != nil {
		cmd.Env = append(cmd.Env, "DEVIN_WORKER_REMOTE_SHA="+*e.Spec.RemoteBinarySHA)
	}
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pod for %s: %v", id, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	o.pods[id], o.podOut[id], o.podDone[id] = cmd, out, done
}

// pass is one reconcile pass; it reports whether anything is left to do.
func (o *operatorClaimer) pass(t *testing.T) bool {
	busy := false
	active := 0
	for _, e := range o.c.entries(o.outpost, "") {
		id := e.Metadata.SessionID
		ours := e.Status.Phase == "claimed" && e.Status.AcceptorID != nil && *e.Status.AcceptorID == o.acceptor
		switch {
		case ours && e.Status.SessionStatus == "terminated":
			if done, ok := o.podDone[id]; ok {
				if err := <-done; err != nil {
					t.Errorf("pod of %s exited %v:\n%s", id, err, o.podOut[id])
				}
				delete(o.podDone, id)
			}
			o.released[id] = o.c.do("POST", "/opbeta/outposts/devins/"+id+"/release", map[string]string{"acceptor_id": o.acceptor}, nil)
		case ours:
			busy = true
			active++
			if e.Status.ClaimDeadline == nil || time.Until(time.Unix(*e.Status.ClaimDeadline, 0)) < o.margin {
				if o.c.do("POST", "/opbeta/outposts/devins/"+id+"/claim", map[string]string{"acceptor_id": o.acceptor}, nil) == 200 {
					o.renewals++ // the new token is thrown away: the pod keeps its own
				}
			}
		case claimable(e):
			busy = true
			if active >= o.capacity {
				continue
			}
			var claimed contractEntry
			if o.c.do("POST", "/opbeta/outposts/devins/"+id+"/claim", map[string]string{"acceptor_id": o.acceptor}, &claimed) != 200 {
				continue
			}
			active++
			o.startPod(t, claimed, claimed.Status.ConnectToken)
		}
	}
	return busy
}

// TestOperatorStyleClaimerDirectServe runs sessions many claim TTLs long
// through an operator-style claimer whose pods hold only the connect token
// and run `worker start --session` in direct-serve mode.
func TestOperatorStyleClaimerDirectServe(t *testing.T) {
	t.Parallel()
	const steps = 12
	c := startCluster(t, "--claim-ttl", "3s")
	token := setupOutpost(t, c, "k8s")
	ids := longSessions(t, c, "k8s", 3, steps)
	var out struct {
		Items []struct {
			Metadata struct {
				OutpostID string `json:"outpost_id"`
			} `json:"metadata"`
			Spec struct {
				Name string `json:"name"`
			} `json:"spec"`
		} `json:"items"`
	}
	cc := &contractClient{t: t, api: c.url, token: token}
	if code := cc.do("GET", "/opbeta/outposts", nil, &out); code != 200 || len(out.Items) != 1 {
		t.Fatalf("list outposts: %d %+v", code, out)
	}
	o := &operatorClaimer{c: cc, outpost: out.Items[0].Metadata.OutpostID, acceptor: "k8s-outposts-0123abcd", staticBase: c.url + "/dist/",
		dir: t.TempDir(), capacity: 2, margin: time.Second,
		pods: map[string]*exec.Cmd{}, podOut: map[string]*bytes.Buffer{}, podDone: map[string]chan error{}, released: map[string]int{}}
	t.Cleanup(func() {
		for _, p := range o.pods {
			_ = p.Process.Kill()
		}
	})
	deadline := time.Now().Add(90 * time.Second)
	for o.pass(t) && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
	}
	assertServedOnce(t, c, ids, o.acceptor, steps)
	for _, id := range ids {
		if o.released[id] != 200 {
			t.Errorf("release of %s: %d, want 200", id, o.released[id])
		}
	}
	t.Logf("%d renewals by the operator-style claimer", o.renewals)
}
