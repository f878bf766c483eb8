package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/llm"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlite"
)

// waitTimeout bounds every wait of these tests for the loop.
const waitTimeout = 15 * time.Second

// harness runs a Loop on a real SQLite store, with the server's parts
// around it played by small in-memory types: a feed, a gateway whose
// connections the test answers, message locks, an end transition and a
// fake clock.
type harness struct {
	t      *testing.T
	store  *countingStore
	feed   *memFeed
	gw     *fakeGateway
	msgs   *memMessages
	clock  *clockwork.FakeClock
	ended  chan string // session ids, as they end
	loop   *Loop
	cancel context.CancelFunc
	// beforeFinish becomes the next loop's Options.BeforeFinish.
	beforeFinish func(sessionID string)
}

// newHarness opens a store in a temporary directory and starts a loop on
// it with llm as its model provider (nil: none).
func newHarness(t *testing.T, provider llm.Provider) *harness {
	t.Helper()
	return newHarnessWith(t, provider, nil)
}

// newHarnessWith is newHarness with an Options.BeforeFinish hook.
func newHarnessWith(t *testing.T, provider llm.Provider, beforeFinish func(sessionID string)) *harness {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "outpost.db"))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.CreateOutpost(t.Context(), store.Outpost{ID: "op_1", Name: "test", Platform: api.PlatformLinux, CreatedAt: time.Now()}); err != nil {
		t.Fatalf("create outpost: %v", err)
	}
	h := &harness{t: t, store: &countingStore{Store: st}, feed: newMemFeed(), gw: newFakeGateway(),
		msgs: newMemMessages(), clock: clockwork.NewFakeClock(), ended: make(chan string, 16), beforeFinish: beforeFinish}
	h.start(provider)
	return h
}

// start runs a new loop on the harness's store, as after a restart.
func (h *harness) start(provider llm.Provider) {
	ctx, cancel := context.WithCancel(context.Background())
	h.loop = New(Options{Store: h.store, Feed: h.feed, Gateway: h.gw, Messages: h.msgs, Ender: h,
		LLM: provider, ToolResultLimit: 2000, Clock: h.clock, BeforeFinish: h.beforeFinish})
	h.loop.Start(ctx)
	h.cancel = cancel
	h.t.Cleanup(h.stop)
}

// stop stops the loop and waits for its runners.
func (h *harness) stop() {
	h.cancel()
	h.loop.Stop()
}

// End is the server's end transition, cut down to the session.
func (h *harness) End(ctx context.Context, sessionID, status, detail, reason string) (func(), error) {
	now := h.clock.Now()
	m, err := h.store.UpdateSession(ctx, sessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		if api.IsFinal(sess.Status) {
			return store.Mutation{}, nil
		}
		sess.Status, sess.StatusDetail, sess.Reason = status, detail, reason
		sess.UpdatedAt, sess.EndedAt = now, &now
		return store.Mutation{Session: &sess, Events: []api.Event{statusEvent(sess, now),
			{Type: api.EventEnd, Time: now.UnixMilli(), Status: status, StatusDetail: detail, Reason: reason}}}, nil
	})
	if err != nil || m.Session == nil {
		return func() {}, err
	}
	h.feed.Publish(sessionID, m)
	return func() {
		h.loop.StopSession(sessionID)
		h.ended <- sessionID
	}, nil
}

// EndIn is End's change in the caller's transaction.
func (h *harness) EndIn(sess *store.Session, _ store.QueueEntry, m *store.Mutation, now time.Time, status, detail, reason string) {
	sess.Status, sess.StatusDetail, sess.Reason = status, detail, reason
	sess.UpdatedAt, sess.EndedAt = now, &now
	m.Session = sess
	m.Events = append(m.Events, statusEvent(*sess, now),
		api.Event{Type: api.EventEnd, Time: now.UnixMilli(), Status: status, StatusDetail: detail, Reason: reason})
}

// Ended is what follows End's transaction.
func (h *harness) Ended(sessionID, _, _, _ string) func() {
	return func() {
		h.loop.StopSession(sessionID)
		h.ended <- sessionID
	}
}

