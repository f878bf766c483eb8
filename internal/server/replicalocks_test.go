package server

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/postgres"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
	"github.com/outpost-sh/outpost/internal/store/sealed"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// The orderings and the worker presence that one server could keep in
// memory hold across two servers on one PostgreSQL database.

// lockPair is two servers (replicas) on one fresh database, sharing a
// secret key; admin is the admin token, good on both.
type lockPair struct {
	a, b  *testServer
	db    string
	key   []byte
	admin string
}

// startLockPair starts two servers on a fresh database of pg. setA, when
// set, adjusts the first's options; the second gets its LLM too.
func startLockPair(t *testing.T, pg *pgtest.Server, setA func(p *lockPair, o *Options)) *lockPair {
	t.Helper()
	p := &lockPair{db: pg.Database(t), key: make([]byte, 32)}
	_, _ = rand.Read(p.key)
	oa := Options{DatabaseURL: p.db, SecretKey: p.key}
	ob := oa
	if setA != nil {
		setA(p, &oa)
		ob.LLM = oa.LLM
	}
	p.a = startServer(t, oa)
	p.b = startServer(t, ob)
	p.admin = p.a.admin
	p.b.admin = p.admin
	return p
}

// openSealedPG opens the pair's database as its servers do, for a store
// the test wraps and hands to a server as Options.Store.
func (p *lockPair) openSealedPG(t *testing.T) store.Store {
	t.Helper()
	keys, err := sealed.NewKeyring(p.key)
	if err != nil {
		t.Fatal(err)
	}
	st, err := postgres.Open(t.Context(), p.db, postgres.WithKeyring(keys))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestReplicaLocksAndPresence(t *testing.T) {
	t.Parallel()
	pg := pgtest.StartT(t, pgtest.Options{})
	t.Run("DeleteVersusCreate", func(t *testing.T) { t.Parallel(); testDeleteVersusCreateAcross(t, pg) })
	t.Run("MessageVersusEnd", func(t *testing.T) { t.Parallel(); testMessageVersusEndAcross(t, pg) })
	t.Run("Presence", func(t *testing.T) { t.Parallel(); testPresenceAcross(t, pg) })
}

// testDeleteVersusCreateAcross races many session creations through both
// servers against the deletion of their outpost through one: every
// creation either fails (the outpost is gone) or made a session that the
// delete ended, and the deleted outpost keeps no live queue entry.
func testDeleteVersusCreateAcross(t *testing.T, pg *pgtest.Server) {
	p := startLockPair(t, pg, nil)
	const rounds, creators = 4, 24
	for round := range rounds {
		name := fmt.Sprintf("race-%d", round)
		o := p.a.outpost(name)
		start := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		var created []string
		for i := range creators {
			ts := []*testServer{p.a, p.b}[i%2]
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				var s api.Session
				switch code := ts.do("POST", "/v1/sessions", p.admin, `{"outpost":"`+name+`","agent":{"kind":"script","steps":[]}}`, &s); code {
				case 201:
					mu.Lock()
					created = append(created, s.Metadata.SessionID)
					mu.Unlock()
				case 404:
				default:
					t.Errorf("create through the %s server: %d, want 201 or 404", map[bool]string{true: "first", false: "second"}[i%2 == 0], code)
				}
			}()
		}
		deleter := []*testServer{p.a, p.b}[round%2]
		close(start)
		deleter.mustDo(204, "DELETE", "/v1/outposts/"+name, p.admin, nil, nil)
		wg.Wait()

		st := p.a.srv.store
		for _, id := range created {
			sess, err := st.GetSession(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			if !api.IsFinal(sess.Status) || sess.StatusDetail != api.DetailOutpostDeleted {
				t.Errorf("round %d: session %s on the deleted outpost is %s/%s, want ended by the delete", round, id, sess.Status, sess.StatusDetail)
			}
		}
		if entries, n, err := st.ListQueue(t.Context(), store.QueueFilter{OutpostID: o.Metadata.OutpostID}); err != nil || n != 0 {
			t.Errorf("round %d: the deleted outpost keeps %d live queue entries (%v): %+v", round, n, err, entries)
		}
		t.Logf("round %d: %d of %d creations made a session before the delete", round, len(created), creators)
	}
}

// heldLockStore is a store whose exclusive message locks, once taken,
// announce themselves on held and wait for release before they return:
// the holder is paused inside the critical section.
type heldLockStore struct {
	store.Store
	held    chan string
	release chan struct{}
	once    sync.Once
}

func (h *heldLockStore) Lock(ctx context.Context, name string, shared bool) (func(), error) {
	unlock, err := h.Store.Lock(ctx, name, shared)
	if err != nil || !strings.HasPrefix(name, "message:") {
		return unlock, err
	}
	h.once.Do(func() {
		h.held <- name
		<-h.release
	})
	return unlock, nil
}

// testMessageVersusEndAcross pauses the runner of an llm session on the
// first server inside its message lock, as it is about to end the session
// because the model is done, and sends a user message through the second:
// the message waits for the lock (it is seen waiting in pg_locks), and is
// then refused because the session ended — not accepted and left
// unanswered.
func testMessageVersusEndAcross(t *testing.T, pg *pgtest.Server) {
	model := &fakeModel{answers: []string{"Done."}}
	var held *heldLockStore
	p := startLockPair(t, pg, func(p *lockPair, o *Options) {
		o.LLM = model
		held = &heldLockStore{Store: p.openSealedPG(t), held: make(chan string), release: make(chan struct{})}
		o.Store = held
	})
	p.a.outpost("chat")
	var s api.Session
	p.a.mustDo(201, "POST", "/v1/sessions", p.admin, `{"outpost":"chat","prompt":"Do the task.","agent":{"kind":"llm"}}`, &s)
	id := s.Metadata.SessionID
	claim := p.a.claimFor(id, "m")
	r, _ := dialGateway(t, p.a.srv.gatewayURL, id, claim.Status.ConnectToken)
	r.send(api.Frame{Type: api.FrameHello, SessionID: id})
	r.expect(api.FrameWelcome)
	select {
	case name := <-held.held:
		if name != "message:"+id {
			t.Fatalf("held lock %s", name)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the runner never took the message lock to end the session")
	}

	answer := make(chan int, 1)
	go func() {
		answer <- p.b.do("POST", "/v1/sessions/"+id+"/messages", p.admin, api.MessageRequest{Text: "Also the changelog."}, nil)
	}()
	admin, err := pgx.Connect(t.Context(), p.db)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	waitfor.True(t, "the second server's message to wait for the lock", func() bool {
		var n int
		err := admin.QueryRow(t.Context(), `SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n)
		return err == nil && n == 1
	})
	select {
	case code := <-answer:
		t.Fatalf("the message was answered %d while the runner held the lock", code)
	default:
	}
	close(held.release)

	select {
	case code := <-answer:
		if code != 409 {
			t.Fatalf("message after the end: %d, want 409", code)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the message was never answered")
	}
	p.b.mustDo(200, "GET", "/v1/sessions/"+id, p.admin, nil, &s)
	if s.Status.Status != api.StatusExit || s.Status.Usage.ModelCalls != 1 {
		t.Fatalf("session %+v, want exit after 1 model call", s.Status)
	}
	var evs api.EventList
	p.b.mustDo(200, "GET", "/v1/sessions/"+id+"/events", p.admin, nil, &evs)
	for _, ev := range evs.Items {
		if ev.Type == api.EventMessage && ev.Role == api.RoleUser && ev.Text == "Also the changelog." {
			t.Fatalf("the refused message is on the transcript: %+v", ev)
		}
	}
}

// testPresenceAcross heartbeats through one server and reads through the
// other: the acceptor is listed and counted by both, a second instance of
// it is refused through the other, and a goodbye through either removes it.
func testPresenceAcross(t *testing.T, pg *pgtest.Server) {
	p := startLockPair(t, pg, nil)
	p.a.outpost("fleet")
	path := "/v1/outposts/fleet/workers/w-1"
	first := workerInfo("")
	first.Instance, first.PID = "inst-a", 4242
	p.a.mustDo(200, "PUT", path, p.admin, first, nil)
	for _, ts := range []*testServer{p.a, p.b} {
		if l := ts.workers("fleet", p.admin); l.Total != 1 || l.Items[0].Instance != "inst-a" {
			t.Fatalf("workers through %s: %+v, want w-1 of inst-a", ts.url, l)
		}
		if m := metricsText(t, ts); !strings.Contains(m, `outpost_connected_workers{kind="worker",outpost="fleet"} 1`) {
			t.Errorf("metrics of %s lack the worker:\n%s", ts.url, grep(m, "outpost_connected"))
		}
	}
	second := workerInfo("")
	second.Instance, second.PID = "inst-b", 4343
	code, msg := p.b.errorOfBody("PUT", path, second)
	if code != 409 || !strings.Contains(msg, "box-1 (pid 4242)") {
		t.Fatalf("second instance through the other server: %d %q, want 409 naming the holder", code, msg)
	}
	p.b.mustDo(204, "DELETE", path+"?instance=inst-b", p.admin, nil, nil)
	if l := p.a.workers("fleet", p.admin); l.Total != 1 {
		t.Fatalf("another instance's goodbye removed the holder: %+v", l)
	}
	p.b.mustDo(204, "DELETE", path+"?instance=inst-a", p.admin, nil, nil)
	if l := p.a.workers("fleet", p.admin); l.Total != 0 {
		t.Fatalf("after the goodbye through the other server: %+v", l)
	}
	p.b.mustDo(200, "PUT", path, p.admin, second, nil)
}

// errorOfBody sends body and returns the status and error message.
func (ts *testServer) errorOfBody(method, path string, body any) (int, string) {
	ts.t.Helper()
	resp, raw := ts.raw(method, path, ts.admin, "application/json", jsonBody(ts.t, body))
	return resp.StatusCode, string(raw)
}
