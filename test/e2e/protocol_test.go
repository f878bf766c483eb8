//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
)

// versionGateway is a gateway of another protocol range than this build's:
// it answers each hello with answer, and records the versions it was
// spoken to in.
type versionGateway struct {
	answer func(hello api.Frame) []api.Frame

	mu     sync.Mutex
	hellos []int
}

func (g *versionGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	_, b, err := c.Read(ctx)
	if err != nil {
		return
	}
	var hello api.Frame
	if json.Unmarshal(b, &hello) != nil {
		return
	}
	g.mu.Lock()
	g.hellos = append(g.hellos, hello.V)
	g.mu.Unlock()
	for _, f := range g.answer(hello) {
		b, _ := json.Marshal(f)
		if c.Write(ctx, websocket.MessageText, b) != nil {
			return
		}
	}
	c.Close(websocket.StatusNormalClosure, "")
}

func (g *versionGateway) seen() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.hellos...)
}

// runRemoteAgainst runs `outpost remote serve` against g until it exits.
func runRemoteAgainst(t *testing.T, g *versionGateway) (string, error) {
	t.Helper()
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
		"OUTPOST_GATEWAY_URL=ws" + strings.TrimPrefix(srv.URL, "http") + api.GatewayPath,
		"OUTPOST_CONNECT_TOKEN=oct_test", "OUTPOST_SESSION_ID=ses_protocol", "OUTPOST_STATE_DIR=" + t.TempDir()}
	r := startExact(t, "remote", env, t.TempDir(), "remote", "serve")
	err := waitExit(t, r, 60*time.Second)
	return r.out.String(), err
}

// TestRemoteRefusedProtocolVersionExits3: a gateway whose protocol range
// this remote cannot speak refuses it; `outpost remote serve` exits 3 at
// once (not api.RemoteExitRejected: no other remote serves the session, so
// its claimer releases the claim), saying the gateway's reason and its own
// range.
func TestRemoteRefusedProtocolVersionExits3(t *testing.T) {
	t.Parallel()
	future := int(api.CurrentProtocolVersion) + 5
	reason := "this server accepts gateway protocol versions 7 to 9: upgrade the remote"
	g := &versionGateway{answer: func(api.Frame) []api.Frame {
		return []api.Frame{{V: future, Type: api.FrameError, Reason: reason}}
	}}
	out, err := runRemoteAgainst(t, g)
	if exitCode(err) != 3 || !strings.Contains(out, reason) || !strings.Contains(out, "its build speaks") {
		t.Errorf("remote exit %v, want 3 with the gateway's reason and the remote's range:\n%s", err, out)
	}
	if got := g.seen(); len(got) != 1 || got[0] != int(api.CurrentProtocolVersion) {
		t.Errorf("hellos of versions %v, want one of version %d", got, api.CurrentProtocolVersion)
	}
}

// TestRemoteStepsDownToPreviousRelease: a gateway of the previous release
// speaks only the previous version and refuses the current one with an
// error frame of its version, as that release's server did; the remote
// reconnects speaking it and serves the session to its end (exit 0).
func TestRemoteStepsDownToPreviousRelease(t *testing.T) {
	t.Parallel()
	old := int(api.CurrentProtocolVersion) - 1
	g := &versionGateway{answer: func(hello api.Frame) []api.Frame {
		if hello.V != old {
			return []api.Frame{{V: old, Type: api.FrameError, Reason: "gateway protocol version 2 is not supported; this server speaks version 1: run a matching outpost binary"}}
		}
		return []api.Frame{{V: old, Type: api.FrameWelcome}, {V: old, Type: api.FrameEnd, Reason: "done"}}
	}}
	out, err := runRemoteAgainst(t, g)
	if err != nil {
		t.Fatalf("remote exit %v, want 0:\n%s", err, out)
	}
	if got := g.seen(); len(got) != 2 || got[0] != int(api.CurrentProtocolVersion) || got[1] != old {
		t.Errorf("hellos of versions %v, want %d then %d", got, api.CurrentProtocolVersion, old)
	}
}
