//go:build !windows

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
	"github.com/outpost-sh/outpost/internal/store/sealed"
	"github.com/outpost-sh/outpost/test/balancer"
)

// replicaCluster is n `outpost server` replicas on one new PostgreSQL
// database (the benchmark's own server, fsync on), sharing the secret key
// and the admin token, behind a round-robin TCP balancer (test/balancer).
// front is a cluster whose url is the balancer's: workers and remotes go
// through it. direct holds an admin client of each replica itself.
type replicaCluster struct {
	front  *cluster
	urls   []string
	direct []*client.Client
	procs  []*proc // the replicas' processes
}

// clusterCPU is CPU time (user+system) spent by a cluster's replicas and
// by its PostgreSQL server (the postmaster and its backends).
// clients is the benchmark's own (its claimers), which share the machine.
type clusterCPU struct{ servers, postgres, clients time.Duration }

func (c clusterCPU) minus(o clusterCPU) clusterCPU {
	return clusterCPU{servers: c.servers - o.servers, postgres: c.postgres - o.postgres, clients: c.clients - o.clients}
}

// cpu reads the cluster's CPU time so far. A backend that exits between
// two readings takes its time with it: the pools keep theirs open.
func (rc *replicaCluster) cpu() clusterCPU {
	var c clusterCPU
	c.clients, _ = procCPU(os.Getpid())
	for _, p := range rc.procs {
		if t, err := procCPU(p.cmd.Process.Pid); err == nil {
			c.servers += t
		}
	}
	if pid := benchPG.srv.PID(); pid != 0 {
		for _, q := range append([]int{pid}, children(pid)...) {
			if t, err := procCPU(q); err == nil {
				c.postgres += t
			}
		}
	}
	return c
}

// claimCommits counts the claims committed in groups and those groups,
// summed over a cluster's replicas.
type claimCommits struct{ groups, grouped float64 }

func (c claimCommits) minus(o claimCommits) claimCommits {
	return claimCommits{c.groups - o.groups, c.grouped - o.grouped}
}

// claimGroups reads every replica's group-commit counters.
func (rc *replicaCluster) claimGroups(ctx context.Context) (claimCommits, error) {
	var c claimCommits
	for _, u := range rc.urls {
		g, err := counterSum(ctx, u, "outpost_store_claim_groups_total")
		if err != nil {
			return c, err
		}
		n, err := counterSum(ctx, u, "outpost_store_grouped_claims_total")
		if err != nil {
			return c, err
		}
		c.groups += g
		c.grouped += n
	}
	return c, nil
}

// startReplicaCluster starts n replicas; the first alone (it migrates the
// schema and creates the admin token), then the others.
func startReplicaCluster(b *testing.B, n int) *replicaCluster {
	b.Helper()
	pgtest.Require(b)
	benchPG.once.Do(func() { benchPG.srv, benchPG.err = pgtest.Start(pgtest.Options{Fsync: true}) })
	if benchPG.err != nil {
		b.Fatal(benchPG.err)
	}
	db := benchDatabase(b)
	key, err := sealed.GenerateKey()
	if err != nil {
		b.Fatal(err)
	}
	addrs := freeAddrs(b, n+1) // the last for the balancer
	lb, err := balancer.Start(addrs[n], addrs[:n])
	addrs = addrs[:n]
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(lb.Close)
	rc := &replicaCluster{front: &cluster{b: b, url: lb.URL(), outpost: "bench"}}
	withReplicaFlags := replicaFlags(b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i, addr := range addrs {
		args := []string{"server", "--listen", addr, "--data-dir", b.TempDir(), "--log-level", "warn", "--database", db, "--public-url", lb.URL()}
		if withReplicaFlags {
			args = append(args, "--replica-id", fmt.Sprintf("r%d", i+1), "--replica-url", "http://"+addr)
		}
		p := start(b, fmt.Sprintf("replica-%d", i+1), []string{"OUTPOST_ADMIN_TOKEN=" + adminToken, "OUTPOST_SECRET_KEY=" + sealed.EncodeKey(key)}, args...)
		if i == 0 {
			rc.front.server = p
		}
		rc.procs = append(rc.procs, p)
		cl, err := client.New("http://"+addr, adminToken, client.WithHTTPClient(pooledHTTP(8)))
		if err != nil {
			b.Fatal(err)
		}
		for cl.Ready(ctx) != nil {
			select {
			case <-ctx.Done():
				b.Fatalf("replica %d did not become ready", i+1)
			case <-p.done:
				b.Fatalf("replica %d exited: %v", i+1, p.err)
			case <-time.After(20 * time.Millisecond):
			}
		}
		rc.urls = append(rc.urls, "http://"+addr)
		rc.direct = append(rc.direct, cl)
	}
	if rc.front.admin, err = client.New(lb.URL(), adminToken); err != nil {
		b.Fatal(err)
	}
	if _, err := rc.front.admin.Outposts.Create(ctx, api.CreateOutpostRequest{Name: rc.front.outpost, Platform: api.PlatformLinux}); err != nil {
		b.Fatal(err)
	}
	tok, err := rc.front.admin.Tokens.Create(ctx, api.CreateTokenRequest{Name: "bench-worker", Scopes: []string{api.ScopeMachine}, Outpost: rc.front.outpost})
	if err != nil {
		b.Fatal(err)
	}
	rc.front.machine = tok.Secret
	return rc
}

// freeAddrs returns n distinct loopback addresses with free ports (the
// listeners are held until all are picked).
func freeAddrs(b *testing.B, n int) []string {
	b.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		addrs[i] = ln.Addr().String()
	}
	return addrs
}

