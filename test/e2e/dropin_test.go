//go:build linux

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/dist"
)

// What the drop-in test takes of Outpost beyond the public contract's own
// words, in one place: the id shapes the public docs show, which clients
// validate, and the server setting that keeps ended entries visible.
var (
	// publicSessionID and publicOutpostID are the shapes public clients
	// check ids against; an entry that does not match is skipped, never
	// served, as a real client does.
	publicSessionID = regexp.MustCompile(`^devin-[A-Za-z0-9-]+$`)
	publicOutpostID = regexp.MustCompile(`^outpost_env-`)
)

const (
	// endedRetentionFlag is the server flag for how long the released
	// entry of an ended session stays listed and watchable (phase pending,
	// session_status terminated) before the sweeper deletes it.
	endedRetentionFlag = "--ended-entry-retention"
	// dropInRetention is its value here: long enough for the claimer to
	// see the entry after its release, short enough that the test also
	// sees the sweeper's DELETED.
	dropInRetention = 30 * time.Second
	// dropInSweepSlack is how much later than the retention the DELETED
	// may come (the sweeper runs now and then, not at the instant).
	dropInSweepSlack = 30 * time.Second
	// dropInSessions is how many sessions the test serves.
	dropInSessions = 3
)

// contractEvent is a watch event as the public contract spells it.
type contractEvent struct {
	Type   string        `json:"type"`
	Object contractEntry `json:"object"`
	Cursor string        `json:"cursor"`
}

// watchQueue follows GET /opbeta/outposts/devins?watch=true from cursor the
// way the public clients do: an event per `data:` line, the last cursor
// kept, and a new stream from it whenever the server ends one (it does
// within five minutes) or the connection fails. It sends every event to
// out until ctx ends.
func (c *contractClient) watchQueue(ctx context.Context, outpost, cursor string, out chan<- contractEvent) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		last, err := c.watchOnce(ctx, outpost, cursor, out)
		if last != "" {
			cursor = last
			backoff = 100 * time.Millisecond
		}
		if err != nil && ctx.Err() == nil {
			c.t.Logf("watch of the queue: %v (reconnecting)", err)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	}
}

// watchOnce reads one watch stream to its end and returns the last cursor
// it saw.
func (c *contractClient) watchOnce(ctx context.Context, outpost, cursor string, out chan<- contractEvent) (string, error) {
	q := url.Values{"outpost": {outpost}, "watch": {"true"}}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	req, err := http.NewRequestWithContext(ctx, "GET", c.api+"/opbeta/outposts/devins?"+q.Encode(), nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("watch answered %d", resp.StatusCode)
	}
	last := ""
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue // ": keepalive" and blank lines
		}
		var ev contractEvent
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return last, fmt.Errorf("watch event %q: %w", data, err)
		}
		select {
		case out <- ev:
		case <-ctx.Done():
			return last, ctx.Err()
		}
		last = ev.Cursor
	}
	return last, sc.Err()
}

// dropInServed is what became of one session the drop-in claimer served,
// as its serving goroutine reports it.
type dropInServed struct {
	id       string
	exitErr  error
	output   string   // the worker's
	damaged  []string // prepared files missing or changed after the session
	cached   string   // SHA-256 of the pinned build in the cache dir, "" when absent
	status   string   // session_status last read before the release
	released int      // status code of the release
	// releasedAt is when the release answered.
	releasedAt time.Time
	reclaim    int // status code of a claim of the ended entry, after the release
	// listedEnded: right after the release, a list of the pending
	// entries held this one with session_status terminated.
	listedEnded bool
}

// dropInSession is the claimer's record of a session it claimed.
type dropInSession struct {
	id      string
	machine string // the per-session sandbox: workspace, worker cache, home
	pin     string // the claim's spec.remote_binary_sha
	served  *dropInServed
	// endedSeen: the list or watch showed the entry released with
	// session_status terminated.
	endedSeen bool
	cleanedAt time.Time
	deletedAt time.Time
	// deletedEarly: the entry was DELETED before the claimer saw it ended.
	deletedEarly bool
}

