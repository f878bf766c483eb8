package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// rawRequest sends raw bytes on a new connection and reads one answer.
func rawRequest(t *testing.T, addr, raw string) (*http.Response, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	go func() { _, _ = io.WriteString(c, raw) }() // the server may answer before it read everything
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%.40q: read answer: %v", raw, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func hostOf(url string) string { return url[strings.Index(url, "://")+3:] }

// TestHTTPLayerErrorsAreJSON checks the answers a request gets before any
// route handles it: wrong methods, non-canonical paths, oversized headers.
func TestHTTPLayerErrorsAreJSON(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{MaxHeaderBytes: 8 << 10})
	addr := hostOf(ts.url)
	for _, tc := range []struct {
		name, raw string
		status    int
		code      string
		allow     string
	}{
		{"method of another route", "PUT /v1/sessions HTTP/1.1\r\nHost: x\r\n\r\n", 405, api.CodeMethodNotAllowed, "GET, HEAD, POST"},
		{"unknown method", "BREW /v1/sessions/ses_1 HTTP/1.1\r\nHost: x\r\n\r\n", 405, api.CodeMethodNotAllowed, "GET, HEAD, PATCH"},
		{"options", "OPTIONS /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 405, api.CodeMethodNotAllowed, "GET, HEAD"},
		{"dot-dot", "GET /v1/../healthz HTTP/1.1\r\nHost: x\r\n\r\n", 400, api.CodeBadRequest, ""},
		{"escaped dot-dot", "GET /v1/sessions/%2e%2e/tokens HTTP/1.1\r\nHost: x\r\n\r\n", 400, api.CodeBadRequest, ""},
		{"dot", "GET /v1/./tokens HTTP/1.1\r\nHost: x\r\n\r\n", 400, api.CodeBadRequest, ""},
		{"double slash", "GET //healthz HTTP/1.1\r\nHost: x\r\n\r\n", 400, api.CodeBadRequest, ""},
		{"big header", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 9<<10) + "\r\n\r\n", 431, api.CodeTooLarge, ""},
		{"many headers", "GET /healthz HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-A: 0123456789012345678901234567890123456789\r\n", 300) + "\r\n", 431, api.CodeTooLarge, ""},
		{"no route", "GET /v2/nothing HTTP/1.1\r\nHost: x\r\n\r\n", 404, api.CodeNotFound, ""},
	} {
		resp, body := rawRequest(t, addr, tc.raw)
		var e api.ErrorResponse
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &e) != nil || e.Error.Code != tc.code || e.Error.Message == "" {
			t.Errorf("%s: %d %s %s, want %d with a JSON %s error", tc.name, resp.StatusCode, resp.Header.Get("Content-Type"), body, tc.status, tc.code)
		}
		if got := resp.Header.Get("Allow"); got != tc.allow {
			t.Errorf("%s: Allow %q, want %q", tc.name, got, tc.allow)
		}
	}
	// Headers within the bound pass.
	resp, _ := rawRequest(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Ok: "+strings.Repeat("a", 6<<10)+"\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Errorf("headers under the bound: %d", resp.StatusCode)
	}
	// What net/http answers before any handler stays its own (documented
	// in docs/security.md): a request line it cannot parse.
	resp, _ = rawRequest(t, addr, "NOT A REQUEST\r\n\r\n")
	if resp.StatusCode != 400 {
		t.Errorf("a malformed request line: %d, want 400", resp.StatusCode)
	}
}

// waitClosed reads c until the server closes it and returns how long that
// took.
func waitClosed(t *testing.T, c net.Conn, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(within))
	buf := make([]byte, 4096)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue // the rest of an answer
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the connection is still open after %s", within)
		}
		return time.Since(start)
	}
}