// replicaFlags reports whether the binary has --replica-id and
// --replica-url; without them (a build from before them, measured for
// comparison) replicas run unnamed.
func replicaFlags(b *testing.B) bool {
	out, _ := exec.Command(outpostBinary(b), "server", "--help").CombinedOutput()
	return strings.Contains(string(out), "--replica-id") && strings.Contains(string(out), "--replica-url")
}

// BenchmarkReplicaDispatch measures dispatch latency with 1, 2 and 3
// replicas on one PostgreSQL database behind a round-robin TCP balancer,
// with one idle worker whose connections (queue watch, claims, its remotes'
// gateway connections) go through the balancer.
//
// The method is BenchmarkDispatch's (a FIFO the session's only command
// opens; dispatch = command running − POST returned), but session i is
// created through replica i mod n directly, so with n > 1 most sessions
// are created on a replica other than the one the worker's queue watch is
// on: their dispatch includes the cross-replica wake-up. The result is
// also split by the creating replica.
//
// OUTPOST_BENCH_REPLICA_SESSIONS sets the sessions per replica count
// (default 60).
func BenchmarkReplicaDispatch(b *testing.B) {
	n := envInt("OUTPOST_BENCH_REPLICA_SESSIONS", 60)
	const warmup = 3
	for _, replicas := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("replicas-%d", replicas), func(b *testing.B) {
			for range b.N {
				rc := startReplicaCluster(b, replicas)
				c := rc.front
				ws := b.TempDir()
				c.startWorker(ws)
				fifo := filepath.Join(ws, "dispatch.fifo")
				if err := syscall.Mkfifo(fifo, 0o600); err != nil {
					b.Fatal(err)
				}
				var all []time.Duration
				per := make([][]time.Duration, replicas)
				perClaim := make([][]time.Duration, replicas)
				for i := range warmup + n {
					via := i % replicas
					lat, claim, err := dispatchOnce(rc.direct[via], c, fifo)
					if err != nil {
						b.Fatal(err)
					}
					if i >= warmup {
						all = append(all, lat)
						per[via] = append(per[via], lat)
						perClaim[via] = append(perClaim[via], claim)
					}
					time.Sleep(150 * time.Millisecond) // the worker back to watching, as in BenchmarkDispatch
				}
				d := summarize(all)
				report(b, "dispatch-", d, "ms")
				b.Logf("machine: %s", machineInfo())
				b.Logf("replicas=%d dispatch (POST returned → command running): %s", replicas, d)
				for r, l := range per {
					b.Logf("  created through replica %d: %s", r+1, summarize(l))
					b.Logf("    created → claimed (server event times): %s", summarize(perClaim[r]))
				}
				b.Logf("SUMMARY replica dispatch, %d replicas: p50=%s p99=%s over %d sessions", replicas, rd(d.p50), rd(d.p99), d.n)
			}
		})
	}
}

// dispatchOnce creates a session through cl whose one command opens fifo
// and returns the time from the create's answer to the command running,
// and from its creation to its claim (the servers' event times, ms
// resolution: the queue watch's wake-up and the claim); it waits until the
// worker released the claim.
func dispatchOnce(cl *client.Client, c *cluster, fifo string) (dispatch, claim time.Duration, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	running := make(chan time.Time, 1)
	go func() {
		f, err := os.OpenFile(fifo, os.O_RDONLY, 0)
		at := time.Now()
		if err == nil {
			_, _ = io.Copy(io.Discard, f)
			f.Close()
		}
		running <- at
	}()
	sess, err := cl.Sessions.Create(ctx, api.CreateSessionRequest{Outpost: c.outpost, Title: "dispatch",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{execStep(": > " + fifo)}}})
	returned := time.Now()
	if err != nil {
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil { // unblock the reader
			f.Close()
		}
		<-running
		return 0, 0, err
	}
	var at time.Time
	select {
	case at = <-running:
	case <-ctx.Done():
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		<-running
		return 0, 0, fmt.Errorf("session %s: its command did not run within 60 s", sess.Metadata.SessionID)
	}
	if err := c.waitGone(ctx, sess.Metadata.SessionID); err != nil {
		return 0, 0, err
	}
	evs, err := cl.Sessions.Events(ctx, sess.Metadata.SessionID, 0, 1000)
	if err != nil {
		return 0, 0, err
	}
	var created, claimed int64
	for _, ev := range evs.Items {
		switch {
		case ev.Type == api.EventStatus && ev.Status == api.StatusNew && created == 0:
			created = ev.Time
		case ev.Type == api.EventClaim && claimed == 0:
			claimed = ev.Time
		}
	}
	return at.Sub(returned), time.Duration(claimed-created) * time.Millisecond, nil
}

