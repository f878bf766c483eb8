package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// pair returns a server-side Conn of session sessionID at epoch and the
// remote's end of its WebSocket, over loopback.
func pair(t *testing.T, sessionID string, epoch int64) (*Conn, *websocket.Conn) {
	t.Helper()
	accepted := make(chan *websocket.Conn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		accepted <- ws
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	remote, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = remote.CloseNow() })
	var ws *websocket.Conn
	select {
	case ws = <-accepted:
	case <-ctx.Done():
		t.Fatal("the server side of the WebSocket never came")
	}
	c := NewConn(ws, sessionID, epoch, "acc")
	t.Cleanup(func() { close(c.done); c.CloseNow(); c.Closed(time.Second) })
	return c, remote
}

// closeStatus reads from the remote's end until the server closes it,
// and returns the close status.
func closeStatus(t *testing.T, remote *websocket.Conn) websocket.StatusCode {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		if _, _, err := remote.Read(ctx); err != nil {
			return websocket.CloseStatus(err)
		}
	}
}

// TestHubKeepsOneConnectionPerSession: a newer connection of a session
// replaces the older, which is closed; Fence closes a connection of an
// older claim and leaves the current one; every change wakes the agent
// loop's waiters.
func TestHubKeepsOneConnectionPerSession(t *testing.T) {
	t.Parallel()
	h := NewHub()
	old, oldRemote := pair(t, "s1", 1)
	cur, curRemote := pair(t, "s1", 2)
	wake := h.changed.Wait()
	h.Attach(old)
	select {
	case <-wake:
	default:
		t.Fatal("Attach woke no waiter")
	}
	h.Attach(cur)
	if got := closeStatus(t, oldRemote); got != websocket.StatusPolicyViolation {
		t.Errorf("the replaced connection closed with %v, want a policy violation", got)
	}
	if h.Get("s1") != cur {
		t.Fatal("the hub does not hold the newer connection")
	}
	h.Fence("s1", 2)
	if h.Get("s1") != cur {
		t.Fatal("Fence at the connection's own epoch dropped it")
	}
	if ls := h.Leases(); len(ls) != 1 || ls[0].SessionID != "s1" || ls[0].Epoch != 2 {
		t.Errorf("leases %+v, want s1 at epoch 2", ls)
	}
	h.Fence("s1", 3)
	if h.Get("s1") != nil {
		t.Fatal("Fence past the connection's epoch kept it")
	}
	if got := closeStatus(t, curRemote); got != websocket.StatusPolicyViolation {
		t.Errorf("the fenced connection closed with %v, want a policy violation", got)
	}
	if conn, _ := h.Agents().Conn("s1"); conn != nil {
		t.Error("the agent loop is given a fenced connection")
	}
}