// TestIdleConnectionsAreClosed opens connections that go idle after one
// request, and connections that never send one: the server closes both.
func TestIdleConnectionsAreClosed(t *testing.T) {
	t.Parallel()
	const idle = 300 * time.Millisecond
	ts := startServer(t, Options{IdleTimeout: idle, ReadHeaderTimeout: idle})
	addr := hostOf(ts.url)
	const n = 40
	conns := make([]net.Conn, n)
	opened := make([]time.Time, n)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i], opened[i] = c, time.Now()
		if i%2 == 0 { // a keep-alive request, answered, then silence
			if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, c := range conns {
		waitClosed(t, c, 10*time.Second)
		// Not closed at once: by the timeout. Seen from when it was
		// opened, so a slow machine that notices late still passes.
		if took := time.Since(opened[i]); i == 0 && took < idle/2 {
			t.Errorf("connection %d closed after %s, before the idle timeout %s", i, took, idle)
		}
	}
}

// dialSending opens a connection and sends raw on it.
func dialSending(t *testing.T, addr, raw string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if raw != "" {
		if _, err := io.WriteString(c, raw); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// readAnswer reads one answer on c.
func readAnswer(t *testing.T, c net.Conn) int {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_ = c.SetReadDeadline(time.Time{})
	return resp.StatusCode
}

// stageLen is how many connections the guard holds in stage.
func stageLen(g *connGuard, stage connStage) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for c := g.stages[stage].head; c != nil; c = c.next {
		n++
	}
	return n
}

// TestUnauthenticatedConnectionsAreBounded fills the bound with silent
// and half-sent connections: a new connection takes the place of the
// oldest that sent nothing, then of the oldest that sent part of a
// request, and is served, while an authenticated connection goes on being
// served.
func TestUnauthenticatedConnectionsAreBounded(t *testing.T) {
	t.Parallel()
	const max = 5
	ts := startServer(t, Options{MaxUnauthenticatedConns: max, ReadHeaderTimeout: time.Minute})
	addr := hostOf(ts.url)

	// An authenticated keep-alive connection.
	authed, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer authed.Close()
	br := bufio.NewReader(authed)
	get := func(path, token string) (int, string) {
		t.Helper()
		req := "GET " + path + " HTTP/1.1\r\nHost: x\r\n"
		if token != "" {
			req += "Authorization: Bearer " + token + "\r\n"
		}
		if _, err := io.WriteString(authed, req+"\r\n"); err != nil {
			t.Fatal(err)
		}
		_ = authed.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("authenticated connection: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/v1/outposts", ts.admin); code != 200 {
		t.Fatalf("authenticated request: %d", code)
	}

	// Three connections that sent half a request line, then two that
	// sent nothing.
	var partial, silent []net.Conn
	// Each is counted before the next is dialled: the server reads
	// connections in goroutines of their own, so without the wait the
	// stage's order need not be the order of dialling.
	for i := range 3 {
		partial = append(partial, dialSending(t, addr, "GET /heal"))
		waitfor.True(t, "the half-sent connection to be counted", func() bool { return stageLen(ts.srv.guard, stagePartial) == i+1 })
	}
	for range 2 {
		silent = append(silent, dialSending(t, addr, ""))
	}
	waitfor.True(t, "the silent connections to be counted", func() bool { return ts.srv.guard.unauth.Load() == max })

	// Past the bound: a health probe is served, and the oldest silent
	// connection — not an older half-sent one — is closed for it.
	probe := dialSending(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	if code := readAnswer(t, probe); code != 200 {
		t.Fatalf("a health probe past the bound: %d", code)
	}
	waitClosed(t, silent[0], 10*time.Second)
	if got := ts.srv.guard.unauth.Load(); got != max {
		t.Errorf("%d unauthenticated connections counted, want the bound %d", got, max)
	}
	// The authenticated connection is still served.
	if code, _ := get("/v1/outposts", ts.admin); code != 200 {
		t.Fatalf("authenticated request with the bound reached: %d", code)
	}
	code, text := get("/metrics", "")
	if code != 200 {
		t.Fatalf("metrics: %d", code)
	}
	text = withoutReplicaLabel(text)
	if !strings.Contains(text, "outpost_http_unauthenticated_connections 5") ||
		!strings.Contains(text, `outpost_http_connections_shed_total{state="silent"} 1`) {
		t.Errorf("unauthenticated and shed connections not shown:\n%s", grep(text, "outpost_http_"))
	}

	// With only half-sent connections left, the oldest of them goes.
	for _, c := range append(silent[1:], probe) {
		c.Close()
	}
	waitfor.True(t, "the closed connections to leave the count", func() bool { return ts.srv.guard.unauth.Load() == 3 })
	for i := range 2 {
		partial = append(partial, dialSending(t, addr, "GET /heal"))
		waitfor.True(t, "the half-sent connection to be counted", func() bool { return stageLen(ts.srv.guard, stagePartial) == 4+i })
	}
	probe = dialSending(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	if code := readAnswer(t, probe); code != 200 {
		t.Fatalf("a health probe past a bound of half-sent connections: %d", code)
	}
	waitClosed(t, partial[0], 10*time.Second)
	if n := counterValue(ts.srv.edge.connsShed.WithLabelValues("partial")); n != 1 {
		t.Errorf("%v half-sent connections shed, want 1", n)
	}

	// Closing them makes room again.
	for _, c := range append(partial, probe) {
		c.Close()
	}
	waitfor.True(t, "the closed connections to leave the count", func() bool { return ts.srv.guard.unauth.Load() == 0 })
	resp, _ := rawRequest(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("a new connection after room was made: %d", resp.StatusCode)
	}
}

// TestConnectionFloodIsShed opens more idle and half-sent connections
// than the default bound and keeps opening more, as a flood does: while
// it lasts, a health probe, an authenticated API request and a remote's
// gateway dial, each on a new connection, are answered at once.
func TestConnectionFloodIsShed(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{ReadHeaderTimeout: time.Minute})
	addr := hostOf(ts.url)
	ts.outpost("flood")
	id := ts.session("flood").Metadata.SessionID
	claim := ts.claimFor(id, "m1")

	// The flood: a tenth of it sends half a request line, the rest
	// nothing, and none is closed on this side: only the server closes
	// them.
	const held = DefaultMaxUnauthenticatedConns + 176
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	open := func() {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("flood connection %d: %v", len(flood), err)
		}
		if len(flood)%10 == 0 {
			_, _ = io.WriteString(c, "GET /heal")
		}
		flood = append(flood, c)
	}
	for range held {
		open()
	}
	waitfor.True(t, "the flood to reach the bound", func() bool {
		return ts.srv.guard.unauth.Load() == DefaultMaxUnauthenticatedConns
	})

	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	probes := []struct {
		name string
		do   func() error
	}{
		{"health probe", func() error {
			resp, err := fresh.Get(ts.url + "/healthz")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		}},
		{"authenticated request", func() error {
			req, _ := http.NewRequest("GET", ts.url+"/v1/outposts", nil)
			req.Header.Set("Authorization", "Bearer "+ts.admin)
			resp, err := fresh.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		}},
		{"gateway dial", func() error {
			h := http.Header{}
			h.Set("Authorization", "Bearer "+claim.Status.ConnectToken)
			h.Set(api.HeaderSessionID, id)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			ws, _, err := websocket.Dial(ctx, ts.srv.gatewayURL, &websocket.DialOptions{HTTPClient: fresh, HTTPHeader: h})
			if err != nil {
				return err
			}
			ws.CloseNow()
			return nil
		}},
	}
	// Each probe three times, with the flood going on between them: 900
	// more connections.
	for round := range 3 {
		for _, p := range probes {
			for range 100 {
				open()
			}
			start := time.Now()
			if err := p.do(); err != nil {
				t.Fatalf("round %d: %s under the flood: %v", round, p.name, err)
			}
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("round %d: %s under the flood took %s", round, p.name, took)
			}
		}
	}
	if got := ts.srv.guard.unauth.Load(); got > DefaultMaxUnauthenticatedConns {
		t.Errorf("%d unauthenticated connections open, more than the bound", got)
	}
}

// openWatch opens a queue watch with token and returns its answer.
func openRawWatch(t *testing.T, ts *testServer, token string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", ts.url+"/v1/queue?watch=true", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestEventStreamsPerTokenAreBounded(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{MaxStreamsPerToken: 2})
	machine := ts.token([]string{api.ScopeMachine}, "")
	other := ts.token([]string{api.ScopeSessionsRead, api.ScopeMachine}, "")
	ts.outpost("s")
	sess := ts.session("s")

	first := openRawWatch(t, ts, machine)
	second := openRawWatch(t, ts, machine)
	for _, r := range []*http.Response{first, second} {
		if r.StatusCode != 200 {
			t.Fatalf("watch within the bound: %d", r.StatusCode)
		}
	}
	third := openRawWatch(t, ts, machine)
	body, _ := io.ReadAll(third.Body)
	var e api.ErrorResponse
	if third.StatusCode != http.StatusTooManyRequests || json.Unmarshal(body, &e) != nil || e.Error.Code != api.CodeTooManyRequests || e.Error.Message == "" {
		t.Fatalf("the third watch: %d %s, want 429 with a JSON error", third.StatusCode, body)
	}
	if third.Header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	// Another token is not affected, and transcript follows count too.
	if r := openRawWatch(t, ts, other); r.StatusCode != 200 {
		t.Fatalf("another token's watch: %d", r.StatusCode)
	}
	req, _ := http.NewRequest("GET", ts.url+"/v1/sessions/"+sess.Metadata.SessionID+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+other)
	req.Header.Set("Accept", "text/event-stream")
	follow, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer follow.Body.Close()
	if follow.StatusCode != 200 {
		t.Fatalf("another token's follow: %d", follow.StatusCode)
	}
	if r := openRawWatch(t, ts, other); r.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a watch past the bound with a follow open: %d, want 429", r.StatusCode)
	}
	// Ending a stream frees its place.
	first.Body.Close()
	waitfor.True(t, "a freed stream", func() bool {
		r := openRawWatch(t, ts, machine)
		r.Body.Close()
		return r.StatusCode == 200
	})
}