// dropInClaimer is an orchestrator written from the public contract only,
// as other people write them for the public fleet API: configured with an
// API URL, a token and an outpost id, it lists the outpost's queue, then
// watches it; skips every entry whose ids do not have the public shapes;
// claims what is claimable under its acceptor id; prepares a sandbox per
// session (a restored checkpoint, a dotfile, a nested volume) and starts
// `worker start --session S --pool O --acceptor-id A` in it in
// direct-serve mode, handing it only the claim's connect token and gateway
// URL, a static base URL and a cache dir; when the worker exits re-reads
// session_status until it is terminated (it can lag) and releases. Its
// teardown is separate from the serving, as in the public sandbox
// orchestrators: it deletes a session's sandbox only once the fleet shows
// the released entry with session_status terminated, and then expects the
// sweeper's DELETED.
type dropInClaimer struct {
	c          *contractClient
	outpost    string
	acceptor   string
	staticBase string
	dir        string

	// Owned by run's goroutine.
	sessions map[string]*dropInSession
	skipped  map[string]string // session id -> why
}

// The files the claimer prepares in each session's workspace before it
// starts the worker there.
func dropInPrepared(id string) map[string]string {
	return map[string]string{
		"checkpoint.json":         `{"session":"` + id + `","restored":true}` + "\n",
		".sandbox-profile":        "export SANDBOX_SESSION=" + id + "\n",
		"volume/nested/state.txt": "nested state of " + id + "\n",
	}
}

// run serves until want sessions are all cleaned up and deleted, every
// entry it sees is skipped, or ctx ends. created is closed once the test
// has created every session.
func (d *dropInClaimer) run(ctx context.Context, want int, created <-chan struct{}) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	events := make(chan contractEvent, 64)
	results := make(chan *dropInServed, want)
	list, cursor := d.c.entriesCursor(d.outpost, "")
	wg.Go(func() { d.c.watchQueue(ctx, d.outpost, cursor, events) })
	for _, e := range list {
		d.handle(ctx, &wg, api.WatchModified, e, results)
	}
	allCreated := false
	for {
		done := 0
		for _, s := range d.sessions {
			if s.served != nil && !s.deletedAt.IsZero() {
				done++
			}
		}
		if done >= want || allCreated && len(d.sessions) == 0 && len(d.skipped) >= want {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-created:
			created, allCreated = nil, true
		case ev := <-events:
			d.handle(ctx, &wg, ev.Type, ev.Object, results)
		case r := <-results:
			s := d.sessions[r.id]
			s.served = r
			d.tryCleanup(s)
		}
	}
}

// handle acts on one entry of the list or the watch.
func (d *dropInClaimer) handle(ctx context.Context, wg *sync.WaitGroup, typ string, e contractEntry, results chan<- *dropInServed) {
	id := e.Metadata.SessionID
	if !publicSessionID.MatchString(id) || !publicOutpostID.MatchString(e.Metadata.OutpostID) {
		if _, ok := d.skipped[id]; !ok {
			d.skipped[id] = fmt.Sprintf("session id %q or outpost id %q does not have the public shape %s, %s",
				id, e.Metadata.OutpostID, publicSessionID, publicOutpostID)
		}
		return
	}
	s := d.sessions[id]
	switch {
	case typ == api.WatchDeleted:
		if s != nil && s.deletedAt.IsZero() {
			s.deletedAt = time.Now()
			s.deletedEarly = s.cleanedAt.IsZero()
		}
	case s == nil && claimable(e) && e.Metadata.OutpostID == d.outpost:
		var claimed contractEntry
		if code := d.c.do("POST", "/opbeta/outposts/devins/"+id+"/claim", map[string]string{"acceptor_id": d.acceptor}, &claimed); code != 200 {
			return // 409: someone else won
		}
		s = &dropInSession{id: id, machine: filepath.Join(d.dir, id)}
		if claimed.Spec.RemoteBinarySHA != nil {
			s.pin = *claimed.Spec.RemoteBinarySHA
		}
		d.sessions[id] = s
		wg.Go(func() { results <- d.serve(ctx, s, claimed) })
	case s != nil && e.Status.Phase == "pending" && e.Status.SessionStatus == "terminated":
		s.endedSeen = true
		d.tryCleanup(s)
	}
}

