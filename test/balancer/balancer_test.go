package balancer

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// backend is a TCP server that answers each line with its name and the
// line, and keeps the connection open.
func backend(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					fmt.Fprintf(c, "%s %s\n", name, sc.Text())
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// refused is an address nothing listens on.
func refused(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func roundTrip(t *testing.T, addr, line string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintln(c, line)
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(got)
}

// TestRoundRobinSkipsRefusingBackend: connections go to the backends in
// turn, one that refuses is skipped, and bytes pass unchanged.
func TestRoundRobinSkipsRefusingBackend(t *testing.T) {
	b, err := Start("", []string{backend(t, "a"), refused(t), backend(t, "c")})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var got []string
	for i := range 4 {
		got = append(got, roundTrip(t, b.Addr(), fmt.Sprint("hello ", i)))
	}
	want := []string{"a hello 0", "c hello 1", "c hello 2", "a hello 3"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("answers %q, want %q", got, want)
	}
}

// TestHolderFollowsGatewayConnection: a gateway request names the backend
// that holds the session's remote while its connection is open.
func TestHolderFollowsGatewayConnection(t *testing.T) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "2")
		io.WriteString(w, "ok")
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	b, err := Start("", []string{refused(t), ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if h := b.Holder("ses_x"); h != -1 {
		t.Fatalf("holder before any connection: %d", h)
	}
	c, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n%s: ses_x\r\n\r\n", api.GatewayPath, api.HeaderSessionID)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if h := b.Holder("ses_x"); h != 1 {
		t.Fatalf("holder while connected: %d, want 1", h)
	}
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for b.Holder("ses_x") != -1 {
		if time.Now().After(deadline) {
			t.Fatal("the holder is still named after the connection closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
