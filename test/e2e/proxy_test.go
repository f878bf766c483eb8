//go:build linux

package e2e

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// cutProxy forwards loopback TCP connections to a target and can cut every
// connection it carries, as a flaky network would.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex // guards conns and down
	conns  []net.Conn
	down   bool // new connections are refused (closed at once)
	wg     sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			in.Close()
			continue
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); io.Copy(out, in); out.Close() }()
		go func() { defer p.wg.Done(); io.Copy(in, out); in.Close() }()
	}
}

// setDown refuses (down) or accepts again new connections.
func (p *cutProxy) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
}

// cut closes every connection carried so far.
func (p *cutProxy) cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	n := len(p.conns) / 2
	p.conns = nil
	return n
}

// TestGatewayCutMidCall cuts the remote's gateway connection while a call
// runs: the remote reconnects, the call is not run again and its result
// arrives exactly once.
func TestGatewayCutMidCall(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	proxy := newCutProxy(t, addr)
	c := &cluster{t: t, admin: adminToken, dataDir: t.TempDir(), addr: addr, url: "http://" + addr,
		extra: []string{"--public-url", "http://" + proxy.addr()}}
	c.startServer()
	token := setupOutpost(t, c, "flaky")
	startWorker(t, c, "flaky", token)
	marks := filepath.Join(t.TempDir(), "runs")
	gate := filepath.Join(t.TempDir(), "gate")
	id := createSession(t, c, api.CreateSessionRequest{
		Outpost: "flaky", Title: "cut the socket",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			execStep(fmt.Sprintf("echo ran >> %s; echo before-cut; while [ ! -e %s ]; do sleep 0.05; done; echo after-cut", marks, gate)),
		}},
	})
	waitfor.Within(t, 30*time.Second, "the command to run", func() bool { _, err := os.Stat(marks); return err == nil })
	if n := proxy.cut(); n == 0 {
		t.Fatal("no gateway connection went through the proxy")
	}
	waitEvent(t, c, id, "the remote to reconnect", func(ev api.Event) bool { return ev.Type == api.EventRemoteDisconnected })
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := c.waitFinal(id, 60*time.Second)
	if s.Status.Status != api.StatusExit {
		t.Fatalf("session ended %s: %s", s.Status.Status, s.Status.Reason)
	}
	runs, _ := os.ReadFile(marks)
	if n := strings.Count(string(runs), "ran"); n != 1 {
		t.Fatalf("the call ran %d times, want once", n)
	}
	results, connects, output := 0, 0, ""
	for _, ev := range c.events(id) {
		switch ev.Type {
		case api.EventResult:
			results++
		case api.EventRemoteConnected:
			connects++
		case api.EventOutput:
			output += ev.Text
		}
	}
	if results != 1 || connects < 2 {
		t.Fatalf("%d results and %d connections, want 1 result over at least 2 connections", results, connects)
	}
	if !strings.Contains(output, "after-cut") {
		t.Errorf("output after the reconnect is missing: %q", output)
	}
}
