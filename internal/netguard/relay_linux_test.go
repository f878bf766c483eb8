package netguard

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/outpost-sh/outpost/api"
)

// TestDNSRelayFloodIsBounded: session code that floods the relay's
// loopback nameserver with queries holds a bounded number of the worker's
// sockets, not one per query (each held for seconds while the engine's
// DNS slots are full), which would run the worker out of descriptors.
func TestDNSRelayFloodIsBounded(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	gateway := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer gateway.Close()
	g, err := Start(ctx, Options{Session: "flood", GatewayURL: gateway.URL,
		Policy: &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "allowed.example.test"}}},
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	// The relay the guard puts on a loopback nameserver of the host's
	// resolv.conf (this machine's may name none).
	var pc net.PacketConn
	if err := g.ns.Do(func() error {
		var err error
		pc, err = net.ListenPacket("udp", "127.0.0.53:53")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	g.lns = append(g.lns, pc)
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		g.relayDNS(pc)
	}()

	var c net.Conn
	if err := g.ns.Do(func() error {
		var err error
		c, err = net.Dial("udp", "127.0.0.53:53")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := dnsmessage.Message{Header: dnsmessage.Header{ID: 1, RecursionDesired: true}, Questions: []dnsmessage.Question{{
		Name: dnsmessage.MustNewName("denied.example.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}
	query, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	// One query answered: the relay works.
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(query); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("the relay answered nothing: %v", err)
	}
	var p dnsmessage.Parser
	if h, err := p.Start(buf[:n]); err != nil || h.RCode != dnsmessage.RCodeNameError {
		t.Fatalf("answer %+v, %v; want NXDOMAIN", h, err)
	}

	base := openFDs(t)
	const flood = 4000
	for i := range flood {
		if _, err := c.Write(query); err != nil {
			t.Fatalf("query %d: %v", i, err)
		}
		if i%500 == 0 {
			time.Sleep(time.Millisecond) // let the relay read, as a real flood's pace would
		}
	}
	peak := 0
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		peak = max(peak, openFDs(t)-base)
	}
	t.Logf("%d queries: at most %d more descriptors open", flood, peak)
	if peak > 2*maxRelays {
		t.Fatalf("a flood of %d queries held %d of the worker's descriptors; want at most %d", flood, peak, 2*maxRelays)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestDNSRelayOverTCP: a resolver that gets a truncated answer from the
// loopback nameserver asks it again over TCP (glibc does, for a name with
// many addresses); the relay answers there too, not with a refusal.
func TestDNSRelayOverTCP(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gateway := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer gateway.Close()
	resolv := t.TempDir() + "/resolv.conf"
	if err := os.WriteFile(resolv, []byte("nameserver 127.0.0.53\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := Start(ctx, Options{Session: "tcpdns", GatewayURL: gateway.URL, RelayNameservers: true, hostResolvConf: resolv,
		Policy: &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "allowed.example.test"}}},
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	q := dnsmessage.Message{Header: dnsmessage.Header{ID: 7, RecursionDesired: true}, Questions: []dnsmessage.Question{{
		Name: dnsmessage.MustNewName("denied.example.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}
	query, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	for _, network := range []string{"udp", "tcp"} {
		var c net.Conn
		if err := g.ns.Do(func() error {
			var err error
			c, err = net.DialTimeout(network, "127.0.0.53:53", 5*time.Second)
			return err
		}); err != nil {
			t.Fatalf("%s to the relay: %v", network, err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		msg := query
		if network == "tcp" {
			msg = append([]byte{byte(len(query) >> 8), byte(len(query))}, query...)
		}
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4096)
		n, err := io.ReadAtLeast(c, buf, 12)
		c.Close()
		if err != nil {
			t.Fatalf("%s: the relay answered nothing: %v", network, err)
		}
		ans := buf[:n]
		if network == "tcp" {
			ans = ans[2:]
		}
		var p dnsmessage.Parser
		if h, err := p.Start(ans); err != nil || h.ID != 7 || h.RCode != dnsmessage.RCodeNameError {
			t.Fatalf("%s answer %+v, %v; want NXDOMAIN to query 7", network, h, err)
		}
	}
}
