//go:build linux

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// The tests of several `outpost server` replicas on one PostgreSQL database:
// real server processes behind an in-test balancer
// (test/balancer), real workers and remotes through it.

// TestReplicas runs the steady-state scenarios on one set of three replicas
// with three workers, one after another (each on an outpost of its own).
// The loss of a replica is TestReplicasKill9.
func TestReplicas(t *testing.T) {
	t.Parallel()
	fake := newFakeOpenAI(t,
		func(req map[string]any) map[string]any { return say("Which file should I look at?") },
		func(req map[string]any) map[string]any { return say("Thanks, noted.") },
	)
	rs := startReplicaSet(t, replicaOptions{Env: []string{"OUTPOST_LLM_PROVIDER=openai",
		"OUTPOST_LLM_BASE_URL=" + fake.srv.URL + "/v1", "OUTPOST_LLM_MODEL=fake-model"}})
	token := setupOutpost(t, rs.front, "steady")
	for range 3 {
		startWorker(t, rs.front, "steady", token)
	}
	rs.waitWorkers("steady", 3)

	t.Run("presence through every replica", func(t *testing.T) { replicaPresence(t, rs) })
	t.Run("follower on another replica", func(t *testing.T) { replicaFollower(t, rs) })
	t.Run("queue watcher on another replica", func(t *testing.T) { replicaQueueWatch(t, rs) })
	t.Run("artifact from every replica", func(t *testing.T) { replicaArtifact(t, rs) })
	t.Run("external tool call to a non-owner", func(t *testing.T) { replicaExternal(t, rs) })
	t.Run("user message to a non-owner", func(t *testing.T) { replicaMessage(t, rs, fake) })
	t.Run("terminate through any replica", func(t *testing.T) { replicaTerminate(t, rs) })
	t.Run("50 claimers over three replicas", func(t *testing.T) { replicaClaimers(t, rs) })
	t.Run("outpost delete against create", func(t *testing.T) { replicaDeleteRace(t, rs) })
}

// replicaPresence: every replica lists the three workers, wherever their
// heartbeats land.
func replicaPresence(t *testing.T, rs *replicaSet) {
	for _, r := range rs.replicas {
		var n int
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		ok := waitfor.Poll(ctx, func() bool {
			n = len(connectedWorkers(t, r.direct, "steady"))
			return n == 3
		})
		cancel()
		if !ok {
			t.Errorf("replica %s lists %d workers of steady, want 3", r.id, n)
		}
	}
}

// adminClient is a client.Client with the admin token for c: a server,
// one replica or the balancer.
func adminClient(t *testing.T, c *cluster) *client.Client {
	t.Helper()
	cl, err := client.New(c.url, c.admin)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// arrivals records when a follower saw each numbered event, in order.
type arrivals struct {
	mu   sync.Mutex // guards the following
	seqs []int64
	at   map[int64]time.Time
	evs  map[int64]api.Event
}

func (a *arrivals) add(ev api.Event) {
	now := time.Now()
	if ev.Seq <= 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seqs = append(a.seqs, ev.Seq)
	a.at[ev.Seq] = now
	a.evs[ev.Seq] = ev
}

func (a *arrivals) seen(match func(api.Event) bool) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ev := range a.evs {
		if match(ev) {
			return true
		}
	}
	return false
}

func (a *arrivals) max() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.seqs) == 0 {
		return 0
	}
	return a.seqs[len(a.seqs)-1]
}

