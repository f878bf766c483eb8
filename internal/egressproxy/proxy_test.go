package egressproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

const (
	sessionID = "ses_1"
	secret    = "s3cret-proxy-password"
)

// world is a proxy on loopback with a hosts map for a resolver and one
// session whose policy a test changes.
type world struct {
	t     testing.TB
	p     *Proxy
	addr  string
	hosts map[string][]netip.Addr

	mu       sync.Mutex
	policy   *api.NetworkPolicy
	reported []api.NetworkDecision
}

func newWorld(t testing.TB, policy *api.NetworkPolicy, tweak func(*Options)) *world {
	t.Helper()
	w := &world{t: t, policy: policy, hosts: map[string][]netip.Addr{
		"allowed.test": {netip.MustParseAddr("127.0.0.1")},
		"denied.test":  {netip.MustParseAddr("127.0.0.1")},
		"moved.test":   {netip.MustParseAddr("127.0.0.2")},
	}}
	o := Options{
		Lookup: func(id string) (Session, bool) {
			if id != sessionID {
				return Session{}, false
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			return Session{Secret: secret, Policy: w.policy}, true
		},
		Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
			if a, ok := w.hosts[host]; ok {
				return a, nil
			}
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		},
		Report: func(id string, d api.NetworkDecision) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.reported = append(w.reported, d)
		},
		AllowLocal:     true,
		FirstBytesWait: 100 * time.Millisecond,
	}
	if tweak != nil {
		tweak(&o)
	}
	w.p = New(o)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.p.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return w
}

func (w *world) setPolicy(p *api.NetworkPolicy) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.policy = p
}

// waitReport waits for a reported decision matching ok.
func (w *world) waitReport(ok func(api.NetworkDecision) bool) api.NetworkDecision {
	w.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		for _, d := range w.reported {
			if ok(d) {
				w.mu.Unlock()
				return d
			}
		}
		w.mu.Unlock()
		time.Sleep(10 * time.Millisecond) // polling a callback's record, with a deadline
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Fatalf("no such decision reported; got %+v", w.reported)
	return api.NetworkDecision{}
}

func (w *world) client() *http.Client {
	u := &url.URL{Scheme: "http", Host: w.addr, User: url.UserPassword(sessionID, secret)}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy:           http.ProxyURL(u),
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // httptest's certificate names no test host
	}}
}

