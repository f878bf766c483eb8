package netguard

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// TestGatewayBridgeFloodIsBounded: the gateway bridge is reachable
// whatever the policy, so session code can open connections to it as
// fast as it likes; the worker relays a bounded number at once (each
// costs it two descriptors and a connection to the control plane), not
// one per connection the session opens.
func TestGatewayBridgeFloodIsBounded(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The gateway: a listener on the host's loopback that counts the
	// connections open on it.
	gw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var open, peak atomic.Int64
	var held sync.WaitGroup
	defer held.Wait()
	defer gw.Close()
	go func() {
		for {
			c, err := gw.Accept()
			if err != nil {
				return
			}
			n := open.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			held.Add(1)
			go func() {
				defer held.Done()
				defer open.Add(-1)
				_, _ = io.Copy(io.Discard, c)
				c.Close()
			}()
		}
	}()
	g, err := Start(ctx, Options{Session: "bridge", GatewayURL: "http://" + gw.Addr().String(),
		Policy: &api.NetworkPolicy{Enabled: true},
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()

	const flood = 1000
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if err := g.ns.Do(func() error {
		d := net.Dialer{Timeout: time.Second}
		for range flood {
			c, err := d.Dial("tcp", gw.Addr().String())
			if err != nil {
				break // the bridge's backlog is full: the flood is held back
			}
			conns = append(conns, c)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(conns) == 0 {
		t.Fatal("no connection to the gateway from the namespace")
	}
	want := int64(min(len(conns), maxBridged))
	waitfor.Until(ctx, t, "the bridge relays what it may", func() bool { return open.Load() >= want })
	// More would come now if the bridge let them.
	time.Sleep(500 * time.Millisecond)
	t.Logf("%d connections opened in the namespace; at most %d reached the gateway at once", len(conns), peak.Load())
	if p := peak.Load(); p > maxBridged {
		t.Fatalf("%d connections to the gateway at once through the bridge; want at most %d", p, maxBridged)
	}
	// Closing the flood frees the bridge for the remote's own connections.
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	var c net.Conn
	if err := g.ns.Do(func() error {
		var err error
		c, err = net.DialTimeout("tcp", gw.Addr().String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for open.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("after the flood closed, %d connections at the gateway, want the new one alone", open.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