// replicaFollower: an SSE follower pinned to each replica; the remote of
// the session is connected to one of them (the holder). Every event the
// session commits after the followers caught up reaches the followers on
// the two other replicas, in the same order, within ~100 ms of reaching the
// holder's own follower.
func replicaFollower(t *testing.T, rs *replicaSet) {
	gate := t.TempDir() + "/gate"
	steps := []api.Step{execStep(fmt.Sprintf("while [ ! -e %s ]; do sleep 0.02; done", gate))}
	for i := range 8 {
		steps = append(steps, execStep(fmt.Sprintf("echo tick-%d; sleep 0.05", i)))
	}
	var s api.Session
	if code := rs.front.api("POST", "/v1/sessions", adminToken, api.CreateSessionRequest{Outpost: "steady", Title: "followed everywhere",
		Agent: api.Agent{Kind: api.AgentScript, Steps: steps}}, &s); code != 201 {
		t.Fatalf("create session: %d", code)
	}
	id := s.Metadata.SessionID
	holder := rs.holder(id)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	follows := make([]*arrivals, len(rs.replicas))
	errs := make([]error, len(rs.replicas))
	var wg sync.WaitGroup
	for i, r := range rs.replicas {
		follows[i] = &arrivals{at: map[int64]time.Time{}, evs: map[int64]api.Event{}}
		cl := adminClient(t, r.direct)
		wg.Go(func() {
			errs[i] = cl.Sessions.Follow(ctx, id, 0, func(ev api.Event) error { follows[i].add(ev); return nil })
		})
	}
	isFirstCall := func(ev api.Event) bool { return ev.Type == api.EventCall && ev.CallSeq == 1 }
	waitfor.Within(t, 20*time.Second, "every follower to see the first call", func() bool {
		for _, f := range follows {
			if !f.seen(isFirstCall) {
				return false
			}
		}
		return true
	})
	base := follows[holder].max()
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("the follower on replica %s (holder %s): %v", rs.replicas[i].id, rs.replicas[holder].id, err)
		}
	}
	if t.Failed() {
		return
	}
	want := follows[holder].seqs
	var lags []time.Duration
	for i, f := range follows {
		if i == holder {
			continue
		}
		if !slices.Equal(f.seqs, want) {
			t.Errorf("the follower on %s saw seqs %v, the holder's %v", rs.replicas[i].id, f.seqs, want)
		}
		for _, seq := range want {
			if seq <= base {
				continue
			}
			lags = append(lags, f.at[seq].Sub(follows[holder].at[seq]))
		}
	}
	if len(lags) < 20 {
		t.Fatalf("only %d events measured after the gate", len(lags))
	}
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	p50, p99, worst := lags[len(lags)/2], lags[(len(lags)*99)/100], lags[len(lags)-1]
	t.Logf("fan-out lag behind the holder's follower over %d events: p50 %s, p99 %s, max %s", len(lags), p50, p99, worst)
	if p50 > 100*time.Millisecond || worst > time.Second {
		t.Errorf("events reach followers on other replicas too late: p50 %s (want ≤ 100ms), max %s (want ≤ 1s)", p50, worst)
	}
}

// replicaQueueWatch: a queue watch on one replica sees, within a second, a
// session created through another.
func replicaQueueWatch(t *testing.T, rs *replicaSet) {
	setupOutpost(t, rs.front, "watched") // no worker: the session stays pending
	a, b := rs.replicas[0], rs.replicas[1]
	cl := adminClient(t, a.direct)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	list, err := cl.Queue.List(ctx, client.QueueFilter{Outpost: "watched"})
	if err != nil {
		t.Fatal(err)
	}
	// The watch reports each session it is told about by id; a probe
	// session created through a itself shows the stream is open.
	seen := make(chan string, 16)
	watchDone := make(chan error, 1)
	go func() {
		watchDone <- cl.Queue.Watch(ctx, "watched", list.Cursor, func(ev api.WatchEvent) error {
			seen <- ev.Object.Metadata.SessionID
			return nil
		})
	}()
	await := func(id, what string, within time.Duration) time.Time {
		t.Helper()
		deadline := time.After(within)
		for {
			select {
			case got := <-seen:
				if got == id {
					return time.Now()
				}
			case err := <-watchDone:
				t.Fatalf("the watch on %s ended: %v", a.id, err)
			case <-deadline:
				t.Fatalf("the watch on %s did not see %s within %s", a.id, what, within)
			}
		}
	}
	var probe api.Session
	if code := a.direct.api("POST", "/v1/sessions", adminToken, apiScriptSession("watched", "probe"), &probe); code != 201 {
		t.Fatalf("create the probe session through %s: %d", a.id, code)
	}
	await(probe.Metadata.SessionID, "the probe session created through it", 10*time.Second)
	var s api.Session
	if code := b.direct.api("POST", "/v1/sessions", adminToken, apiScriptSession("watched", "seen elsewhere"), &s); code != 201 {
		t.Fatalf("create session through %s: %d", b.id, code)
	}
	created := time.Now()
	lag := await(s.Metadata.SessionID, "the session created through "+b.id, 5*time.Second).Sub(created)
	t.Logf("queue watch on %s saw the session created through %s after %s", a.id, b.id, lag)
	if lag > time.Second {
		t.Errorf("the watch on %s saw the session after %s, want within 1s", a.id, lag)
	}
}

