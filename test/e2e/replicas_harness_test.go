package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
	"github.com/outpost-sh/outpost/internal/store/sealed"
)

// replicaLB is a round-robin TCP load balancer in front of the replicas:
// each new connection goes to the next backend, skipping one that refuses
// the connection (a replica that is down), as a TCP balancer with a
// connect-time health check does. It reads the head of each connection's
// first request (without changing a byte of what it forwards) to learn
// which backend each remote's gateway connection went to, so a test knows
// the replica that holds a session's remote.
type replicaLB struct {
	ln       net.Listener
	backends []string

	mu       sync.Mutex // guards the following
	next     int
	conns    map[net.Conn]struct{}
	gateways map[string]*lbGateway // session id → its latest gateway connection
	closed   bool

	wg sync.WaitGroup
}

// lbGateway is a remote's gateway connection as the balancer saw it.
type lbGateway struct {
	backend int
	open    bool
}

func newReplicaLB(t *testing.T, backends []string) *replicaLB {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lb := &replicaLB{ln: ln, backends: backends, conns: map[net.Conn]struct{}{}, gateways: map[string]*lbGateway{}}
	lb.wg.Add(1)
	go lb.serve()
	t.Cleanup(lb.close)
	return lb
}

func (lb *replicaLB) url() string { return "http://" + lb.ln.Addr().String() }

func (lb *replicaLB) close() {
	lb.ln.Close()
	lb.mu.Lock()
	lb.closed = true
	for c := range lb.conns {
		c.Close()
	}
	lb.mu.Unlock()
	lb.wg.Wait()
}

func (lb *replicaLB) serve() {
	defer lb.wg.Done()
	for {
		in, err := lb.ln.Accept()
		if err != nil {
			return
		}
		lb.wg.Add(1)
		go func() {
			defer lb.wg.Done()
			lb.handle(in)
		}()
	}
}

// dial connects to the next backend that accepts, round robin.
func (lb *replicaLB) dial() (net.Conn, int) {
	lb.mu.Lock()
	first := lb.next
	lb.next = (lb.next + 1) % len(lb.backends)
	lb.mu.Unlock()
	for i := range lb.backends {
		b := (first + i) % len(lb.backends)
		out, err := net.DialTimeout("tcp", lb.backends[b], time.Second)
		if err == nil {
			return out, b
		}
	}
	return nil, -1
}

// track adds (or, with add false, removes) connections; it reports false
// when the balancer is closed.
func (lb *replicaLB) track(add bool, cs ...net.Conn) bool {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for _, c := range cs {
		if add {
			lb.conns[c] = struct{}{}
		} else {
			delete(lb.conns, c)
		}
	}
	return !lb.closed
}

func (lb *replicaLB) handle(in net.Conn) {
	out, backend := lb.dial()
	if out == nil {
		in.Close()
		return
	}
	if !lb.track(true, in, out) {
		in.Close()
		out.Close()
		return
	}
	defer lb.track(false, in, out)
	br := bufio.NewReaderSize(in, 16<<10)
	session := gatewaySession(br)
	var g *lbGateway
	if session != "" {
		g = &lbGateway{backend: backend, open: true}
		lb.mu.Lock()
		lb.gateways[session] = g
		lb.mu.Unlock()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(in, out)
		in.Close()
	}()
	_, _ = io.Copy(out, br)
	out.Close()
	<-done
	if g != nil {
		lb.mu.Lock()
		g.open = false
		lb.mu.Unlock()
	}
}

// gatewaySession peeks at the head of the first request on a connection and
// returns the session a remote's gateway connection serves, or "". Nothing
// is consumed: the buffered bytes are forwarded as they came.
func gatewaySession(br *bufio.Reader) string {
	if _, err := br.Peek(1); err != nil {
		return ""
	}
	for {
		buf, _ := br.Peek(br.Buffered())
		if i := bytes.Index(buf, []byte("\r\n\r\n")); i >= 0 {
			req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(buf[:i+4])))
			if err != nil || req.URL.Path != api.GatewayPath {
				return ""
			}
			return req.Header.Get(api.HeaderSessionID)
		}
		if len(buf) >= br.Size() {
			return ""
		}
		if _, err := br.Peek(len(buf) + 1); err != nil {
			return ""
		}
	}
}

// holder returns the backend whose gateway connection of session is open,
// or -1.
func (lb *replicaLB) holder(session string) int {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if g := lb.gateways[session]; g != nil && g.open {
		return g.backend
	}
	return -1
}

// replica is one `outpost server` process of a replicaSet.
type replica struct {
	id      string // its --replica-id, when the binary has the flag
	addr    string
	dataDir string
	proc    *proc
	direct  *cluster // the replica itself, not through the balancer
}

