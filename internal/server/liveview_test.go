package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image"
	"image/draw"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/desktop"
	"github.com/outpost-sh/outpost/internal/remote"
	"github.com/outpost-sh/outpost/internal/waitfor"
	"github.com/outpost-sh/outpost/internal/web"
)

// needDesktop skips a test without Xvfb and xsetroot (CI has both:
// scripts/test-deps.sh).
func needDesktop(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath("xsetroot")
	if desktop.XvfbPath() == "" || err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("Xvfb or xsetroot is missing (scripts/test-deps.sh installs them)")
		}
		t.Skip("Xvfb or xsetroot is not installed (apt-get install xvfb x11-xserver-utils)")
	}
}

// runDesktopRemote serves session id with the real remote and a virtual
// desktop, in process.
func runDesktopRemote(t *testing.T, ts *testServer, id, work string) {
	t.Helper()
	claim := ts.claimFor(id, "m1")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- remote.Serve(ctx, remote.Options{
			GatewayURL: ts.srv.gatewayURL, ConnectToken: claim.Status.ConnectToken, SessionID: id,
			StateDir: t.TempDir(), WorkDir: work, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Capabilities: &api.Capabilities{OS: "test", Tools: api.ToolNames()},
			Desktop:      &remote.DesktopOptions{WindowManager: "none"},
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("remote: %v", err)
		}
	})
}

// viewer is a test's live-view client.
type viewer struct {
	t     *testing.T
	ws    *websocket.Conn
	msgs  chan api.DesktopMessage
	tiles chan api.DesktopTiles
	bytes chan int
	// closeErr is why the socket's reading ended; set before msgs closes.
	closeErr error
}

func dialViewer(t *testing.T, ts *testServer, id, token string) (*viewer, api.DesktopMessage) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(ts.url, "http") + strings.Replace(api.DesktopPath, "{session}", id, 1)
	ws, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		t.Fatalf("dial the live desktop: %v", err)
	}
	ws.SetReadLimit(64 << 20)
	v := &viewer{t: t, ws: ws, msgs: make(chan api.DesktopMessage, 64), tiles: make(chan api.DesktopTiles, 1024), bytes: make(chan int, 1024)}
	go func() {
		for {
			typ, b, err := ws.Read(context.Background())
			if err != nil {
				v.closeErr = err
				close(v.msgs)
				return
			}
			if typ == websocket.MessageBinary {
				f, err := api.ParseDesktopTiles(b)
				if err != nil {
					t.Errorf("viewer: %v", err)
					continue
				}
				v.bytes <- len(b)
				v.tiles <- f
				continue
			}
			var m api.DesktopMessage
			if err := json.Unmarshal(b, &m); err != nil {
				t.Errorf("viewer: %v", err)
			}
			v.msgs <- m
		}
	}()
	t.Cleanup(func() { ws.CloseNow() })
	return v, v.msg(api.DesktopMsgHello)
}

func (v *viewer) send(m api.DesktopMessage) {
	v.t.Helper()
	b, _ := json.Marshal(m)
	if err := v.ws.Write(context.Background(), websocket.MessageText, b); err != nil {
		v.t.Fatal(err)
	}
}

// msg waits for the next JSON message of type typ.
func (v *viewer) msg(typ string) api.DesktopMessage {
	v.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m, ok := <-v.msgs:
			if !ok {
				v.t.Fatalf("the live desktop closed while waiting for %s", typ)
			}
			if m.Type == typ {
				if m.V != api.DesktopProtocolVersion {
					v.t.Errorf("message version %d", m.V)
				}
				return m
			}
		case <-deadline:
			v.t.Fatalf("no %s message", typ)
		}
	}
}

// frame waits for the next frame that satisfies ok.
func (v *viewer) frame(what string, ok func(api.DesktopTiles) bool) api.DesktopTiles {
	v.t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case f := <-v.tiles:
			if ok(f) {
				return f
			}
		case <-deadline:
			v.t.Fatalf("no frame: %s", what)
		}
	}
}

func tileAt(f api.DesktopTiles, x, y int) *api.DesktopTile {
	for i := range f.Tiles {
		if f.Tiles[i].X == x && f.Tiles[i].Y == y {
			return &f.Tiles[i]
		}
	}
	return nil
}