// tryCleanup deletes a session's sandbox once its worker is done and the
// fleet has shown the entry ended.
func (d *dropInClaimer) tryCleanup(s *dropInSession) {
	if s.served == nil || !s.endedSeen || !s.cleanedAt.IsZero() {
		return
	}
	if err := os.RemoveAll(s.machine); err != nil {
		d.c.t.Errorf("cleanup of %s: %v", s.id, err)
		return
	}
	s.cleanedAt = time.Now()
}

// serve prepares the session's sandbox, runs the worker there to its exit,
// confirms the session ended and releases the claim.
func (d *dropInClaimer) serve(ctx context.Context, s *dropInSession, claimed contractEntry) *dropInServed {
	r := &dropInServed{id: s.id}
	work, cache, home := filepath.Join(s.machine, "workspace"), filepath.Join(s.machine, "worker", "cache"), filepath.Join(s.machine, "home")
	prepared := dropInPrepared(s.id)
	for name, content := range prepared {
		path := filepath.Join(work, name)
		err := os.MkdirAll(filepath.Dir(path), 0o755)
		if err == nil {
			err = os.WriteFile(path, []byte(content), 0o644)
		}
		if err != nil {
			r.exitErr = fmt.Errorf("prepare the sandbox: %w", err)
			return r
		}
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		r.exitErr = fmt.Errorf("prepare the sandbox: %w", err)
		return r
	}

	cmd := exec.CommandContext(ctx, binary, "worker", "start", "--session", s.id, "--pool", d.outpost, "--acceptor-id", d.acceptor)
	cmd.Dir = work
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LANG=C.UTF-8",
		"DEVIN_REMOTE_SESSION_TOKEN=" + claimed.Status.ConnectToken,
		"DEVIN_OUTPOST_GATEWAY_URL=" + claimed.Status.GatewayURL,
		"DEVIN_WORKER_STATIC_BASE_URL=" + d.staticBase,
		"DEVIN_WORKER_CACHE_DIR=" + cache,
	}
	// The worker follows the entry's pin by itself, as the contract says
	// `devin worker start` does: no DEVIN_WORKER_REMOTE_SHA is passed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	r.exitErr = cmd.Run()
	r.output = out.String()

	// Before anything is torn down: nothing prepared is lost or changed.
	for name, want := range prepared {
		got, err := os.ReadFile(filepath.Join(work, name))
		if err != nil || string(got) != want {
			r.damaged = append(r.damaged, fmt.Sprintf("%s: %q %v, want %q", name, got, err, want))
		}
	}
	slices.Sort(r.damaged)
	if b, err := os.ReadFile(dist.CachedPath(cache, pinnedID, dist.HostSuffix())); err == nil {
		r.cached = fileSHA(d.c.t, b)
	}

	// A clean exit is the session's end, but session_status can lag.
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for range 50 {
		var cur contractEntry
		if code := d.c.do("GET", "/opbeta/outposts/devins/"+s.id, nil, &cur); code == 200 {
			r.status = cur.Status.SessionStatus
		}
		if r.status == "terminated" || r.exitErr != nil {
			break
		}
		select {
		case <-ctx.Done():
			return r
		case <-tick.C:
		}
	}
	body := map[string]string{"acceptor_id": d.acceptor}
	r.released = d.c.do("POST", "/opbeta/outposts/devins/"+s.id+"/release", body, nil)
	r.releasedAt = time.Now()
	// The entry of an ended session is listed until the sweeper removes
	// it, and not claimable meanwhile.
	if r.reclaim = d.c.do("POST", "/opbeta/outposts/devins/"+s.id+"/claim", body, nil); r.reclaim == 200 {
		d.c.do("POST", "/opbeta/outposts/devins/"+s.id+"/release", body, nil)
	}
	for _, e := range d.c.entries(d.outpost, "pending") {
		r.listedEnded = r.listedEnded || e.Metadata.SessionID == s.id && e.Status.SessionStatus == "terminated"
	}
	return r
}

