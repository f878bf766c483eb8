package egressproxy

import (
	"io"
	"net"
	"net/http"
	"testing"
)

// BenchmarkConnect: one authenticated CONNECT, decided, resolved, dialled
// and answered, over loopback.
func BenchmarkConnect(b *testing.B) {
	addr, _ := echoServer(b)
	_, p, _ := net.SplitHostPort(addr)
	w := newWorld(b, names("allowed.test"), nil)
	b.ResetTimer()
	for b.Loop() {
		resp, c, _ := w.connect("allowed.test:"+p, auth(sessionID, secret))
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		c.Close()
	}
}

// BenchmarkTunnelThroughput: bytes through an open tunnel to an echo
// server and back.
func BenchmarkTunnelThroughput(b *testing.B) {
	addr, _ := echoServer(b)
	_, p, _ := net.SplitHostPort(addr)
	w := newWorld(b, names("allowed.test"), nil)
	resp, c, br := w.connect("allowed.test:"+p, auth(sessionID, secret))
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	defer c.Close()
	buf := make([]byte, 64<<10)
	got := make([]byte, len(buf))
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for b.Loop() {
		go c.Write(buf) //nolint:errcheck // the read below fails if it does
		if _, err := io.ReadFull(br, got); err != nil {
			b.Fatal(err)
		}
	}
}