// replicaSet is three (or n) `outpost server` replicas on one PostgreSQL
// database, sharing the secret key and the admin token, behind a
// replicaLB. front reaches them through the balancer, as workers, remotes
// and users do; each replica's direct view reaches that one alone.
type replicaSet struct {
	t        *testing.T
	db       string
	key      string
	env      []string // extra server environment
	extra    []string // extra server flags
	lb       *replicaLB
	front    *cluster
	replicas []*replica
}

// replicaOptions configure startReplicaSet.
type replicaOptions struct {
	// N is the number of replicas; 0 means 3.
	N int
	// Env is extra environment of every replica (e.g. OUTPOST_LLM_*).
	Env []string
	// Args are extra flags of every replica.
	Args []string
}

// startReplicaSet starts a PostgreSQL server, a database, the replicas on
// it and the balancer in front of them. The first replica starts alone
// (it creates the admin token and migrates the schema), the others after.
func startReplicaSet(t *testing.T, opts replicaOptions) *replicaSet {
	t.Helper()
	if opts.N == 0 {
		opts.N = 3
	}
	pg := pgtest.StartT(t, pgtest.Options{})
	key, err := sealed.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	rs := &replicaSet{t: t, db: pg.Database(t), key: sealed.EncodeKey(key), env: opts.Env, extra: opts.Args}
	addrs := make([]string, opts.N)
	for i := range addrs {
		addrs[i] = freeAddr(t)
		rs.replicas = append(rs.replicas, &replica{id: fmt.Sprintf("r%d", i+1), addr: addrs[i], dataDir: t.TempDir()})
	}
	rs.lb = newReplicaLB(t, addrs)
	rs.front = &cluster{t: t, admin: adminToken, url: rs.lb.url(), addr: rs.lb.ln.Addr().String()}
	for i := range rs.replicas {
		rs.start(i)
	}
	return rs
}

// hasReplicaFlags reports whether the binary under test has --replica-id
// and --replica-url (part C of issue 16); before it, replicas run without.
var hasReplicaFlags = sync.OnceValue(func() bool {
	out, _ := exec.Command(binary, "server", "--help").CombinedOutput()
	return strings.Contains(string(out), "--replica-id") && strings.Contains(string(out), "--replica-url")
})

// start starts (or restarts) replica i on its address and data dir and
// waits until it is ready.
func (rs *replicaSet) start(i int) {
	rs.t.Helper()
	r := rs.replicas[i]
	args := []string{"server", "--listen", r.addr, "--data-dir", r.dataDir, "--database", rs.db, "--public-url", rs.front.url}
	if hasReplicaFlags() {
		args = append(args, "--replica-id", r.id, "--replica-url", "http://"+r.addr)
	}
	args = append(args, rs.extra...)
	env := append([]string{"OUTPOST_ADMIN_TOKEN=" + adminToken, "OUTPOST_SECRET_KEY=" + rs.key}, rs.env...)
	r.proc = start(rs.t, "replica "+r.id, env, args...)
	r.direct = &cluster{t: rs.t, admin: adminToken, url: "http://" + r.addr, addr: r.addr, dataDir: r.dataDir, server: r.proc}
	waitFor(rs.t, 30*time.Second, "replica "+r.id+" ready", func() bool {
		select {
		case <-r.proc.done:
			rs.t.Fatalf("replica %s exited: %v", r.id, r.proc.err)
		default:
		}
		resp, err := http.Get(r.direct.url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// kill9 kills replica i with SIGKILL, as the loss of its machine would.
func (rs *replicaSet) kill9(i int) { rs.replicas[i].proc.kill9() }

// holder returns the replica whose gateway holds session's remote, waiting
// for one to.
func (rs *replicaSet) holder(session string) int {
	rs.t.Helper()
	b := -1
	waitFor(rs.t, 30*time.Second, "the remote of "+session+" to connect", func() bool {
		b = rs.lb.holder(session)
		return b >= 0
	})
	return b
}

// waitWorkers waits until n workers of outpost are connected, counted
// over every replica (one replica alone may list only the workers whose
// heartbeats reach it).
func (rs *replicaSet) waitWorkers(outpost string, n int) {
	rs.t.Helper()
	waitFor(rs.t, 60*time.Second, fmt.Sprintf("%d workers on %s", n, outpost), func() bool {
		ids := map[string]bool{}
		for _, r := range rs.replicas {
			for _, w := range connectedWorkers(rs.t, r.direct, outpost) {
				ids[w.AcceptorID] = true
			}
		}
		return len(ids) == n
	})
}

// other returns a replica index different from each of not.
func (rs *replicaSet) other(not ...int) int {
	for i := range rs.replicas {
		if !containsInt(not, i) {
			return i
		}
	}
	rs.t.Fatalf("no replica other than %v", not)
	return -1
}

func containsInt(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