// dropInStatic serves tree under /dist/ on a loopback address of its own,
// through a recorder of every request.
func dropInStatic(t *testing.T, tree string) (base string, rec *recorder) {
	t.Helper()
	files := httptest.NewServer(http.StripPrefix("/dist/", http.FileServer(http.Dir(tree))))
	t.Cleanup(files.Close)
	rec = &recorder{}
	return rec.start(t, files.URL).URL + "/dist/", rec
}

// TestDropInOrchestrator runs an orchestrator written only from the public
// Outposts contract (dropInClaimer) against the server, changing nothing
// but the API URL: it validates ids, serves each session through a
// direct-serve worker started in a directory it prepared, under a pin
// published at another URL, and cleans up only on seeing the released
// entry terminated. Every session is served once by the pinned build,
// nothing prepared is lost, every cleanup is done, the ended entries refuse
// claims and are deleted by the sweeper after the retention.
func TestDropInOrchestrator(t *testing.T) {
	t.Parallel()
	suffix := dist.HostSuffix()
	if suffix == "" {
		t.Skip("no distribution platform for this machine")
	}
	var args []string
	if strings.Contains(run(t, nil, "server", "--help"), endedRetentionFlag) {
		args = append(args, endedRetentionFlag, dropInRetention.String())
	} else {
		t.Errorf("the server has no %s flag: ended entries are not kept listed for a while, so the claimer cannot see them terminated", endedRetentionFlag)
	}
	c := startCluster(t, args...)

	// The static distribution, on another URL than the API: the pinned
	// build, and a latest pointer to the server's own build, which a
	// worker not following the pin would run.
	tree, pinned := pinnedDistDir(t, suffix)
	selfID := strings.TrimSpace(string(download(t, c.url+"/dist/"+dist.LatestName(suffix))))
	if err := os.WriteFile(filepath.Join(tree, dist.LatestName(suffix)), []byte(selfID+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	staticBase, static := dropInStatic(t, tree)

	token := pinnedOutpost(t, c, "dropin", pinnedID)
	cc := &contractClient{t: t, api: c.url, token: token}
	var o struct {
		Metadata struct {
			OutpostID string `json:"outpost_id"`
		} `json:"metadata"`
	}
	if code := cc.do("GET", "/opbeta/outposts/outposts/dropin", nil, &o); code != 200 {
		t.Fatalf("get outpost: %d", code)
	}
	if !publicOutpostID.MatchString(o.Metadata.OutpostID) {
		t.Errorf("outpost id %q does not have the public shape %s", o.Metadata.OutpostID, publicOutpostID)
	}

	steps := []api.Step{
		execStep(`pwd; cat checkpoint.json .sandbox-profile volume/nested/state.txt`),
		execStep(`echo made by the session > made-by-session.txt; ls -A`),
	}
	newSession := func(i int) string {
		return createSession(t, c, api.CreateSessionRequest{Outpost: "dropin", Title: fmt.Sprintf("drop-in %d", i),
			Agent: api.Agent{Kind: api.AgentScript, Steps: steps}})
	}
	// One session is there before the claimer starts (it lists it), the
	// others come while it watches.
	ids := []string{newSession(1)}
	d := &dropInClaimer{c: cc, outpost: o.Metadata.OutpostID, acceptor: "dropin-orchestrator-7", staticBase: staticBase,
		dir: t.TempDir(), sessions: map[string]*dropInSession{}, skipped: map[string]string{}}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second+dropInRetention+dropInSweepSlack)
	created := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		d.run(ctx, dropInSessions, created)
	}()
	// Should the test stop early, the claimer and its workers stop with it.
	defer func() {
		cancel()
		<-finished
	}()
	for i := 2; i <= dropInSessions; i++ {
		ids = append(ids, newSession(i))
	}
	close(created)
	<-finished

	if len(d.sessions) == 0 {
		var why []string
		for _, id := range ids {
			why = append(why, id+": "+d.skipped[id])
		}
		t.Fatalf("the claimer served no session: it skipped them all, as a public client does:\n%s", strings.Join(why, "\n"))
	}
	var served []string
	for _, id := range ids {
		s := d.sessions[id]
		if s == nil {
			t.Errorf("session %s was never claimed by the claimer (skipped: %q)", id, d.skipped[id])
			continue
		}
		served = append(served, id)
		if s.served == nil {
			t.Errorf("session %s: its worker had not exited when the claimer stopped", id)
			continue
		}
		r := s.served
		if r.exitErr != nil {
			t.Errorf("worker of %s exited %v:\n%s", id, r.exitErr, r.output)
		}
		if !strings.Contains(r.output, "--pool is deprecated") {
			t.Errorf("worker of %s gave no warning for --pool:\n%s", id, r.output)
		}
		if len(r.damaged) > 0 {
			t.Errorf("session %s lost or changed prepared files:\n%s", id, strings.Join(r.damaged, "\n"))
		}
		out := sessionOutput(t, c, id)
		prepared := dropInPrepared(id)
		want := filepath.Join(s.machine, "workspace") + "\n" + prepared["checkpoint.json"] + prepared[".sandbox-profile"] + prepared["volume/nested/state.txt"]
		if !strings.Contains(out, want) {
			t.Errorf("session %s did not run in its prepared directory with its files; output:\n%s\nwant:\n%s", id, out, want)
		}

		// The pinned build served it, fetched from the static base URL and
		// kept in the cache dir.
		if s.pin != pinnedID {
			t.Errorf("claim of %s: spec.remote_binary_sha = %q, want the outpost's pin %s", id, s.pin, pinnedID)
		}
		if caps := c.session(id).Status.Capabilities; caps == nil || caps.RemoteVersion != pinnedVersion {
			version := "(none recorded)"
			if caps != nil {
				version = caps.RemoteVersion
			}
			t.Errorf("session %s was served by a remote of version %s, want the pinned build %s (version %s)", id, version, pinnedID, pinnedVersion)
		}
		if r.cached != fileSHA(t, pinned) {
			t.Errorf("worker cache of %s: the pinned build is not there (SHA-256 %q)", id, r.cached)
		}

		// The end, as the public fleet shows it.
		if r.status != "terminated" {
			t.Errorf("session %s: session_status %q after its worker exited, want terminated", id, r.status)
		}
		if r.released != 200 {
			t.Errorf("release of %s after its end: %d, want 200", id, r.released)
		}
		if !r.listedEnded {
			t.Errorf("session %s: a list of the pending entries right after the release did not hold it with session_status terminated", id)
		}
		if r.reclaim != 409 {
			t.Errorf("claim of %s's ended entry after the release: %d, want 409 (the entry stays listed, not claimable)", id, r.reclaim)
		}
		switch {
		case s.deletedEarly:
			t.Errorf("session %s: its entry was DELETED without the claimer ever seeing it released with session_status terminated, so the claimer never cleaned up", id)
		case !s.endedSeen:
			t.Errorf("session %s: the claimer never saw its released entry with session_status terminated, so it never cleaned up", id)
		case s.cleanedAt.IsZero():
			t.Errorf("session %s: no cleanup", id)
		case s.deletedAt.IsZero():
			t.Errorf("session %s: no DELETED within %s of the retention %s", id, dropInSweepSlack, dropInRetention)
		default:
			if _, err := os.Stat(s.machine); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("session %s: its sandbox is still there after the cleanup: %v", id, err)
			}
			t.Logf("session %s: cleaned up %s after its release, DELETED %s after it",
				id, s.cleanedAt.Sub(r.releasedAt).Round(time.Millisecond), s.deletedAt.Sub(r.releasedAt).Round(time.Second))
		}
	}
	assertServedOnce(t, c, served, d.acceptor, len(steps))

	reqs, _ := static.snapshot()
	for _, name := range []string{dist.BinaryName(pinnedID, suffix), dist.ChecksumName(pinnedID, suffix)} {
		if !slices.Contains(reqs, "GET /dist/"+name) {
			t.Errorf("the static base URL was never asked for %s; requests: %q", name, reqs)
		}
	}
}