func apiScriptSession(outpost, title string, steps ...api.Step) api.CreateSessionRequest {
	return api.CreateSessionRequest{Outpost: outpost, Title: title, Agent: api.Agent{Kind: api.AgentScript, Steps: steps}}
}

// replicaExternal: an external agent's tool calls (plain HTTP and MCP)
// sent to a replica that does not hold the session's remote are served,
// each once.
func replicaExternal(t *testing.T, rs *replicaSet) {
	var s api.Session
	if code := rs.front.api("POST", "/v1/sessions", adminToken, api.CreateSessionRequest{Outpost: "steady", Title: "driven through a non-owner",
		Agent: api.Agent{Kind: api.AgentExternal}}, &s); code != 201 {
		t.Fatalf("create session: %d", code)
	}
	id := s.Metadata.SessionID
	holder := rs.holder(id)
	waitfor.Within(t, 30*time.Second, "the session to run", func() bool { return rs.front.session(id).Status.Status == api.StatusRunning })
	other := rs.replicas[rs.other(holder)]

	if res, err := adminClient(t, other.direct).Sessions.CallTool(t.Context(), id, api.ToolExec, api.ExecArgs{Argv: []string{"echo", "through-a-non-owner"}}); err != nil ||
		!res.OK || !strings.Contains(res.Output, "through-a-non-owner") {
		t.Errorf("exec through %s (the remote is on %s): %+v, %v", other.id, rs.replicas[holder].id, res, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mc := mcp.NewClient(&mcp.Implementation{Name: "e2e-replicas", Version: "1"}, nil)
	cs, err := mc.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: other.direct.url + "/v1/sessions/" + id + "/mcp",
		DisableStandaloneSSE: true, MaxRetries: -1, HTTPClient: &http.Client{Transport: bearer{adminToken}}}, nil)
	if err != nil {
		t.Errorf("MCP connect through %s: %v", other.id, err)
	} else {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"command": "echo mcp-through-a-non-owner"}})
		if err != nil || r.IsError || !strings.Contains(textOf(r), "mcp-through-a-non-owner") {
			t.Errorf("MCP exec through %s: %v %q", other.id, err, textOfSafe(r))
		}
		cs.Close()
	}

	if code := rs.front.api("POST", "/v1/sessions/"+id+"/terminate", adminToken, api.TerminateRequest{Reason: "done"}, nil); code != 200 {
		t.Fatalf("terminate: %d", code)
	}
	rs.front.waitFinal(id, 20*time.Second)
	results := map[int64]int{}
	calls := 0
	for _, ev := range rs.front.events(id) {
		switch ev.Type {
		case api.EventCall:
			calls++
		case api.EventResult:
			results[ev.CallSeq]++
		}
	}
	for seq, n := range results {
		if n != 1 {
			t.Errorf("call %d has %d results, want 1", seq, n)
		}
	}
	if !t.Failed() && calls != 2 {
		t.Errorf("%d calls on the transcript, want 2", calls)
	}
}

func textOfSafe(r *mcp.CallToolResult) string {
	if r == nil {
		return ""
	}
	return textOf(r)
}

// replicaMessage: a user message sent to a replica that does not hold an
// interactive llm session's remote reaches the model at its next turn.
func replicaMessage(t *testing.T, rs *replicaSet, fake *fakeOpenAI) {
	var s api.Session
	if code := rs.front.api("POST", "/v1/sessions", adminToken, api.CreateSessionRequest{Outpost: "steady", Title: "chat through a non-owner",
		Prompt: "Look at a file.", Agent: api.Agent{Kind: api.AgentLLM, Interactive: true}, Limits: api.Limits{IdleS: 60}}, &s); code != 201 {
		t.Fatalf("create session: %d", code)
	}
	id := s.Metadata.SessionID
	waitfor.Within(t, 30*time.Second, "the agent to wait for the user", func() bool {
		return rs.front.session(id).Status.StatusDetail == api.DetailWaitingForUser
	})
	holder := rs.holder(id)
	other := rs.replicas[rs.other(holder)]
	const text = "Look at notes.txt, sent through a replica without the remote."
	if code := other.direct.api("POST", "/v1/sessions/"+id+"/messages", adminToken, api.MessageRequest{Text: text}, nil); code/100 != 2 {
		t.Fatalf("message through %s: %d", other.id, code)
	}
	sent := time.Now()
	waitfor.Within(t, 15*time.Second, "the model to be asked again", func() bool { return len(fake.requests()) >= 2 })
	t.Logf("the message sent through %s reached the model (loop on %s) after %s", other.id, rs.replicas[holder].id, time.Since(sent).Round(time.Millisecond))
	if got, _ := lastMessage(fake.requests()[1])["content"].(string); got != text {
		t.Errorf("the model got %q as the user's message", got)
	}
	waitfor.Within(t, 15*time.Second, "the agent to wait again", func() bool {
		st := rs.front.session(id).Status
		return st.StatusDetail == api.DetailWaitingForUser && st.Usage.ModelCalls == 2
	})
	third := rs.replicas[rs.other(holder, rs.other(holder))]
	if code := third.direct.api("POST", "/v1/sessions/"+id+"/terminate", adminToken, nil, nil); code != 200 {
		t.Fatalf("terminate through %s: %d", third.id, code)
	}
	if st := rs.front.waitFinal(id, 20*time.Second).Status; st.Status != api.StatusExit || st.StatusDetail != api.DetailUserRequest {
		t.Errorf("after terminate: %+v", st)
	}
}

