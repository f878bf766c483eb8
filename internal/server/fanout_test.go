package server

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// fanoutReplica is one of several servers on one PostgreSQL database.
type fanoutReplica struct {
	*testServer
	stop func() // stops the server (once; the test's cleanup does too)
}

// fanoutDB is a PostgreSQL database and the secret key servers on it
// share.
type fanoutDB struct {
	url string
	key []byte
}

func newFanoutDB(t *testing.T) fanoutDB {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return fanoutDB{url: pgtest.Shared(t).Database(t), key: key}
}

// startFanoutReplica starts a server named id on db whose backstop polls
// every poll, its options changed by mods. admin, when set, is the admin
// token the first replica made.
func startFanoutReplica(t *testing.T, db fanoutDB, id, admin string, poll time.Duration, mods ...func(*Options)) *fanoutReplica {
	t.Helper()
	opts := Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", DatabaseURL: db.url, SecretKey: db.key, ReplicaID: id,
		Stdout: io.Discard, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), fanoutPoll: poll}
	for _, m := range mods {
		m(&opts)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := New(ctx, opts)
	if err != nil {
		cancel()
		t.Fatalf("new server %s: %v", id, err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve %s: %v", id, err)
			}
		})
	}
	t.Cleanup(stop)
	ts := &testServer{t: t, srv: srv, url: srv.URL(), admin: srv.AdminToken()}
	if admin != "" {
		ts.admin = admin
	}
	return &fanoutReplica{testServer: ts, stop: stop}
}

// startFanoutPair starts replicas "a" and "b" on a new database.
func startFanoutPair(t *testing.T, poll time.Duration, mods ...func(*Options)) (a, b *fanoutReplica, db fanoutDB) {
	t.Helper()
	db = newFanoutDB(t)
	a = startFanoutReplica(t, db, "a", "", poll, mods...)
	b = startFanoutReplica(t, db, "b", a.admin, poll, mods...)
	return a, b, db
}

// followed is one transcript event a follower read, and when.
type followed struct {
	ev api.Event
	at time.Time
}

// openFollow follows a session's transcript (SSE) on ts after seq after,
// reading its events in the background until the test ends.
func openFollow(t *testing.T, ts *testServer, sessionID string, after int64) <-chan followed {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/sessions/%s/events?after=%d", ts.url, sessionID, after), nil)
	req.Header.Set("Authorization", "Bearer "+ts.admin)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		cancel()
		t.Fatalf("follow %s: %v %v", sessionID, resp, err)
	}
	ch := make(chan followed, 10000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev api.Event
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Errorf("event %q: %v", line, err)
				return
			}
			ch <- followed{ev, time.Now()}
		}
	}()
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-done
	})
	return ch
}

// nextFollowed waits up to wait for the follower's next event.
func nextFollowed(t *testing.T, ch <-chan followed, wait time.Duration) followed {
	t.Helper()
	select {
	case f, ok := <-ch:
		if !ok {
			t.Fatal("the follow stream ended")
		}
		return f
	case <-time.After(wait):
		t.Fatalf("no event within %s", wait)
	}
	return followed{}
}

// lastSeq is the highest seq of a session's transcript, read through ts.
func lastSeq(t *testing.T, ts *testServer, sessionID string) int64 {
	t.Helper()
	var list api.EventList
	ts.mustDo(200, "GET", "/v1/sessions/"+sessionID+"/events?tail=1", ts.admin, nil, &list)
	return list.Next
}

// claimedSession creates a session on a new outpost and claims it for
// acceptor "w1", both through ts.
func claimedSession(t *testing.T, ts *testServer) string {
	t.Helper()
	name := "op-" + randomString(4)
	ts.outpost(name)
	id := ts.session(name).Metadata.SessionID
	ts.mustDo(200, "POST", "/v1/queue/"+id+"/claim", ts.admin, api.ClaimRequest{AcceptorID: "w1"}, nil)
	return id
}

// machineEvent records a machine event of session id through ts and
// returns its seq.
func machineEvent(t *testing.T, ts *testServer, id, msg string) int64 {
	t.Helper()
	var ev api.Event
	ts.mustDo(201, "POST", "/v1/queue/"+id+"/events", ts.admin, api.MachineEventRequest{AcceptorID: "w1", Step: api.MachineStepCreate, Message: msg}, &ev)
	return ev.Seq
}