// session creates a running session of agent with its prompt as the first
// user message, and connects a remote for it.
func (h *harness) session(id string, spec api.SessionSpec) *fakeConn {
	h.t.Helper()
	now := h.clock.Now()
	spec.Outpost = "test"
	sess := store.Session{ID: id, OutpostID: "op_1", Spec: spec, Status: api.StatusRunning, StatusDetail: api.DetailWorking,
		CreatedAt: now, UpdatedAt: now, StartedAt: &now}
	var evs []api.Event
	if spec.Prompt != "" {
		evs = append(evs, api.Event{Type: api.EventMessage, Role: api.RoleUser, Text: spec.Prompt, Time: now.UnixMilli()})
	}
	e := &store.QueueEntry{SessionID: id, OutpostID: "op_1", Kind: api.KindNew, Platform: api.PlatformLinux,
		Phase: api.PhasePending, SessionStatus: api.QueueSessionPending, CreatedAt: now, UpdatedAt: now}
	if err := h.store.CreateSession(h.t.Context(), sess, e, evs); err != nil {
		h.t.Fatalf("create session: %v", err)
	}
	return h.connect(id)
}

// connect attaches a new remote connection to the session and starts its
// runner, as the gateway does after a hello.
func (h *harness) connect(id string) *fakeConn {
	c := h.gw.attach(id)
	if !h.loop.Ensure(id) {
		h.t.Fatal("the loop refused a runner")
	}
	return c
}

// answer delivers the result of call seq on c and waits for its ack.
func (h *harness) answer(c *fakeConn, seq int64, ok bool, value, errText string) {
	h.t.Helper()
	h.loop.Deliver(h.t.Context(), c.sessionID, c, api.Frame{Type: api.FrameResult, Seq: seq, OK: ok, Value: json.RawMessage(value), Error: errText}, nil)
	if got := c.expectAck(h.t); got != seq {
		h.t.Fatalf("ack of %d, want %d", got, seq)
	}
}

// answerWithOutput delivers the result of call seq on c with the output
// events the gateway had not written yet, as the gateway does, and
// reports whether the runner took them.
func (h *harness) answerWithOutput(c *fakeConn, seq int64, ok bool, value string, output ...api.Event) bool {
	h.t.Helper()
	return h.loop.Deliver(h.t.Context(), c.sessionID, c, api.Frame{Type: api.FrameResult, Seq: seq, OK: ok, Value: json.RawMessage(value)}, output)
}

// outputEvent is an output event of call seq as the gateway makes one.
func (h *harness) outputEvent(seq int64, text string) api.Event {
	return api.Event{Type: api.EventOutput, Time: h.clock.Now().UnixMilli(), CallSeq: seq, Stream: "stdout", Text: text}
}

// output records output of call seq as the server's output flusher does.
func (h *harness) output(sessionID string, seq int64, text string) {
	h.t.Helper()
	evs := []api.Event{{Type: api.EventOutput, Time: h.clock.Now().UnixMilli(), CallSeq: seq, Stream: "stdout", Text: text}}
	if err := h.store.AppendEvents(h.t.Context(), sessionID, evs); err != nil {
		h.t.Fatalf("append output: %v", err)
	}
	h.feed.Publish(sessionID, store.Mutation{Events: evs})
}

// message records a user message as the server's messages endpoint does.
func (h *harness) message(sessionID, text string) {
	h.t.Helper()
	m := h.recordMessage(sessionID, text)
	h.feed.Publish(sessionID, m)
	h.msgs.notify()
}

// recordMessage commits a user message under the session's message lock
// and publishes nothing.
func (h *harness) recordMessage(sessionID, text string) store.Mutation {
	h.t.Helper()
	unlock, _ := h.msgs.Lock(h.t.Context(), sessionID)
	m, err := h.store.UpdateSession(h.t.Context(), sessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		return store.Mutation{Events: []api.Event{{Type: api.EventMessage, Role: api.RoleUser, Text: text, Time: h.clock.Now().UnixMilli()}}}, nil
	})
	unlock()
	if err != nil {
		h.t.Fatalf("record message: %v", err)
	}
	return m
}

