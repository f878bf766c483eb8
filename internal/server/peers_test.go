//go:build unix

package server

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/tlsconfig"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// testCertificate is a server certificate for 127.0.0.1 of a new CA.
func testCertificate(t *testing.T) tls.Certificate {
	t.Helper()
	ca, err := tlsconfig.NewCA("test", time.Now(), 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tlsconfig.IssueServer(ca, []string{"127.0.0.1"}, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(p.Cert, p.Key)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// tcpPair is a loopback TCP connection: the server's end and the client's.
func tcpPair(t *testing.T) (srv, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(); client.Close() })
	return srv, client
}

// TestPeerClosed: a peek sees a plain client close its connection, and a
// TLS client's close_notify, without reading; a silent client, or a plain
// one that sent bytes, is not taken for gone.
func TestPeerClosed(t *testing.T) {
	t.Parallel()
	t.Run("plain", func(t *testing.T) {
		srv, client := tcpPair(t)
		if peerClosed(srv) {
			t.Fatal("a silent client is taken for gone")
		}
		if _, err := client.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		waitfor.True(t, "the byte to be pending", func() bool { return hasPending(srv) })
		if peerClosed(srv) {
			t.Fatal("a plain client that sent a byte is taken for gone")
		}
		var b [1]byte
		if _, err := srv.Read(b[:]); err != nil {
			t.Fatal(err)
		}
		client.Close()
		waitfor.True(t, "the close to be seen", func() bool { return peerClosed(srv) })
		if peerClosed(&guardedConn{Conn: srv}) != true {
			t.Error("a guarded connection is not unwrapped")
		}
	})
	t.Run("tls", func(t *testing.T) {
		raw, rawClient := tcpPair(t)
		cert := testCertificate(t)
		srv := tls.Server(&guardedConn{Conn: raw}, &tls.Config{Certificates: []tls.Certificate{cert}})
		client := tls.Client(rawClient, &tls.Config{InsecureSkipVerify: true})
		done := make(chan error, 1)
		go func() { done <- client.Handshake() }()
		if err := srv.Handshake(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // the client's session tickets, if any, arrive unread
		if peerClosed(srv) {
			t.Fatal("a silent TLS client is taken for gone")
		}
		client.Close() // close_notify, then FIN
		waitfor.True(t, "the close to be seen", func() bool { return peerClosed(srv) })
	})
}