// percentile is the p-th percentile (0–100) of sorted ds.
func percentile(ds []time.Duration, p int) time.Duration {
	return ds[min(len(ds)-1, len(ds)*p/100)]
}

// TestFanoutFollowerSeesOtherReplica: a follower of a session on replica A
// sees, in order, each event committed through replica B, within ~100ms —
// through the change feed, not the backstop (which is made to poll once an
// hour). It measures the wake-up: from B's answer to the write until A's
// follower reads the event, and from the write's start. Not parallel: the
// other tests of the package would measure themselves.
func TestFanoutFollowerSeesOtherReplica(t *testing.T) {
	a, b, _ := startFanoutPair(t, time.Hour)
	id := claimedSession(t, b.testServer)
	after := lastSeq(t, a.testServer, id)
	follow := openFollow(t, a.testServer, id, after)

	const n = 200
	var woke, total []time.Duration
	for i := range n {
		began := time.Now()
		seq := machineEvent(t, b.testServer, id, strconv.Itoa(i))
		answered := time.Now()
		f := nextFollowed(t, follow, 5*time.Second)
		if f.ev.Seq != seq || f.ev.Reason != strconv.Itoa(i) {
			t.Fatalf("event %d: follower read seq %d (%q), want seq %d", i, f.ev.Seq, f.ev.Reason, seq)
		}
		woke = append(woke, max(f.at.Sub(answered), 0))
		total = append(total, f.at.Sub(began))
	}
	slices.Sort(woke)
	slices.Sort(total)
	t.Logf("B→A follower wake-up over %d events: after B answered p50 %s p99 %s max %s; from the write's start p50 %s p99 %s max %s",
		n, percentile(woke, 50), percentile(woke, 99), woke[n-1], percentile(total, 50), percentile(total, 99), total[n-1])
	if p := percentile(woke, 50); p > 100*time.Millisecond {
		t.Errorf("p50 of the wake-up is %s, want within 100ms", p)
	}
}

// TestFanoutQueueWatchSeesOtherReplica: a queue watch on replica A sees a
// session created through replica B, and its claim through B, without
// the backstop or a keepalive re-reading.
func TestFanoutQueueWatchSeesOtherReplica(t *testing.T) {
	t.Parallel()
	a, b, _ := startFanoutPair(t, time.Hour)
	b.outpost("watched")
	lw := openWatch(t, a.testServer, a.admin, "/v1/queue?watch=true&outpost=watched")
	// The first may be read by the watch's first list; the second comes
	// while the watch waits.
	for i := range 2 {
		began := time.Now()
		id := b.session("watched").Metadata.SessionID
		ev := nextWatchEvent(t, lw, 3*time.Second)
		if ev.Type != api.WatchModified || ev.Object.Metadata.SessionID != id {
			t.Fatalf("session %d: watch event %s of %s, want the new session %s", i, ev.Type, ev.Object.Metadata.SessionID, id)
		}
		t.Logf("session %d created through B reached A's watch in %s", i, time.Since(began))
		b.mustDo(200, "POST", "/v1/queue/"+id+"/claim", b.admin, api.ClaimRequest{AcceptorID: "w1"}, nil)
		if ev := nextWatchEvent(t, lw, 3*time.Second); ev.Object.Metadata.SessionID != id || ev.Object.Status.AcceptorID == nil || *ev.Object.Status.AcceptorID != "w1" {
			t.Fatalf("after the claim through B: watch event %+v", ev)
		}
	}
}

// nextWatchEvent is liveWatch.next with a deadline shorter than the
// watch's keepalive (15s), after which the watch would read anyway.
func nextWatchEvent(t *testing.T, lw *liveWatch, wait time.Duration) api.WatchEvent {
	t.Helper()
	select {
	case ev, ok := <-lw.events:
		if !ok {
			t.Fatal("the watch stream ended")
		}
		return ev
	case <-time.After(wait):
		t.Fatalf("no watch event within %s", wait)
	}
	return api.WatchEvent{}
}

