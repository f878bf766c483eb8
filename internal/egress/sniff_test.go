package egress

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"
)

// clientHello returns the first bytes crypto/tls sends for serverName.
func clientHello(t testing.TB, serverName string) []byte {
	t.Helper()
	c, s := net.Pipe()
	defer s.Close()
	go func() {
		tc := tls.Client(c, &tls.Config{ServerName: serverName, InsecureSkipVerify: true})
		tc.Handshake()
		c.Close()
	}()
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got []byte
	buf := make([]byte, 1<<16)
	for {
		n, err := s.Read(buf)
		got = append(got, buf[:n]...)
		if _, st := sniff(got); st != sniffMore || err != nil {
			return got
		}
	}
}

func TestSniffTLS(t *testing.T) {
	hello := clientHello(t, "API.Example.test")
	if host, st := sniff(hello); st != sniffDone || host != "API.Example.test" {
		t.Fatalf("sniff(ClientHello) = %q, %v", host, st)
	}
	for i := range len(hello) - 1 {
		if _, st := sniff(hello[:i]); st != sniffMore && i >= 5 {
			t.Fatalf("sniff of the first %d bytes = %v, want more", i, st)
		}
	}
	// No SNI (an address as ServerName sends none).
	if host, st := sniff(clientHello(t, "10.0.0.1")); st != sniffNone {
		t.Fatalf("sniff(ClientHello without SNI) = %q, %v", host, st)
	}
}

func TestSniffHTTP(t *testing.T) {
	for _, tc := range []struct {
		in   string
		host string
		st   sniffState
	}{
		{"GET / HTTP/1.1\r\nHost: web.test\r\n\r\n", "web.test", sniffDone},
		{"POST /x HTTP/1.1\r\nUser-Agent: a\r\nhost:  Web.Test:8080 \r\n\r\n", "Web.Test", sniffDone},
		{"GET / HTTP/1.1\r\nHost: [fd99::1]:80\r\n\r\n", "", sniffNone},
		{"GET / HTTP/1.1\r\nHost: 10.99.0.12\r\n\r\n", "", sniffNone},
		{"GET / HTTP/1.1\r\nHost: evil.test/../x\r\n\r\n", "", sniffNone},
		{"GET / HTTP/1.0\r\n\r\n", "", sniffNone},
		{"GET / HTTP/1.1\r\nHost: web.test\r\n", "", sniffMore},
		{"GE", "", sniffMore},
		{"SSH-2.0-OpenSSH_9.0\r\n", "", sniffNone},
		{"\x00\x01", "", sniffNone},
		{"GET / HTTP/1.1\r\nHost: web.test\r\nHost: evil.test\r\n\r\n", "", sniffNone},
		{"GET http://evil.test/ HTTP/1.1\r\nHost: web.test\r\n\r\n", "", sniffNone},
		{"GET http://Web.test:80/x HTTP/1.1\r\nHost: web.test\r\n\r\n", "Web.test", sniffDone},
		{"GET https://web.test HTTP/1.1\r\n\r\n", "web.test", sniffDone},
		{"GET http://user@evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n", "", sniffNone},
		{"CONNECT web.test:443 HTTP/1.1\r\nHost: web.test:443\r\n\r\n", "web.test", sniffDone},
		{"CONNECT evil.test:443 HTTP/1.1\r\nHost: web.test\r\n\r\n", "", sniffNone},
		{"GET  / HTTP/1.1\r\nHost: web.test\r\n\r\n", "web.test", sniffDone},
		{"GET / HTTP/1.1 extra\r\nHost: web.test\r\n\r\n", "", sniffNone},
	} {
		host, st := sniff([]byte(tc.in))
		if host != tc.host || st != tc.st {
			t.Errorf("sniff(%q) = %q, %v; want %q, %v", tc.in, host, st, tc.host, tc.st)
		}
	}
	// A request head that never ends gives up at the peek limit.
	long := "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", maxPeek)
	if _, st := sniff([]byte(long)); st != sniffNone {
		t.Errorf("sniff(endless head) = %v, want none", st)
	}
}

func FuzzSniff(f *testing.F) {
	f.Add(clientHello(f, "allowed.test"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: web.test\r\n\r\n"))
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		host, st := sniff(b)
		if st == sniffDone && !validHost(host) {
			t.Fatalf("sniff returned an invalid host %q", host)
		}
	})
}
