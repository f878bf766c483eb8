package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// welcomingHandler admits every connection to session s1 under epoch 1 and
// welcomes every hello, noting what the gateway tells it.
type welcomingHandler struct {
	mu      sync.Mutex
	calls   []string
	refused []string // the instances named as serving when one was refused
}

func (h *welcomingHandler) note(call string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, call)
}

func (h *welcomingHandler) heard() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.calls, ", ")
}

func (h *welcomingHandler) Admit(http.ResponseWriter, *http.Request) (store.QueueEntry, func(), bool) {
	return store.QueueEntry{SessionID: "s1", Epoch: 1, AcceptorID: "acc"}, func() {}, true
}

func (h *welcomingHandler) Refused(c *Conn, serving string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refused = append(h.refused, serving)
	h.calls = append(h.calls, "refused "+c.Instance)
}

func (h *welcomingHandler) Hello(_ context.Context, c *Conn, _ store.QueueEntry, _ *api.Frame) (Welcome, error) {
	h.note("hello " + c.Instance)
	return Welcome{Frame: api.Frame{Type: api.FrameWelcome, SessionID: c.SessionID}}, nil
}

func (h *welcomingHandler) Attached(_ context.Context, c *Conn, _ bool) (func(), bool) {
	h.note("attached " + c.Instance)
	return func() { h.note("left " + c.Instance) }, true
}
func (h *welcomingHandler) Result(context.Context, *Conn, api.Frame, []api.Event) bool { return false }
func (h *welcomingHandler) Artifacts(*Conn) Artifacts                                  { return noArtifacts{} }
func (h *welcomingHandler) Restored(context.Context, *Conn, api.Frame)                 {}
func (h *welcomingHandler) Suspended(*Conn, api.Frame)                                 {}
func (h *welcomingHandler) Disconnected(*Conn)                                         {}
func (h *welcomingHandler) DesktopTiles(*Conn, []byte)                                 {}

type noArtifacts struct{}

func (noArtifacts) Frame(context.Context, api.Frame) {}
func (noArtifacts) Chunk(context.Context, []byte)    {}
func (noArtifacts) Close()                           {}

// serveGateway serves a gateway over loopback with h and opts, and
// returns its hub and its WebSocket URL.
func serveGateway(t *testing.T, h Handler, opts Options) (*Hub, string) {
	t.Helper()
	hub := NewHub()
	g := New(hub, NewOutput(OutputConfig{}), h, slog.New(slog.DiscardHandler), opts)
	var served sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		defer served.Done()
		g.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		hub.CloseAll()
		served.Wait()
		srv.Close()
	})
	return hub, "ws" + strings.TrimPrefix(srv.URL, "http")
}

// dialHello dials the gateway as remote instance and sends its hello, and
// returns the connection and the gateway's answer.
func dialHello(ctx context.Context, t *testing.T, url, instance string) (*websocket.Conn, api.Frame) {
	t.Helper()
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = ws.CloseNow() })
	hello, _ := json.Marshal(api.Frame{Type: api.FrameHello, V: int(api.CurrentProtocolVersion), SessionID: "s1", Instance: instance})
	if err := ws.Write(ctx, websocket.MessageText, hello); err != nil {
		t.Fatalf("send hello: %v", err)
	}
	_, data, err := ws.Read(ctx)
	if err != nil {
		t.Fatalf("read the answer to hello of %s: %v", instance, err)
	}
	var f api.Frame
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("answer %s: %v", data, err)
	}
	return ws, f
}