// BenchmarkReplicaClaims measures claim throughput with 1, 2 and 3
// replicas: BenchmarkClaims' phase 1 (50 concurrent claimers, each claiming
// its own K distinct pending sessions one after another, pooled clients),
// with claimer g talking to replica g mod n directly.
//
// OUTPOST_BENCH_CLAIMS_PER_WORKER sets K (default 40).
func BenchmarkReplicaClaims(b *testing.B) {
	const claimers = 50
	k := envInt("OUTPOST_BENCH_CLAIMS_PER_WORKER", 40)
	for _, replicas := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("replicas-%d", replicas), func(b *testing.B) {
			for range b.N {
				rc := startReplicaCluster(b, replicas)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				ids, err := createPending(ctx, rc.front, claimers*k)
				if err != nil {
					b.Fatal(err)
				}
				cls := make([]*client.Client, replicas)
				for i, u := range rc.urls {
					if cls[i], err = client.New(u, rc.front.machine, client.WithHTTPClient(pooledHTTP(claimers))); err != nil {
						b.Fatal(err)
					}
				}
				groups0, groupsErr := rc.claimGroups(ctx)
				cpu0 := rc.cpu()
				all, elapsed, err := claimDistinct(ctx, func(g int) *client.Client { return cls[g%replicas] }, ids, claimers, k)
				if err != nil {
					b.Fatal(err)
				}
				cpu := rc.cpu().minus(cpu0)
				// Claims commit in groups per server (group commit): spread
				// over replicas, each sees a share of the claimers, and its
				// groups are smaller, each with its own commit and flush.
				// With OUTPOST_PG_GROUP_UPDATES other updates join the
				// groups and the counters, so the figure is left out.
				groups1, err := rc.claimGroups(ctx)
				switch {
				case groupsErr != nil || err != nil:
					b.Logf("claim commits not reported: %v", errors.Join(groupsErr, err))
				case os.Getenv("OUTPOST_PG_GROUP_UPDATES") != "":
					b.Logf("claim commits not reported: OUTPOST_PG_GROUP_UPDATES counts other updates in the groups")
				default:
					groups := groups1.minus(groups0)
					commits := groups.groups + float64(len(all)) - groups.grouped
					b.ReportMetric(commits/float64(len(all)), "commits/claim")
					b.Logf("claim commits: %.0f for %d claims (%.2f a claim); %.0f groups of %.1f claims on average",
						commits, len(all), commits/float64(len(all)), groups.groups, groups.grouped/max(groups.groups, 1))
				}
				d := summarize(all)
				rate := float64(len(all)) / elapsed.Seconds()
				b.ReportMetric(rate, "claims/s")
				perClaim := func(t time.Duration) float64 { return float64(t) / float64(time.Millisecond) / float64(len(all)) }
				b.ReportMetric(perClaim(cpu.servers), "server-cpu-ms/claim")
				b.ReportMetric(perClaim(cpu.postgres), "postgres-cpu-ms/claim")
				b.ReportMetric(perClaim(cpu.clients), "client-cpu-ms/claim")
				b.Logf("CPU while claiming: replicas %s (%.2f ms a claim), PostgreSQL %s (%.2f ms), claimers %s (%.2f ms); %.0f%% of %d cores",
					rd(cpu.servers), perClaim(cpu.servers), rd(cpu.postgres), perClaim(cpu.postgres), rd(cpu.clients), perClaim(cpu.clients),
					100*float64(cpu.servers+cpu.postgres+cpu.clients)/float64(elapsed)/float64(runtime.NumCPU()), runtime.NumCPU())
				report(b, "claim-", d, "ms")
				b.Logf("machine: %s", machineInfo())
				b.Logf("replicas=%d: %d claimers claimed %d distinct pending sessions in %s: %.0f claims/s", replicas, claimers, len(all), rd(elapsed), rate)
				b.Logf("  claim latency: %s", d)
				b.Logf("SUMMARY replica claims, %d replicas: %.0f claims/s, p50=%s p99=%s with %d concurrent claimers", replicas, rate, rd(d.p50), rd(d.p99), claimers)
			}
		})
	}
}