// replicaTerminate: three sessions each in a long call, one terminated
// through the replica holding its remote and two through replicas that do
// not: each ends user_request at once and its remote hears it (the worker
// releases the claim).
func replicaTerminate(t *testing.T, rs *replicaSet) {
	ids := make([]string, 3)
	for i := range ids {
		var s api.Session
		if code := rs.front.api("POST", "/v1/sessions", adminToken, apiScriptSession("steady", fmt.Sprintf("long %d", i), execStep("sleep 600")), &s); code != 201 {
			t.Fatalf("create session: %d", code)
		}
		ids[i] = s.Metadata.SessionID
	}
	for i, id := range ids {
		waitEvent(t, rs.front, id, "the call of "+id+" to start", func(ev api.Event) bool { return ev.Type == api.EventCall })
		holder := rs.holder(id)
		via := holder
		if i > 0 {
			via = (holder + i) % len(rs.replicas) // not the holder
		}
		r := rs.replicas[via]
		if code := r.direct.api("POST", "/v1/sessions/"+id+"/terminate", adminToken, api.TerminateRequest{Reason: "stop " + r.id}, nil); code != 200 {
			t.Errorf("terminate %s through %s (holder %s): %d", id, r.id, rs.replicas[holder].id, code)
			continue
		}
		st := rs.front.waitFinal(id, 10*time.Second).Status
		if st.Status != api.StatusExit || st.StatusDetail != api.DetailUserRequest || !strings.Contains(st.Reason, "stop "+r.id) {
			t.Errorf("session terminated through %s: %+v", r.id, st)
		}
		waitfor.Within(t, 30*time.Second, "the worker to release "+id+" (its remote heard the end)", func() bool {
			return rs.front.released(id, adminToken)
		})
	}
}

// replicaArtifact: an artifact uploaded through the replica holding the
// session's remote downloads, byte for byte, from every replica directly.
func replicaArtifact(t *testing.T, rs *replicaSet) {
	var s api.Session
	if code := rs.front.api("POST", "/v1/sessions", adminToken, apiScriptSession("steady", "an artifact",
		execStep("head -c 3000000 /dev/urandom > data.bin && sha256sum data.bin"),
		api.Step{Tool: api.ToolUploadArtifact, Args: []byte(`{"path":"data.bin"}`)}), &s); code != 201 {
		t.Fatalf("create session: %d", code)
	}
	id := s.Metadata.SessionID
	if st := rs.front.waitFinal(id, 60*time.Second).Status; st.Status != api.StatusExit || st.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s", st.Status, st.StatusDetail, st.Reason)
	}
	want, _, _ := strings.Cut(strings.TrimSpace(transcriptText(rs.front.events(id))), " ")
	for _, r := range rs.replicas {
		req, _ := http.NewRequest("GET", r.direct.url+"/v1/sessions/"+id+"/artifacts/data.bin", nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("download through %s: %v", r.id, err)
		}
		h := sha256.New()
		n, err := io.Copy(h, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || err != nil || n != 3000000 || hex.EncodeToString(h.Sum(nil)) != want {
			t.Errorf("the artifact through %s: %d, %d bytes, sha256 %x (%v), want %s", r.id, resp.StatusCode, n, h.Sum(nil), err, want)
		}
	}
}