// answerPings reads from ws until it closes, which is what makes the
// WebSocket answer the gateway's pings; the returned channel gets the
// close status.
func answerPings(ctx context.Context, ws *websocket.Conn) <-chan websocket.StatusCode {
	done := make(chan websocket.StatusCode, 1)
	go func() {
		for {
			if _, _, err := ws.Read(ctx); err != nil {
				done <- websocket.CloseStatus(err)
				return
			}
		}
	}()
	return done
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestSecondLiveInstanceIsRefused: while one remote instance serves a
// session and answers pings, another instance under the same claim is
// refused with an error frame that names both and a policy-violation
// close; the Handler hears of the refusal and never of its hello, and the
// first stays attached.
func TestSecondLiveInstanceIsRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	h := &welcomingHandler{}
	hub, url := serveGateway(t, h, Options{})
	first, f := dialHello(ctx, t, url, "i1")
	if f.Type != api.FrameWelcome {
		t.Fatalf("the first instance got %+v, want a welcome", f)
	}
	answerPings(ctx, first)
	waitFor(ctx, t, "the first instance to attach", func() bool { c := hub.Get("s1"); return c != nil && c.Instance == "i1" })

	second, f := dialHello(ctx, t, url, "i2")
	if f.Type != api.FrameError || !strings.Contains(f.Reason, "another remote (instance i1) is serving session s1") || !strings.Contains(f.Reason, "this one (instance i2) is refused") {
		t.Fatalf("the second instance got %+v, want an error frame naming both instances", f)
	}
	if _, _, err := second.Read(ctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("after the refusal: %v, want a policy-violation close", err)
	}
	if c := hub.Get("s1"); c == nil || c.Instance != "i1" {
		t.Fatalf("after the refusal the session's connection is %+v, want instance i1's", c)
	}
	if got := h.heard(); got != "hello i1, attached i1, refused i2" {
		t.Errorf("the Handler heard %q, want hello i1, attached i1, refused i2", got)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.refused) != 1 || h.refused[0] != "i1" {
		t.Errorf("Refused named %q as serving, want [i1]", h.refused)
	}
}

// TestDeadInstanceIsReplaced: a remote instance that no longer answers
// pings (it reads nothing: its process is stuck or gone behind an open
// socket) is cut when a new instance of the same claim says hello, and
// the new one is welcomed in its place at once, not after a ping period.
func TestDeadInstanceIsReplaced(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	h := &welcomingHandler{}
	// Pings far apart: only the check at the second hello can find the
	// first instance dead within the test.
	hub, url := serveGateway(t, h, Options{PingEvery: time.Hour})
	if _, f := dialHello(ctx, t, url, "i1"); f.Type != api.FrameWelcome {
		t.Fatalf("the first instance got %+v, want a welcome", f)
	}
	waitFor(ctx, t, "the first instance to attach", func() bool { return hub.Get("s1") != nil })

	start := time.Now()
	second, f := dialHello(ctx, t, url, "i2")
	if f.Type != api.FrameWelcome {
		t.Fatalf("the second instance got %+v, want a welcome: the first one does not answer pings", f)
	}
	answerPings(ctx, second)
	waitFor(ctx, t, "the second instance to attach", func() bool { c := hub.Get("s1"); return c != nil && c.Instance == "i2" })
	waitFor(ctx, t, "the first instance to leave", func() bool { return strings.Contains(h.heard(), "left i1") })
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the new instance took %v to replace the dead one", d)
	}
	if strings.Contains(h.heard(), "refused") {
		t.Errorf("the Handler heard %q: a dead instance refused the new one", h.heard())
	}
}

// TestSilentRemoteIsCut: an attached remote that does not answer pings
// (it reads nothing) has its connection cut after a ping period and a
// pong's wait, and leaves the hub, so its claim starts its reconnect
// grace; one that answers stays attached through many pings.
func TestSilentRemoteIsCut(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	const every = 50 * time.Millisecond

	h := &welcomingHandler{}
	hub, url := serveGateway(t, h, Options{PingEvery: every})
	ws, f := dialHello(ctx, t, url, "answers")
	if f.Type != api.FrameWelcome {
		t.Fatalf("got %+v, want a welcome", f)
	}
	closed := answerPings(ctx, ws)
	waitFor(ctx, t, "the remote to attach", func() bool { return hub.Get("s1") != nil })
	held := time.NewTimer(10 * every)
	select {
	case st := <-closed:
		t.Fatalf("a remote that answers pings was closed (%v)", st)
	case <-held.C:
	}
	if hub.Get("s1") == nil || strings.Contains(h.heard(), "left") {
		t.Fatalf("a remote that answers pings left the hub; the Handler heard %q", h.heard())
	}

	silent := &welcomingHandler{}
	hub, url = serveGateway(t, silent, Options{PingEvery: every})
	if _, f := dialHello(ctx, t, url, "silent"); f.Type != api.FrameWelcome {
		t.Fatalf("got %+v, want a welcome", f)
	}
	waitFor(ctx, t, "the Handler to hear the silent remote attach", func() bool { return strings.Contains(silent.heard(), "attached silent") })
	waitFor(ctx, t, "the silent remote to leave the hub", func() bool { return hub.Get("s1") == nil })
	waitFor(ctx, t, "the Handler to hear it leave", func() bool { return strings.Contains(silent.heard(), "left silent") })
}
