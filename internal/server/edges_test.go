package server

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
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
		{"unknown method", "BREW /v1/sessions/ses_1 HTTP/1.1\r\nHost: x\r\n\r\n", 405, api.CodeMethodNotAllowed, "GET, HEAD"},
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

// TestUnauthenticatedConnectionsAreBounded fills the bound with silent
// connections: new connections are closed on arrival, while an
// authenticated connection goes on being served.
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

	var silent []net.Conn
	for range max {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	waitFor(t, "the silent connections to be counted", func() bool { return ts.srv.guard.unauth.Load() == max })

	// Past the bound: closed on arrival.
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if took := waitClosed(t, extra, 10*time.Second); took > 5*time.Second {
		t.Errorf("the connection past the bound was closed after %s", took)
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
	if !strings.Contains(text, "outpost_http_unauthenticated_connections 5") {
		t.Errorf("unauthenticated connections not shown:\n%s", grep(text, "outpost_http_"))
	}
	if !strings.Contains(text, "outpost_http_connections_refused_total 1") && !strings.Contains(text, "outpost_http_connections_refused_total 2") {
		t.Errorf("refusals not counted:\n%s", grep(text, "outpost_http_"))
	}

	// Closing the silent ones makes room again.
	for _, c := range silent {
		c.Close()
	}
	waitFor(t, "the closed connections to leave the count", func() bool { return ts.srv.guard.unauth.Load() == 0 })
	resp, _ := rawRequest(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("a new connection after room was made: %d", resp.StatusCode)
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
	waitFor(t, "a freed stream", func() bool {
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