// killListeners terminates every listen connection of the database: the
// change feed of each replica.
func killListeners(t *testing.T, db fanoutDB) int {
	t.Helper()
	c, err := pgx.Connect(t.Context(), db.url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var n int
	if err := c.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = 'outpost-listen' AND datname = current_database()`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitListeners waits until n change feeds listen on the database: a
// replica's feed connects in the background after it starts.
func waitListeners(t *testing.T, db fanoutDB, n int) {
	t.Helper()
	c, err := pgx.Connect(t.Context(), db.url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	waitfor.True(t, fmt.Sprintf("%d change feeds listening", n), func() bool {
		var got int
		err := c.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = 'outpost-listen' AND datname = current_database()`).Scan(&got)
		return err == nil && got >= n
	})
}

// TestFanoutFollowerAcrossRestart: events committed through B by four
// writers at once, then B stopped and started again and more written
// through it, the change feeds of both replicas cut meanwhile: the
// follower on A reads every event exactly once and in order, without the
// backstop.
func TestFanoutFollowerAcrossRestart(t *testing.T) {
	t.Parallel()
	a, b, db := startFanoutPair(t, time.Hour)
	id := claimedSession(t, b.testServer)
	after := lastSeq(t, a.testServer, id)
	follow := openFollow(t, a.testServer, id, after)

	write := func(ts *testServer, phase string) {
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := range 15 {
					machineEvent(t, ts, id, fmt.Sprintf("%s %d %d", phase, w, i))
				}
			})
		}
		wg.Wait()
	}
	write(b.testServer, "first")
	b.stop()
	b2 := startFanoutReplica(t, db, "b", a.admin, time.Hour) // the same replica, restarted
	waitListeners(t, db, 2)
	var wg sync.WaitGroup
	wg.Go(func() { write(b2.testServer, "second") })
	if n := killListeners(t, db); n < 2 {
		t.Errorf("cut %d change feeds, want both replicas'", n)
	}
	wg.Wait()
	final := lastSeq(t, b2.testServer, id)
	if final != after+120 {
		t.Fatalf("the transcript ends at seq %d, want %d", final, after+120)
	}
	for want := after + 1; want <= final; want++ {
		f := nextFollowed(t, follow, 5*time.Second)
		if f.ev.Seq != want {
			t.Fatalf("follower on A read seq %d, want %d", f.ev.Seq, want)
		}
	}
	select {
	case f := <-follow:
		t.Fatalf("follower read seq %d past the end", f.ev.Seq)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestFanoutBackstop: an event written to the database without a
// notification (as when a replica dies between its commit and the
// notification) reaches a follower on A through the backstop poll.
func TestFanoutBackstop(t *testing.T) {
	t.Parallel()
	a, b, db := startFanoutPair(t, 200*time.Millisecond)
	id := claimedSession(t, b.testServer)
	after := lastSeq(t, a.testServer, id)
	follow := openFollow(t, a.testServer, id, after)
	c, err := pgx.Connect(t.Context(), db.url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	body, _ := json.Marshal(api.Event{Seq: after + 1, SessionID: id, Type: api.EventOutput, Text: "unannounced"})
	if _, err := c.Exec(t.Context(), `INSERT INTO events (session_id, seq, body_json) VALUES ($1, $2, $3)`, id, after+1, string(body)); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	f := nextFollowed(t, follow, 3*time.Second)
	if f.ev.Seq != after+1 || f.ev.Text != "unannounced" {
		t.Fatalf("follower read %+v", f.ev)
	}
	t.Logf("an unannounced event reached the follower in %s (backstop every 200ms)", time.Since(began))
}

// TestFanoutMessageWakesRunner: an interactive llm session runs on A (its
// remote is connected there) and waits for the user; a message sent
// through B reaches A's runner, which gives the model another turn with
// it, without the backstop. The runner's subscription never takes the
// poke for an event.
func TestFanoutMessageWakesRunner(t *testing.T) {
	t.Parallel()
	model := &fakeModel{answers: []string{"Hello.", "Noted."}}
	a, b, _ := startFanoutPair(t, time.Hour, func(o *Options) { o.LLM = model })
	a.outpost("chat")
	var s api.Session
	a.mustDo(201, "POST", "/v1/sessions", a.admin, `{"outpost":"chat","prompt":"Hi.","agent":{"kind":"llm","interactive":true}}`, &s)
	id := s.Metadata.SessionID
	claim := a.claimFor(id, "m")
	r, _ := dialGateway(t, a.srv.gatewayURL, id, claim.Status.ConnectToken)
	r.send(api.Frame{Type: api.FrameHello, SessionID: id})
	r.expect(api.FrameWelcome)
	waitfor.True(t, "the session to wait for the user", func() bool {
		var got api.Session
		a.mustDo(200, "GET", "/v1/sessions/"+id, a.admin, nil, &got)
		return got.Status.StatusDetail == api.DetailWaitingForUser
	})
	began := time.Now()
	b.mustDo(202, "POST", "/v1/sessions/"+id+"/messages", b.admin, api.MessageRequest{Text: "Also this."}, nil)
	waitfor.True(t, "the runner on A to take the message sent through B", func() bool { return len(model.requests()) >= 2 })
	t.Logf("a message through B reached the runner on A in %s", time.Since(began))
	var texts []string
	for _, m := range model.requests()[1].Messages {
		texts = append(texts, m.Role+":"+m.Text)
	}
	if got := strings.Join(texts, "|"); got != "user:Hi.|assistant:Hello.|user:Also this." {
		t.Fatalf("second model request %s", got)
	}
}

// TestTopicsPoke: a poke reaches a follower as how far to replay, the
// highest of the pokes since it last looked; it drops the agent loop's
// subscription instead of handing it anything that looks like an event;
// other sessions are not disturbed.
func TestTopicsPoke(t *testing.T) {
	t.Parallel()
	tp := newTopics()
	agent, follower, other := tp.subscribe("s"), tp.follow("s"), tp.follow("t")
	tp.poke("s", 5)
	tp.poke("s", 3)
	select {
	case <-follower.poked:
	default:
		t.Fatal("the follower was not poked")
	}
	if got := follower.pokedUpTo(); got != 5 {
		t.Fatalf("poked up to %d, want 5", got)
	}
	select {
	case <-agent.lagged:
	default:
		t.Fatal("the agent's subscription was not dropped")
	}
	if len(agent.ch) != 0 || len(other.poked) != 0 {
		t.Fatalf("a poke of s left %d events for the agent and %d pokes for t", len(agent.ch), len(other.poked))
	}
	agent2 := tp.subscribe("t")
	tp.pokeEvery(false)
	<-other.poked
	if got := other.pokedUpTo(); got != pokeAll {
		t.Fatalf("pokeEvery: poked t up to %d, want all", got)
	}
	select {
	case <-agent2.lagged:
		t.Fatal("pokeEvery(false) dropped an agent's subscription")
	default:
	}
	tp.pokeEvery(true)
	<-agent2.lagged
	tp.unsubscribe("t", agent2)
	tp.unsubscribe("s", agent)
	tp.unsubscribe("s", follower)
	tp.unsubscribe("t", other)
	if n := len(tp.subs); n != 0 {
		t.Fatalf("%d sessions followed after every unsubscribe", n)
	}
}

// TestFanoutFencesRemoteOnOtherReplica: a remote connected to A serves a
// claim that is released through B; A cuts the remote off at once (its
// claim's epoch is over), told by the change feed, not the backstop.
func TestFanoutFencesRemoteOnOtherReplica(t *testing.T) {
	t.Parallel()
	a, b, _ := startFanoutPair(t, time.Hour)
	a.outpost("fenced")
	id := a.session("fenced").Metadata.SessionID
	claim := a.claimFor(id, "m")
	r, _ := dialGateway(t, a.srv.gatewayURL, id, claim.Status.ConnectToken)
	r.send(api.Frame{Type: api.FrameHello, SessionID: id})
	r.expect(api.FrameWelcome)
	began := time.Now()
	b.mustDo(200, "POST", "/v1/queue/"+id+"/release", b.admin, api.ClaimRequest{AcceptorID: "m"}, nil)
	for {
		f, err := r.recv()
		if err != nil {
			if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
				t.Fatalf("the connection on A ended with %v, want a policy violation (fenced)", err)
			}
			break
		}
		if f.Type == api.FrameEnd {
			t.Fatalf("the remote was told the session ended: %+v", f)
		}
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("fenced after %s", d)
	}
	t.Logf("a release through B cut the remote on A off in %s", time.Since(began))
}