// waitEnd waits for the session to end and returns it.
func (h *harness) waitEnd(id string) store.Session {
	h.t.Helper()
	select {
	case got := <-h.ended:
		if got != id {
			h.t.Fatalf("session %s ended, want %s", got, id)
		}
	case <-time.After(waitTimeout):
		h.t.Fatalf("session %s did not end", id)
	}
	sess, err := h.store.GetSession(h.t.Context(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return sess
}

// events returns the session's transcript.
func (h *harness) events(id string) []api.Event {
	h.t.Helper()
	evs, err := h.store.Store.ListEvents(h.t.Context(), id, 0, 0) // not counted
	if err != nil {
		h.t.Fatal(err)
	}
	return evs
}

// countingStore counts the reads the loop makes of the transcript and the
// calls.
type countingStore struct {
	store.Store
	listEvents, listCalls atomic.Int64
	updates               atomic.Int64 // UpdateSession transactions
	appends               atomic.Int64 // AppendEvents transactions
	getSessions           atomic.Int64
}

func (s *countingStore) AppendEvents(ctx context.Context, sessionID string, events []api.Event) error {
	s.appends.Add(1)
	return s.Store.AppendEvents(ctx, sessionID, events)
}

func (s *countingStore) GetSession(ctx context.Context, id string) (store.Session, error) {
	s.getSessions.Add(1)
	return s.Store.GetSession(ctx, id)
}

func (s *countingStore) UpdateSession(ctx context.Context, id string, fn func(store.Session, store.QueueEntry) (store.Mutation, error)) (store.Mutation, error) {
	s.updates.Add(1)
	return s.Store.UpdateSession(ctx, id, fn)
}

func (s *countingStore) ListEvents(ctx context.Context, sessionID string, after int64, limit int) ([]api.Event, error) {
	s.listEvents.Add(1)
	return s.Store.ListEvents(ctx, sessionID, after, limit)
}

func (s *countingStore) ListCalls(ctx context.Context, sessionID string) ([]store.Call, error) {
	s.listCalls.Add(1)
	return s.Store.ListCalls(ctx, sessionID)
}

// memFeed is an in-memory committed-event feed.
type memFeed struct {
	mu   sync.Mutex // guards subs
	subs map[string]map[*memSub]bool
}

func newMemFeed() *memFeed { return &memFeed{subs: map[string]map[*memSub]bool{}} }

func (f *memFeed) Publish(sessionID string, m store.Mutation) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for sub := range f.subs[sessionID] {
		for _, ev := range m.Events {
			select {
			case sub.ch <- ev:
			default: // full: the follower lost events
				if !sub.lost {
					sub.lost = true
					close(sub.lagged)
				}
			}
		}
	}
}

func (f *memFeed) Subscribe(sessionID string) Subscription {
	sub := &memSub{f: f, sessionID: sessionID, ch: make(chan api.Event, 64), lagged: make(chan struct{})}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.subs[sessionID] == nil {
		f.subs[sessionID] = map[*memSub]bool{}
	}
	f.subs[sessionID][sub] = true
	return sub
}

type memSub struct {
	f         *memFeed
	sessionID string
	ch        chan api.Event
	lagged    chan struct{}
	lost      bool // guarded by f.mu
}

func (s *memSub) Events() <-chan api.Event { return s.ch }
func (s *memSub) Lagged() <-chan struct{}  { return s.lagged }
func (s *memSub) Close() {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	delete(s.f.subs[s.sessionID], s)
}

// memMessages is one message lock per session and a wake-up channel.
type memMessages struct {
	mu    sync.Mutex // guards locks and wake
	locks map[string]*sync.Mutex
	wake  chan struct{}
}

func newMemMessages() *memMessages {
	return &memMessages{locks: map[string]*sync.Mutex{}, wake: make(chan struct{})}
}

func (m *memMessages) Lock(_ context.Context, sessionID string) (func(), error) {
	m.mu.Lock()
	l := m.locks[sessionID]
	if l == nil {
		l = &sync.Mutex{}
		m.locks[sessionID] = l
	}
	m.mu.Unlock()
	l.Lock()
	return l.Unlock, nil
}

func (m *memMessages) Arrived() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.wake
}

func (m *memMessages) notify() {
	m.mu.Lock()
	defer m.mu.Unlock()
	close(m.wake)
	m.wake = make(chan struct{})
}

// fakeGateway holds each session's one live connection.
type fakeGateway struct {
	mu      sync.Mutex // guards conns and changed
	conns   map[string]*fakeConn
	changed chan struct{}
}

func newFakeGateway() *fakeGateway {
	return &fakeGateway{conns: map[string]*fakeConn{}, changed: make(chan struct{})}
}

func (g *fakeGateway) Conn(sessionID string) (Conn, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c := g.conns[sessionID]; c != nil {
		return c, g.changed
	}
	return nil, g.changed
}

// attach makes a new connection the session's, ending the old one.
func (g *fakeGateway) attach(sessionID string) *fakeConn {
	c := &fakeConn{sessionID: sessionID, calls: make(chan api.Frame, 64), acks: make(chan int64, 64), done: make(chan struct{})}
	g.mu.Lock()
	if old := g.conns[sessionID]; old != nil {
		close(old.done)
	}
	g.conns[sessionID] = c
	close(g.changed)
	g.changed = make(chan struct{})
	g.mu.Unlock()
	return c
}