func TestMetricsTokenRequired(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{MetricsTokenRequired: true})
	ts.mustDo(401, "GET", "/metrics", "", nil, nil)
	ts.mustDo(401, "GET", "/metrics", "opt_not-a-token", nil, nil)
	for _, scopes := range [][]string{{api.ScopeMachine}, {api.ScopeSessionsRead}, {api.ScopeOrchestrator}, {api.ScopeSessionsWrite}} {
		ts.mustDo(200, "GET", "/metrics", ts.token(scopes, ""), nil, nil)
	}
	ts.mustDo(200, "GET", "/metrics", ts.admin, nil, nil)
}

func TestMetricsListen(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{MetricsListen: "127.0.0.1:0"})
	ts.mustDo(404, "GET", "/metrics", "", nil, nil)
	base := "http://" + ts.srv.metricsLn.Addr().String()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "outpost_http_unauthenticated_connections") {
		t.Fatalf("metrics listener: %d %.200s", resp.StatusCode, b)
	}
	// Only /metrics there.
	resp, err = http.Get(base + "/v1/outposts")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("the API on the metrics listener: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

// TestHasPending: a connection whose peer sent bytes the server has not
// read is not silent, and peeking leaves the bytes to be read.
func TestHasPending(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if hasPending(srv) {
		t.Fatal("a connection that sent nothing has bytes pending")
	}
	if _, err := io.WriteString(client, "GET /"); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, "the sent bytes to be pending", func() bool { return hasPending(srv) })
	buf := make([]byte, 16)
	_ = srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := srv.Read(buf); err != nil || string(buf[:n]) != "GET /" {
		t.Fatalf("read after the peek: %q, %v", buf[:n], err)
	}
}
