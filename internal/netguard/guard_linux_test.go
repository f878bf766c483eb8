package netguard

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// A documentation address (RFC 5737): the engine never dials it, the
// test's Dial answers for it with a server on the host's loopback.
const testDest = "198.51.100.7:80"

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the guard creates a network namespace and a TUN device")
	}
	if err := Check(context.Background()); err != nil {
		t.Skipf("cannot create a network namespace here: %v", err)
	}
}

// recorder keeps the batches a guard reports.
type recorder struct {
	mu  sync.Mutex
	all []api.NetworkDecision
}

func (r *recorder) report(_ context.Context, b []api.NetworkDecision) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, b...)
	return nil
}

func (r *recorder) find(decision, addr string) *api.NetworkDecision {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.all {
		if d.Decision == decision && d.Address == addr {
			return &d
		}
	}
	return nil
}

// get does an HTTP GET of url from inside g's namespace and returns the
// body, or the error.
func get(g *Guard, addr, host string) (string, error) {
	var c net.Conn
	err := g.ns.Do(func() error {
		var err error
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestGuard: the gateway on the host's loopback is reachable from the
// namespace whatever the policy; a destination no rule allows is refused
// and reported; a new policy lets it through at once, and that
// connection is reported with its bytes.
func TestGuard(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "gateway") }))
	defer gateway.Close()
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "destination") }))
	defer dest.Close()
	var rec recorder
	dir := t.TempDir()
	g, err := Start(ctx, Options{
		Session: "s1", GatewayURL: gateway.URL, Report: rec.report, ResolvConf: dir + "/resolv.conf",
		Policy: &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "allowed.example.test"}}},
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			if address != testDest {
				return nil, fmt.Errorf("the test dials only %s, not %s", testDest, address)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, dest.Listener.Addr().String())
		},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			g.Close()
		}
	}()
	if b, err := os.ReadFile(dir + "/resolv.conf"); err != nil || !strings.Contains(string(b), "nameserver "+g.ns.DNS().String()) {
		t.Fatalf("resolv.conf = %q, %v", b, err)
	}
	if body, err := get(g, gateway.Listener.Addr().String(), "127.0.0.1"); err != nil || body != "gateway" {
		t.Fatalf("the gateway from the namespace: %q, %v", body, err)
	}
	if body, err := get(g, testDest, "other.example.test"); err == nil {
		t.Fatalf("a destination no rule allows answered %q", body)
	}
	waitfor.Until(ctx, t, "the denial reported", func() bool { return rec.find(api.DecisionDeny, "198.51.100.7") != nil })

	err = g.SetPolicy(&api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{IPv4: "198.51.100.7", Ports: []int{80}}}})
	if err != nil {
		t.Fatal(err)
	}
	if body, err := get(g, testDest, "other.example.test"); err != nil || body != "destination" {
		t.Fatalf("after the policy change: %q, %v", body, err)
	}
	if err := g.SetPolicy(&api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{IPv4: "not an address"}}}); err == nil {
		t.Fatal("an invalid policy was accepted")
	}
	if body, err := get(g, testDest, "other.example.test"); err != nil || body != "destination" {
		t.Fatalf("after an invalid policy: %q, %v (the one in force must stay)", body, err)
	}
	g.Close() // flushes
	closed = true
	d := rec.find(api.DecisionAllow, "198.51.100.7")
	if d == nil || d.BytesIn == 0 || d.Port != 80 || d.Protocol != api.ProtocolTCP || d.Count != 2 {
		t.Fatalf("allowed decision = %+v, want two grouped tcp connections to port 80 with bytes", d)
	}
	if _, err := os.Stat(dir + "/resolv.conf"); !os.IsNotExist(err) {
		t.Errorf("resolv.conf left after Close: %v", err)
	}
}

func TestLoopbackNameservers(t *testing.T) {
	got := loopbackNameservers([]byte("# x\nnameserver 127.0.0.53\nnameserver 10.0.0.2\nnameserver ::1\noptions edns0\nnameserver\n"))
	if len(got) != 2 || got[0].String() != "127.0.0.53" || got[1].String() != "::1" {
		t.Fatalf("got %v", got)
	}
}

// BenchmarkGuardStartClose is what a restricted session's start and end
// add: a namespace, its TUN device, the engine and the gateway's bridge.
func BenchmarkGuardStartClose(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	gateway := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer gateway.Close()
	ctx := context.Background()
	for b.Loop() {
		g, err := Start(ctx, Options{Session: "bench", GatewayURL: gateway.URL,
			Policy: &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "a.example.test"}}}})
		if err != nil {
			b.Fatal(err)
		}
		g.Close()
	}
}