// fakeConn is a remote connection whose calls and acks the test reads.
type fakeConn struct {
	sessionID string
	calls     chan api.Frame
	acks      chan int64
	done      chan struct{}
}

func (c *fakeConn) Call(ctx context.Context, seq int64, tool string, args json.RawMessage) error {
	c.calls <- api.Frame{Type: api.FrameCall, Seq: seq, Tool: tool, Args: args}
	return nil
}

func (c *fakeConn) Ack(ctx context.Context, seq int64) error {
	c.acks <- seq
	return nil
}

func (c *fakeConn) Done() <-chan struct{} { return c.done }

// expectCall waits for the next call.
func (c *fakeConn) expectCall(t *testing.T) api.Frame {
	t.Helper()
	select {
	case f := <-c.calls:
		return f
	case <-time.After(waitTimeout):
		t.Fatal("no call came")
		return api.Frame{}
	}
}

func (c *fakeConn) expectAck(t *testing.T) int64 {
	t.Helper()
	select {
	case seq := <-c.acks:
		return seq
	case <-time.After(waitTimeout):
		t.Fatal("no ack came")
		return 0
	}
}

// fakeOpenAI is an OpenAI-compatible Chat Completions server on loopback
// that answers with scripted turns; the real llm client talks to it.
type fakeOpenAI struct {
	srv   *httptest.Server
	mu    sync.Mutex // guards turns, n and outage
	turns []map[string]any
	n     int
	// outage are failures answered before the next turn, in order: an
	// HTTP status (with Retry-After: 0), or 0 for a dropped connection.
	outage []int
}

// fail makes the server answer the next requests with the failures of
// outage before it goes on with its turns.
func (f *fakeOpenAI) fail(outage ...int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.outage = append(f.outage, outage...)
}

func newFakeOpenAI(t *testing.T, turns ...map[string]any) *fakeOpenAI {
	f := &fakeOpenAI{turns: turns}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		if len(f.outage) > 0 {
			status := f.outage[0]
			f.outage = f.outage[1:]
			f.mu.Unlock()
			if status == 0 {
				if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
					_ = conn.Close()
				}
				return
			}
			w.Header().Set("Retry-After", "0")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, `{"error":{"message":"the provider is having an outage"}}`)
			return
		}
		var msg map[string]any
		if f.n < len(f.turns) {
			msg = f.turns[f.n]
		}
		f.n++
		n := f.n
		f.mu.Unlock()
		if msg == nil {
			http.Error(w, `{"error":{"message":"the script has no more turns"}}`, http.StatusBadRequest)
			return
		}
		reason := "stop"
		if _, ok := msg["tool_calls"]; ok {
			reason = "tool_calls"
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": fmt.Sprintf("chatcmpl-%d", n), "object": "chat.completion", "created": 1, "model": "test-model",
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": reason}},
			"usage":   map[string]any{"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
		})
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// say is a turn of the model with text and no tool calls.
func say(text string) map[string]any { return map[string]any{"role": "assistant", "content": text} }

// use is a turn of the model asking for tool calls (id, name, arguments).
func use(calls ...[3]string) map[string]any {
	var tcs []any
	for _, c := range calls {
		tcs = append(tcs, map[string]any{"id": c[0], "type": "function", "function": map[string]any{"name": c[1], "arguments": c[2]}})
	}
	return map[string]any{"role": "assistant", "content": "", "tool_calls": tcs}
}

// recordingProvider is the real llm client of a fake server, keeping the
// requests the loop made.
type recordingProvider struct {
	llm.Provider
	mu   sync.Mutex // guards reqs
	reqs []llm.Request
}

func newProvider(t *testing.T, f *fakeOpenAI) *recordingProvider {
	t.Helper()
	p, err := llm.New(llm.Config{Provider: llm.ProviderOpenAI, BaseURL: f.srv.URL + "/v1", Model: "test-model", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	return &recordingProvider{Provider: p}
}

func (p *recordingProvider) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	p.mu.Lock()
	p.reqs = append(p.reqs, req)
	p.mu.Unlock()
	return p.Provider.Complete(ctx, req)
}

func (p *recordingProvider) requests() []llm.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]llm.Request(nil), p.reqs...)
}