func auth(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// connect sends a CONNECT with the header authz (none when empty) and
// returns the response and, on 200, the tunnel.
func (w *world) connect(dest, authz string) (*http.Response, net.Conn, *bufio.Reader) {
	w.t.Helper()
	c, err := net.Dial("tcp", w.addr)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { c.Close() })
	req := fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n", dest, dest)
	if authz != "" {
		req += "Proxy-Authorization: " + authz + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		w.t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	return resp, c, br
}

func port(t *testing.T, u string) string {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return pu.Port()
}

func names(hosts ...string) *api.NetworkPolicy {
	p := &api.NetworkPolicy{Enabled: true}
	for _, h := range hosts {
		p.Allow = append(p.Allow, api.NetworkPolicyRule{Hostname: h})
	}
	return p
}

func hello(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello from "+r.Host) }

// echoServer echoes each connection and counts them.
func echoServer(t testing.TB) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String(), &n
}

func TestConnectAllowedName(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(hello))
	defer srv.Close()
	w := newWorld(t, names("*.test"), nil)
	resp, err := w.client().Get("https://allowed.test:" + port(t, srv.URL) + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(string(body), "hello from allowed.test") {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	w.p.closeAll() // the client keeps the tunnel alive; end it to see its report
	d := w.waitReport(func(d api.NetworkDecision) bool { return d.Decision == api.DecisionAllow })
	if d.Host != "allowed.test" || d.Address != "127.0.0.1" || d.Rule != "hostname *.test" || d.BytesOut == 0 || d.BytesIn == 0 {
		t.Fatalf("decision %+v", d)
	}
}

func TestPlainHTTPAllowedAndDenied(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	w := newWorld(t, names("allowed.test"), nil)
	p := port(t, srv.URL)
	resp, err := w.client().Get("http://allowed.test:" + p + "/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "hello from allowed.test:"+p {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	resp, err = w.client().Get("http://denied.test:" + p + "/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "no rule allows denied.test:"+p) {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	w.waitReport(func(d api.NetworkDecision) bool { return d.Decision == api.DecisionDeny && d.Host == "denied.test" })
	w.waitReport(func(d api.NetworkDecision) bool {
		return d.Decision == api.DecisionAllow && d.Host == "allowed.test" && d.BytesIn > 0
	})
}

func TestConnectDeniedName(t *testing.T) {
	t.Parallel()
	addr, hits := echoServer(t)
	w := newWorld(t, names("allowed.test"), nil)
	_, p, _ := net.SplitHostPort(addr)
	resp, _, _ := w.connect("denied.test:"+p, auth(sessionID, secret))
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden || strings.Count(strings.TrimSpace(string(body)), "\n") != 0 ||
		!strings.Contains(string(body), "denied.test") {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if hits.Load() != 0 {
		t.Fatal("the denied destination was dialled")
	}
}

func TestIPLiteralNeedsAddressRule(t *testing.T) {
	t.Parallel()
	addr, hits := echoServer(t)
	w := newWorld(t, names("allowed.test"), nil)
	resp, _, _ := w.connect(addr, auth(sessionID, secret))
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("IP literal without an address rule: %d", resp.StatusCode)
	}
	if hits.Load() != 0 {
		t.Fatal("the IP literal was dialled")
	}
	pol := names("allowed.test")
	pol.Allow = append(pol.Allow, api.NetworkPolicyRule{IPv4: "127.0.0.1"})
	w.setPolicy(pol)
	resp, c, br := w.connect(addr, auth(sessionID, secret))
	if resp.StatusCode != 200 {
		t.Fatalf("IP literal with an address rule: %d", resp.StatusCode)
	}
	io.WriteString(c, "ping")
	got := make([]byte, 4)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo %q %v", got, err)
	}
}

func TestSNIMustBeTheConnectHost(t *testing.T) {
	t.Parallel()
	var served atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) }))
	defer srv.Close()
	w := newWorld(t, names("allowed.test"), nil)
	resp, c, _ := w.connect("allowed.test:"+port(t, srv.URL), auth(sessionID, secret))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "evil.test", InsecureSkipVerify: true}) //nolint:gosec // the handshake must not get that far
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Fatal("a handshake naming another host went through")
	}
	d := w.waitReport(func(d api.NetworkDecision) bool { return d.Decision == api.DecisionDeny })
	if d.Host != "evil.test" || !strings.Contains(d.Rule, "not the tunnel's host allowed.test") {
		t.Fatalf("decision %+v", d)
	}
	if served.Load() != 0 {
		t.Fatal("the server answered a fronted request")
	}
}

func TestNameIsDialledOnlyWhereItResolves(t *testing.T) {
	t.Parallel()
	addr, hits := echoServer(t) // on 127.0.0.1
	_, p, _ := net.SplitHostPort(addr)
	w := newWorld(t, names("moved.test"), nil) // moved.test resolves to 127.0.0.2
	resp, _, _ := w.connect("moved.test:"+p, auth(sessionID, secret))
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("got %d", resp.StatusCode)
	}
	if hits.Load() != 0 {
		t.Fatal("a name was dialled at an address it does not resolve to")
	}
}

func TestLocalAddressesNeedAnAddressRule(t *testing.T) {
	t.Parallel()
	addr, hits := echoServer(t)
	_, p, _ := net.SplitHostPort(addr)
	w := newWorld(t, names("allowed.test"), func(o *Options) { o.AllowLocal = false })
	w.hosts["allowed.test"] = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	resp, _, _ := w.connect("allowed.test:"+p, auth(sessionID, secret))
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "local address") {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if hits.Load() != 0 {
		t.Fatal("a local address was dialled")
	}
}

func TestCredentials(t *testing.T) {
	t.Parallel()
	addr, hits := echoServer(t)
	_, p, _ := net.SplitHostPort(addr)
	w := newWorld(t, names("allowed.test"), nil)
	for name, authz := range map[string]string{
		"missing":         "",
		"wrong secret":    auth(sessionID, secret+"x"),
		"unknown session": auth("ses_other", secret),
		"empty secret":    auth(sessionID, ""),
		"not basic":       "Bearer " + secret,
	} {
		resp, _, _ := w.connect("allowed.test:"+p, authz)
		if resp.StatusCode != http.StatusProxyAuthRequired || resp.Header.Get("Proxy-Authenticate") == "" {
			t.Errorf("%s: got %d %v", name, resp.StatusCode, resp.Header)
		}
	}
	if hits.Load() != 0 {
		t.Fatal("an unauthenticated request was dialled")
	}
}

