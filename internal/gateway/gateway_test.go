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

// refusingHandler admits every connection and refuses every hello, the
// way the server refuses a second remote instance of one claim.
type refusingHandler struct {
	mu    sync.Mutex
	calls []string
}

func (h *refusingHandler) note(call string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, call)
}

func (h *refusingHandler) Admit(http.ResponseWriter, *http.Request) (store.QueueEntry, func(), bool) {
	h.note("admit")
	return store.QueueEntry{SessionID: "s1", Epoch: 1, AcceptorID: "acc"}, func() { h.note("done") }, true
}

func (h *refusingHandler) Refused(*Conn, string) { h.note("refused") }

func (h *refusingHandler) Hello(_ context.Context, c *Conn, _ store.QueueEntry, _ *api.Frame) (Welcome, error) {
	h.note("hello " + c.Instance)
	return Welcome{Refused: "another remote serves session s1", CloseReason: "another remote is serving this session"}, nil
}

func (h *refusingHandler) Attached(context.Context, *Conn, bool) (func(), bool) {
	h.note("attached")
	return func() {}, true
}
func (h *refusingHandler) Result(context.Context, *Conn, api.Frame, []api.Event) bool {
	h.note("result")
	return false
}
func (h *refusingHandler) Artifacts(*Conn) Artifacts                  { h.note("artifacts"); return nil }
func (h *refusingHandler) Restored(context.Context, *Conn, api.Frame) { h.note("restored") }
func (h *refusingHandler) Suspended(*Conn, api.Frame)                 { h.note("suspended") }
func (h *refusingHandler) Disconnected(*Conn)                         { h.note("disconnected") }
func (h *refusingHandler) DesktopTiles(*Conn, []byte)                 {}

// TestRefusedHelloIsNeverAttached: a hello the Handler refuses is answered
// with an error frame in the remote's version and a policy-violation close;
// the connection never reaches the hub, and the Handler hears of nothing
// after the hello but the end of the connection.
func TestRefusedHelloIsNeverAttached(t *testing.T) {
	t.Parallel()
	h := &refusingHandler{}
	hub := NewHub()
	g := New(hub, NewOutput(OutputConfig{}), h, slog.New(slog.DiscardHandler), Options{})
	served := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(served)
		g.ServeHTTP(w, r)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer ws.CloseNow()
	hello, _ := json.Marshal(api.Frame{Type: api.FrameHello, V: int(api.CurrentProtocolVersion), SessionID: "s1", Instance: "i2"})
	if err := ws.Write(ctx, websocket.MessageText, hello); err != nil {
		t.Fatalf("send hello: %v", err)
	}
	_, data, err := ws.Read(ctx)
	if err != nil {
		t.Fatalf("read the answer to hello: %v", err)
	}
	var f api.Frame
	if err := json.Unmarshal(data, &f); err != nil || f.Type != api.FrameError || f.Reason != "another remote serves session s1" || f.V != int(api.CurrentProtocolVersion) {
		t.Fatalf("answer %s (%v), want the refusal in an error frame", data, err)
	}
	if _, _, err := ws.Read(ctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("after the refusal: %v, want a policy-violation close", err)
	}
	select {
	case <-served:
	case <-ctx.Done():
		t.Fatal("the gateway's handler did not return after the refusal")
	}
	if hub.Get("s1") != nil {
		t.Error("a refused remote was attached")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if got := strings.Join(h.calls, ", "); got != "admit, hello i2, done" {
		t.Errorf("the Handler heard %q, want admit, hello i2, done", got)
	}
}