func decodeRGBA(t *testing.T, b []byte) *image.RGBA {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out := image.NewRGBA(image.Rect(0, 0, img.Bounds().Dx(), img.Bounds().Dy()))
	draw.Draw(out, out.Rect, img, img.Bounds().Min, draw.Src)
	return out
}

func desktopEvents(ts *testServer, id string) []api.Event {
	var l api.EventList
	ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events?limit=1000", ts.admin, nil, &l)
	var out []api.Event
	for _, e := range l.Items {
		if e.Type == api.EventDesktop {
			out = append(out, e)
		}
	}
	return out
}

// resultOf returns the result event of the call of tool numbered n (from 1)
// among that tool's calls, if it arrived.
func resultOf(ts *testServer, id, tool string, n int) (api.Event, bool) {
	var l api.EventList
	ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events?limit=1000", ts.admin, nil, &l)
	seqs := map[int64]bool{}
	i := 0
	for _, e := range l.Items {
		if e.Type == api.EventCall && e.Tool == tool {
			i++
			if i == n {
				seqs[e.CallSeq] = true
			}
		}
		if e.Type == api.EventResult && seqs[e.CallSeq] {
			return e, true
		}
	}
	return api.Event{}, false
}

// TestLiveDesktop: viewers watch a session's desktop over its remote's
// gateway connection: a keyframe first, nothing while the screen is idle,
// the changed tiles when a program paints, pixel for pixel what the
// computer tool sees; two viewers cost one stream; a read-only viewer's
// input and takeover are refused by the server and a machine token cannot
// look; a person's takeover holds the agent's computer call until they
// hand back, and both are on the transcript with the token.
func TestLiveDesktop(t *testing.T) {
	t.Parallel()
	needDesktop(t)
	ts := startServer(t, Options{})
	ts.outpost("lv")
	work := t.TempDir()
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"lv","desktop":{"width":640,"height":480},"agent":{"kind":"script","steps":[
		{"tool":"computer","args":{"action":"screenshot"}},
		{"tool":"exec","args":{"command":"while [ ! -f go1 ]; do sleep 0.02; done; xsetroot -solid '#c03020'"}},
		{"tool":"exec","args":{"command":"while [ ! -f go2 ]; do sleep 0.02; done"}},
		{"tool":"computer","args":{"action":"zoom","region":[0,0,64,64]}}]}}`, &s)
	id := s.Metadata.SessionID
	runDesktopRemote(t, ts, id, work)
	waitfor.True(t, "the desktop to start", func() bool { _, ok := resultOf(ts, id, api.ToolComputer, 1); return ok })

	// A machine token may not look; a bad session is a 404.
	machine := ts.token([]string{api.ScopeMachine}, "")
	u := "ws" + strings.TrimPrefix(ts.url, "http") + "/v1/sessions/" + id + "/desktop"
	for tok, want := range map[string]int{machine: 403, "": 401} {
		_, resp, err := websocket.Dial(context.Background(), u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}})
		if err == nil || resp == nil || resp.StatusCode != want {
			t.Errorf("token %q: %v, %v; want %d", tok, resp, err, want)
		}
	}
	if _, resp, err := websocket.Dial(context.Background(), strings.Replace(u, id, "ses_nosuch", 1), &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + ts.admin}}}); err == nil || resp.StatusCode != 404 {
		t.Errorf("a missing session: %v, want 404", err)
	}

	a, hello := dialViewer(t, ts, id, ts.admin)
	if !hello.CanControl || hello.Controller != "" {
		t.Errorf("admin hello %+v", hello)
	}
	key := a.frame("a keyframe", func(f api.DesktopTiles) bool { return f.Keyframe })
	if key.Width != 640 || key.Height != 480 || len(key.Tiles) != 10*8 {
		t.Fatalf("keyframe %d×%d with %d tiles, want 640×480 in 80", key.Width, key.Height, len(key.Tiles))
	}
	// Idle: the screen does not change, nothing is sent.
	for len(a.bytes) > 0 {
		<-a.bytes // the keyframe's
	}
	idle := 0
	timer := time.After(2 * time.Second)
idleLoop:
	for {
		select {
		case n := <-a.bytes:
			idle += n
		case <-timer:
			break idleLoop
		}
	}
	if idle != 0 {
		t.Errorf("an idle desktop sent %d bytes in 2 s", idle)
	}
	for len(a.tiles) > 0 {
		<-a.tiles
	}
	for len(a.bytes) > 0 {
		<-a.bytes
	}

	reader := ts.token([]string{api.ScopeSessionsRead}, "")
	b, hello := dialViewer(t, ts, id, reader)
	if hello.CanControl {
		t.Errorf("a read-only viewer may control: %+v", hello)
	}
	b.frame("the second viewer's keyframe", func(f api.DesktopTiles) bool { return f.Keyframe })
	b.send(api.DesktopMessage{Type: api.DesktopMsgInput, Input: &api.DesktopInput{Kind: api.DesktopPointerMove, X: 5, Y: 5}})
	if m := b.msg(api.DesktopMsgError); !strings.Contains(m.Error, api.ScopeSessionsWrite) {
		t.Errorf("read-only input refused with %q", m.Error)
	}
	b.send(api.DesktopMessage{Type: api.DesktopMsgTakeControl})
	if m := b.msg(api.DesktopMsgError); !strings.Contains(m.Error, api.ScopeSessionsWrite) {
		t.Errorf("read-only take_control refused with %q", m.Error)
	}
	a.send(api.DesktopMessage{Type: api.DesktopMsgInput, Input: &api.DesktopInput{Kind: api.DesktopPointerMove, X: 5, Y: 5}})
	if m := a.msg(api.DesktopMsgError); !strings.Contains(m.Error, api.DesktopMsgTakeControl) {
		t.Errorf("input without control refused with %q", m.Error)
	}
	a.send(api.DesktopMessage{Type: "dance"})
	if m := a.msg(api.DesktopMsgError); !strings.Contains(m.Error, "Unknown message type") {
		t.Errorf("an unknown message refused with %q", m.Error)
	}
	a.send(api.DesktopMessage{Type: api.DesktopMsgInput})
	if m := a.msg(api.DesktopMsgError); m.Error == "" {
		t.Errorf("an input message without input: %+v", m)
	}
	keyIn := ts.srv.live.FramesIn(id)

	// A program paints the screen: both viewers get the same changed
	// tiles from one stream.
	if err := os.WriteFile(filepath.Join(work, "go1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	red := func(f api.DesktopTiles) bool {
		tl := tileAt(f, 0, 0)
		return !f.Keyframe && tl != nil && decodeRGBA(t, tl.PNG).Pix[0] == 0xc0
	}
	fa := a.frame("the painted screen (viewer a)", red)
	fb := b.frame("the painted screen (viewer b)", red)
	if !bytes.Equal(tileAt(fa, 0, 0).PNG, tileAt(fb, 0, 0).PNG) {
		t.Errorf("the two viewers got different tiles")
	}
	if n := ts.srv.live.FramesIn(id) - keyIn; n < 1 || n > 5 {
		t.Errorf("the remote sent %d frames for one change", n)
	}

	// A person in control who disconnects hands back.
	a.send(api.DesktopMessage{Type: api.DesktopMsgTakeControl})
	a.msg(api.DesktopMsgControl)
	a.ws.CloseNow()
	waitfor.True(t, "a disconnect to hand back", func() bool { return len(desktopEvents(ts, id)) == 2 })
	if m := b.msg(api.DesktopMsgControl); m.Controller == "" {
		t.Errorf("watcher's first note %+v", m)
	}
	if m := b.msg(api.DesktopMsgControl); m.Controller != "" {
		t.Errorf("watcher's note after the controller left: %+v", m)
	}

	// Take control; the agent's next computer call waits until hand-back.
	a, _ = dialViewer(t, ts, id, ts.admin)
	a.send(api.DesktopMessage{Type: api.DesktopMsgTakeControl})
	if m := a.msg(api.DesktopMsgControl); !m.You || m.Controller == "" {
		t.Errorf("controller's note %+v", m)
	}
	if m := b.msg(api.DesktopMsgControl); m.You || m.Controller == "" {
		t.Errorf("watcher's note %+v", m)
	}
	a.send(api.DesktopMessage{Type: api.DesktopMsgInput, Input: &api.DesktopInput{Kind: api.DesktopPointerMove, X: 5, Y: 5}})
	if err := os.WriteFile(filepath.Join(work, "go2"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, "the agent's computer call", func() bool {
		var l api.EventList
		ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events?limit=1000", ts.admin, nil, &l)
		n := 0
		for _, e := range l.Items {
			if e.Type == api.EventCall && e.Tool == api.ToolComputer {
				n++
			}
		}
		return n == 2
	})
	time.Sleep(time.Second) // the call has time to run, and must not
	if _, ok := resultOf(ts, id, api.ToolComputer, 2); ok {
		t.Fatal("the agent's computer call ran while a person had control")
	}
	handedAt := time.Now()
	a.send(api.DesktopMessage{Type: api.DesktopMsgHandBack})
	if m := a.msg(api.DesktopMsgControl); m.Controller != "" {
		t.Errorf("after hand back: %+v", m)
	}
	var res api.Event
	waitfor.True(t, "the computer call's result", func() bool { var ok bool; res, ok = resultOf(ts, id, api.ToolComputer, 2); return ok })
	t.Logf("the computer call finished %v after hand-back", time.Since(handedAt))
	var cr api.ComputerResult
	if err := json.Unmarshal(res.Value, &cr); err != nil || cr.Image == nil {
		t.Fatalf("zoom result %s: %v", res.Value, err)
	}
	raw, _ := base64.StdEncoding.DecodeString(cr.Image.Data)
	if got, want := decodeRGBA(t, raw), decodeRGBA(t, tileAt(fa, 0, 0).PNG); !bytes.Equal(got.Pix, want.Pix) {
		t.Errorf("the live tile at 0,0 differs from the computer tool's zoom of that region")
	}

	evs := desktopEvents(ts, id)
	var who api.WhoAmI
	ts.mustDo(200, "GET", "/v1/whoami", ts.admin, nil, &who)
	if len(evs) != 4 || !strings.Contains(evs[1].Reason, "disconnected") {
		t.Fatalf("desktop events %+v, want two take_control and hand_back pairs, the first ended by a disconnect", evs)
	}
	for i, e := range evs {
		want := []string{api.DesktopTakeControl, api.DesktopHandBack}[i%2]
		if e.Action != want || e.Actor != who.ID || e.Reason == "" {
			t.Errorf("desktop event %d: %+v, want %s by %s", i, e, want, who.ID)
		}
	}
	// Each take-over and hand-back is in the audit log too, once.
	if got := strings.Join(auditOf(ts, id), " "); !strings.HasSuffix(got, "desktop.take_control desktop.hand_back desktop.take_control desktop.hand_back") ||
		strings.Count(got, "desktop.") != 4 {
		t.Errorf("audit entries of the session: %q", got)
	}
}

// TestLiveDesktopAuth: the web UI's sign-in cookie stands for a bearer
// token, only from the server's own origin; a session without a machine
// answers 503 before any upgrade.
func TestLiveDesktopAuth(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("la")
	id := ts.session("la").Metadata.SessionID
	reader := ts.token([]string{api.ScopeSessionsRead}, "")
	for _, c := range []struct {
		name, cookie, bearer, origin string
		want                         int
	}{
		{"cookie", reader, "", "", 503},
		{"cookie from this origin", reader, "", ts.url, 503},
		{"cookie from another site", reader, "", "https://evil.example", 403},
		{"bad cookie", "nope", "", "", 401},
		{"bearer from another site", "", reader, "https://evil.example", 503}, // no ambient credential
		{"nothing", "", "", "", 401},
	} {
		req, _ := http.NewRequest("GET", ts.url+"/v1/sessions/"+id+"/desktop", nil)
		if c.cookie != "" {
			req.AddCookie(&http.Cookie{Name: web.CookieName, Value: c.cookie})
		}
		if c.bearer != "" {
			req.Header.Set("Authorization", "Bearer "+c.bearer)
		}
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e api.ErrorResponse
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != c.want || e.Error.Message == "" {
			t.Errorf("%s: %d %q, want %d with a message", c.name, resp.StatusCode, e.Error.Message, c.want)
		}
	}
}