func TestLivePolicyChange(t *testing.T) {
	t.Parallel()
	addr, _ := echoServer(t)
	_, p, _ := net.SplitHostPort(addr)
	w := newWorld(t, names("allowed.test"), nil)
	resp, c, br := w.connect("allowed.test:"+p, auth(sessionID, secret))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	io.WriteString(c, "ping")
	if _, err := io.ReadFull(br, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	w.setPolicy(names("other.test"))
	// The next connection is decided by the new policy at once.
	if resp, _, _ := w.connect("allowed.test:"+p, auth(sessionID, secret)); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("after the change: %d", resp.StatusCode)
	}
	// The open tunnel is closed by a recheck.
	w.p.Recheck(sessionID)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !strings.Contains(fmt.Sprint(err), "reset") {
		t.Fatalf("the forbidden tunnel is still open: %v", err)
	}
	w.waitReport(func(d api.NetworkDecision) bool {
		return d.Decision == api.DecisionDeny && strings.Contains(d.Rule, "no longer allows")
	})
	// A policy that allows it again lets the next one through.
	w.setPolicy(names("allowed.test"))
	w.p.Recheck(sessionID)
	if resp, _, _ := w.connect("allowed.test:"+p, auth(sessionID, secret)); resp.StatusCode != 200 {
		t.Fatalf("allowed again: %d", resp.StatusCode)
	}
}

func TestBounds(t *testing.T) {
	t.Parallel()
	addr, _ := echoServer(t)
	_, p, _ := net.SplitHostPort(addr)
	w := newWorld(t, names("allowed.test"), func(o *Options) { o.MaxTunnels = 2; o.IdleTimeout = 300 * time.Millisecond })
	var conns []*bufio.Reader
	for range 2 {
		resp, c, br := w.connect("allowed.test:"+p, auth(sessionID, secret))
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		conns = append(conns, br)
	}
	resp, _, _ := w.connect("allowed.test:"+p, auth(sessionID, secret))
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third tunnel: %d", resp.StatusCode)
	}
	// Idle tunnels are closed, and their slots free again.
	start := time.Now()
	for _, br := range conns {
		if _, err := br.ReadByte(); err == nil {
			t.Fatal("read a byte nobody sent")
		}
	}
	if el := time.Since(start); el > 4*time.Second {
		t.Fatalf("idle tunnels closed after %v", el)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, _, _ := w.connect("allowed.test:"+p, auth(sessionID, secret))
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slots not freed: %d", resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	w := newWorld(t, names("allowed.test"), nil)
	for _, dest := range []string{"allowed.test", "allowed.test:0", "allowed.test:99999", ":443"} {
		resp, _, _ := w.connect(dest, auth(sessionID, secret))
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%q: %d", dest, resp.StatusCode)
		}
	}
	// An origin-form request is not a proxy request.
	req, _ := http.NewRequest("GET", "http://"+w.addr+"/", nil)
	req.Header.Set("Proxy-Authorization", auth(sessionID, secret))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("origin-form: %d", resp.StatusCode)
	}
}

// TestNameAllowedByAddressRule: a name no hostname rule allows is reached
// at its addresses an address rule allows (the pod could dial them
// directly), and at no other.
func TestNameAllowedByAddressRule(t *testing.T) {
	t.Parallel()
	addr, _ := echoServer(t)
	_, p, _ := net.SplitHostPort(addr)
	w := newWorld(t, &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{IPv4: "127.0.0.1"}}}, nil)
	resp, _, _ := w.connect("denied.test:"+p, auth(sessionID, secret)) // resolves to 127.0.0.1
	if resp.StatusCode != 200 {
		t.Fatalf("a name at an allowed address: %d", resp.StatusCode)
	}
	resp, _, _ = w.connect("moved.test:"+p, auth(sessionID, secret)) // resolves to 127.0.0.2
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a name at an address no rule allows: %d", resp.StatusCode)
	}
	resp, _, _ = w.connect("nowhere.test:"+p, auth(sessionID, secret)) // does not resolve
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a name that does not resolve: %d", resp.StatusCode)
	}
}

// TestTunnelClosedAtOnceIsReported: a tunnel the client closes before
// sending a byte was still allowed and dialled, and says so.
func TestTunnelClosedAtOnceIsReported(t *testing.T) {
	t.Parallel()
	addr, hits := echoServer(t)
	_, p, _ := net.SplitHostPort(addr)
	w := newWorld(t, names("allowed.test"), nil)
	resp, c, _ := w.connect("allowed.test:"+p, auth(sessionID, secret))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	c.Close()
	w.waitReport(func(d api.NetworkDecision) bool { return d.Decision == api.DecisionAllow && d.Host == "allowed.test" })
	if hits.Load() != 1 {
		t.Fatalf("%d connections reached the destination", hits.Load())
	}
}

