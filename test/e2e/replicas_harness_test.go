//go:build linux

package e2e

import (
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
	"github.com/outpost-sh/outpost/internal/store/sealed"
	"github.com/outpost-sh/outpost/internal/waitfor"
	"github.com/outpost-sh/outpost/test/balancer"
)

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
// round-robin TCP balancer (test/balancer). front reaches them through the balancer, as workers, remotes
// and users do; each replica's direct view reaches that one alone.
type replicaSet struct {
	t     *testing.T
	db    string
	key   string
	env   []string           // extra server environment
	extra []string           // extra server flags
	lb    *balancer.Balancer // nil with replicaOptions.Front
	// frontAddr is a free address, distinct from the replicas', for
	// what replicaOptions.Front starts.
	frontAddr string
	front     *cluster
	replicas  []*replica
}

// replicaOptions configure startReplicaSet.
type replicaOptions struct {
	// N is the number of replicas; 0 means 3.
	N int
	// Env is extra environment of every replica (e.g. OUTPOST_LLM_*).
	Env []string
	// Args are extra flags of every replica.
	Args []string
	// Front, when set, starts what is in front of the replicas (given
	// their addresses) instead of the test balancer, and returns how to
	// reach it; Holder is then unknown.
	Front func(rs *replicaSet, addrs []string) *cluster
	// Together starts every replica at once, as a Deployment's pods start
	// on an empty database; otherwise the first starts alone.
	Together bool
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
	addrs := freeAddrs(t, opts.N+1) // the last for what is in front
	rs.frontAddr, addrs = addrs[opts.N], addrs[:opts.N]
	for i := range addrs {
		rs.replicas = append(rs.replicas, &replica{id: fmt.Sprintf("r%d", i+1), addr: addrs[i], dataDir: t.TempDir()})
	}
	if opts.Front != nil {
		rs.front = opts.Front(rs, addrs)
	} else {
		lb, err := balancer.Start(rs.frontAddr, addrs)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(lb.Close)
		rs.lb = lb
		rs.front = &cluster{t: t, admin: adminToken, url: lb.URL(), addr: lb.Addr()}
	}
	if opts.Together {
		for i := range rs.replicas {
			rs.launch(i)
		}
		for i := range rs.replicas {
			rs.waitReady(i)
		}
		return rs
	}
	for i := range rs.replicas {
		rs.start(i)
	}
	return rs
}

// hasReplicaFlags reports whether the binary under test has --replica-id
// and --replica-url; a build without them runs its replicas unnamed.
var hasReplicaFlags = sync.OnceValue(func() bool {
	out, _ := exec.Command(binary, "server", "--help").CombinedOutput()
	return strings.Contains(string(out), "--replica-id") && strings.Contains(string(out), "--replica-url")
})

// start starts (or restarts) replica i on its address and data dir and
// waits until it is ready.
func (rs *replicaSet) start(i int) {
	rs.t.Helper()
	rs.launch(i)
	rs.waitReady(i)
}

// launch starts replica i's process.
func (rs *replicaSet) launch(i int) {
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
}

// waitReady waits until replica i answers /readyz with 200.
func (rs *replicaSet) waitReady(i int) {
	rs.t.Helper()
	r := rs.replicas[i]
	waitfor.Within(rs.t, 30*time.Second, "replica "+r.id+" ready", func() bool {
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
	waitfor.Within(rs.t, 30*time.Second, "the remote of "+session+" to connect", func() bool {
		b = rs.lb.Holder(session)
		return b >= 0
	})
	return b
}

// waitWorkers waits until n workers of outpost are connected, counted
// over every replica (one replica alone may list only the workers whose
// heartbeats reach it).
func (rs *replicaSet) waitWorkers(outpost string, n int) {
	rs.t.Helper()
	waitfor.Within(rs.t, 60*time.Second, fmt.Sprintf("%d workers on %s", n, outpost), func() bool {
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