// replicaClaimers: 50 claimers, spread over the three replicas (each
// talking to one directly), race for the same pending sessions; every
// session is claimed exactly once and its entry names the winner.
func replicaClaimers(t *testing.T, rs *replicaSet) {
	const claimers, sessions = 50, 30
	token := setupOutpost(t, rs.front, "contended")
	cl := adminClient(t, rs.front)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ids := make([]string, sessions)
	for i := range ids {
		s, err := cl.Sessions.Create(ctx, apiScriptSession("contended", fmt.Sprintf("contended %d", i)))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = s.Metadata.SessionID
	}
	var mu sync.Mutex // guards wins and errs
	wins := map[string][]string{}
	var errs []error
	var wg sync.WaitGroup
	for g := range claimers {
		r := rs.replicas[g%len(rs.replicas)]
		mc, err := client.New(r.direct.url, token)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			acc := fmt.Sprintf("claimer-%02d-%s", g, r.id)
			order := slices.Clone(ids)
			rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			for _, id := range order {
				_, err := mc.Queue.Claim(ctx, id, acc)
				mu.Lock()
				switch {
				case err == nil:
					wins[id] = append(wins[id], acc)
				case !client.IsConflict(err):
					errs = append(errs, fmt.Errorf("%s claims %s: %w", acc, id, err))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, err := range errs[:min(len(errs), 5)] {
		t.Error(err)
	}
	double := 0
	for _, id := range ids {
		w := wins[id]
		if len(w) != 1 {
			double += max(len(w)-1, 0)
			t.Errorf("session %s was claimed by %v, want exactly one claimer", id, w)
			continue
		}
		e, err := cl.Queue.Get(ctx, id)
		if err != nil || e.Status.AcceptorID == nil || *e.Status.AcceptorID != w[0] {
			t.Errorf("entry of %s after the race: %v %+v, want held by %s", id, err, e, w[0])
		}
	}
	t.Logf("%d claimers over %d replicas raced for %d sessions: %d double claims", claimers, len(rs.replicas), sessions, double)
}

// replicaDeleteRace: sessions are created on an outpost through two
// replicas while a third deletes it. A create either fails (the outpost is
// gone) or makes a session that the delete ended: no session is left
// pending or running on a deleted outpost.
func replicaDeleteRace(t *testing.T, rs *replicaSet) {
	const rounds, creators = 6, 4
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := adminClient(t, rs.front)
	leftover := 0
	for round := range rounds {
		name := fmt.Sprintf("doomed-%d", round)
		if _, err := cl.Outposts.Create(ctx, api.CreateOutpostRequest{Name: name, Platform: api.PlatformLinux}); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex // guards created
		var created []string
		deleted := make(chan struct{})
		var wg sync.WaitGroup
		for g := range creators {
			r := rs.replicas[g%2]
			c := adminClient(t, r.direct)
			wg.Go(func() {
				for i := 0; i < 200; i++ {
					s, err := c.Sessions.Create(ctx, apiScriptSession(name, fmt.Sprintf("race %d.%d", g, i)))
					if err == nil {
						mu.Lock()
						created = append(created, s.Metadata.SessionID)
						mu.Unlock()
						continue
					}
					select {
					case <-deleted:
						return // refused after the delete: the end
					default:
					}
					if !client.IsNotFound(err) {
						t.Errorf("create on %s: %v", name, err)
						return
					}
				}
			})
		}
		// Delete once some creates went through, while they go on.
		waitfor.Within(t, 20*time.Second, "a few sessions on "+name, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(created) >= 3*(round%3+1)
		})
		del := adminClient(t, rs.replicas[2].direct)
		if err := del.Outposts.Delete(ctx, name, false); err != nil {
			t.Fatalf("delete %s through %s: %v", name, rs.replicas[2].id, err)
		}
		close(deleted)
		wg.Wait()
		left := 0
		for _, id := range created {
			s, err := cl.Sessions.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			_, qerr := cl.Queue.Get(ctx, id)
			if !api.IsFinal(s.Status.Status) || !client.IsNotFound(qerr) {
				if left++; left <= 3 {
					t.Errorf("session %s on the deleted outpost %s is %s/%s, queue entry %v", id, name, s.Status.Status, s.Status.StatusDetail, qerr)
				}
			}
		}
		if left > 3 {
			t.Errorf("… and %d more sessions left on the deleted outpost %s", left-3, name)
		}
		leftover += left
		t.Logf("round %d: %d sessions created on %s before its delete; %d left on it so far", round, len(created), name, leftover)
	}
}