// clientHello returns the first TLS record a client naming sni sends.
func clientHello(t *testing.T, sni string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() {
		tc := tls.Client(a, &tls.Config{ServerName: sni, InsecureSkipVerify: true}) //nolint:gosec // only its first bytes are used
		_ = tc.Handshake()
	}()
	head := make([]byte, 5)
	if _, err := io.ReadFull(b, head); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(head[3])<<8|int(head[4]))
	if _, err := io.ReadFull(b, body); err != nil {
		t.Fatal(err)
	}
	return append(head, body...)
}

// TestUnreadableClientHelloRefused: in a tunnel to a name, a ClientHello
// without SNI, or split across records so that its first holds no whole
// message (a server would reassemble it and read another name), is
// refused before a byte reaches the destination.
func TestUnreadableClientHelloRefused(t *testing.T) {
	t.Parallel()
	addr, _ := echoServer(t)
	_, p, _ := net.SplitHostPort(addr)
	w := newWorld(t, names("allowed.test"), nil)
	hello := clientHello(t, "evil.test")
	body := hello[5:]
	split := func(b []byte) []byte { return append([]byte{0x16, 3, 1, byte(len(b) >> 8), byte(len(b))}, b...) }
	for name, first := range map[string][]byte{
		"no SNI": clientHello(t, ""),
		"split":  append(split(body[:40]), split(body[40:])...),
	} {
		resp, c, br := w.connect("allowed.test:"+p, auth(sessionID, secret))
		if resp.StatusCode != 200 {
			t.Fatalf("%s: CONNECT %d", name, resp.StatusCode)
		}
		if _, err := c.Write(first); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := br.ReadByte(); err == nil {
			t.Errorf("%s: the destination echoed the ClientHello", name)
		}
	}
	w.waitReport(func(d api.NetworkDecision) bool {
		return d.Decision == api.DecisionDeny && strings.Contains(d.Rule, "names no server")
	})
	// The whole ClientHello naming the host goes through.
	resp, c, br := w.connect("allowed.test:"+p, auth(sessionID, secret))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT %d", resp.StatusCode)
	}
	good := clientHello(t, "allowed.test")
	c.Write(good)
	got := make([]byte, len(good))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(br, got); err != nil {
		t.Fatalf("a ClientHello naming the host: %v", err)
	}
}

// TestPlainHTTPHostIsTheURLs: a Host header that differs from the
// absolute URL's host does not reach the destination.
func TestPlainHTTPHostIsTheURLs(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	p := port(t, srv.URL)
	w := newWorld(t, names("allowed.test"), nil)
	c, err := net.Dial("tcp", w.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://allowed.test:%s/ HTTP/1.1\r\nHost: evil.test\r\nProxy-Authorization: %s\r\n\r\n", p, auth(sessionID, secret))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "hello from allowed.test:"+p {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
}

// TestMaxConns: connections past MaxConns wait, unanswered, until one
// closes; the ones in get answers.
func TestMaxConns(t *testing.T) {
	t.Parallel()
	w := newWorld(t, names("allowed.test"), func(o *Options) { o.MaxConns = 1 })
	first, err := net.Dial("tcp", w.addr)
	if err != nil {
		t.Fatal(err)
	}
	// The first connection is served (a 407 proves it was accepted).
	io.WriteString(first, "CONNECT allowed.test:1 HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	fbr := bufio.NewReader(first)
	if resp, err := http.ReadResponse(fbr, nil); err != nil || resp.StatusCode != http.StatusProxyAuthRequired {
		t.Fatalf("first: %v %v", resp, err)
	}
	second, err := net.Dial("tcp", w.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	io.WriteString(second, "CONNECT allowed.test:1 HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	_ = second.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	sbr := bufio.NewReader(second)
	if _, err := sbr.ReadByte(); err == nil {
		t.Fatal("a connection past MaxConns was answered")
	}
	first.Close()
	_ = second.SetReadDeadline(time.Now().Add(5 * time.Second))
	if resp, err := http.ReadResponse(sbr, nil); err != nil || resp.StatusCode != http.StatusProxyAuthRequired {
		t.Fatalf("second, once the first closed: %v %v", resp, err)
	}
}
