//go:build !windows

package bench

import (
	"bufio"
	"context"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/orchestrator/podmantest"
)

// The provisioning benchmarks measure how long a session waits between its
// creation and its remote connecting, when `outpost orchestrate --backend
// B` serves the outpost: the watch, the claim, the machine (a process, a
// bwrap sandbox under its supervisor, a container) and the remote's
// start-up, dial and hello.
//
// Sessions run one at a time on an idle orchestrator (--max-concurrent 1),
// each a single `exec true` step: after each, the benchmark waits until the
// claim was released (the machine is torn down first), then 150 ms more.
// The latency is taken on this process's clock, from POST /v1/sessions
// returning to the remote_connected event arriving on a live follower; the
// transcript's event times (server clock, ms) split it into created →
// claimed and claimed → remote_connected. The orchestrator's own provision
// time (the backend's Provision, from its metrics) is reported as a mean.
//
// OUTPOST_BENCH_SESSIONS sets the number of sessions (default 100; 30 for
// docker, OUTPOST_BENCH_DOCKER_SESSIONS).

// BenchmarkProvisionProcess measures the process backend.
func BenchmarkProvisionProcess(b *testing.B) {
	benchProvision(b, provisionBench{backend: "process", goalP50: 100 * time.Millisecond,
		sessions: envInt("OUTPOST_BENCH_SESSIONS", 100), warmup: 5})
}

// BenchmarkProvisionBwrap measures the bwrap backend.
func BenchmarkProvisionBwrap(b *testing.B) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		b.Skip("bwrap not installed (apt-get install bubblewrap)")
	}
	benchProvision(b, provisionBench{backend: "bwrap", goalP50: 150 * time.Millisecond,
		sessions: envInt("OUTPOST_BENCH_SESSIONS", 100), warmup: 5})
}

// BenchmarkProvisionDocker measures the docker backend on Podman's
// Docker-compatible API service with podmantest's image; afterwards no
// container of the outpost may be left.
func BenchmarkProvisionDocker(b *testing.B) {
	host := podmantest.API(b)
	benchProvision(b, provisionBench{backend: "docker", goalP50: time.Second,
		sessions: envInt("OUTPOST_BENCH_DOCKER_SESSIONS", 30), warmup: 3,
		args: []string{"--docker-host", host, "--docker-image", podmantest.Image}})
}

// provisionBench is one provisioning benchmark.
type provisionBench struct {
	backend          string
	goalP50          time.Duration
	sessions, warmup int
	args             []string // more orchestrate flags
}

func benchProvision(b *testing.B, pb provisionBench) {
	backend, goalP50, n, warmup := pb.backend, pb.goalP50, pb.sessions, pb.warmup
	for range b.N {
		c := startCluster(b, "")
		home := b.TempDir()
		metrics := freeAddr(b)
		args := append([]string{"orchestrate", "--outpost", c.outpost, "--backend", backend, "--max-concurrent", "1",
			"--state-dir", filepath.Join(home, "state"), "--metrics-listen", metrics, "--log-level", "warn"}, pb.args...)
		o := start(b, "orchestrator", []string{"OUTPOST_SERVER=" + c.url, "OUTPOST_TOKEN=" + c.machine, "HOME=" + home, "XDG_CONFIG_HOME=" + home}, args...)
		time.Sleep(time.Second) // backend checks, list, then watch
		select {
		case <-o.done:
			b.Fatalf("the orchestrator exited: %v", o.err)
		default:
		}
		var fromReturn, segClaim, segConnect []time.Duration
		for i := range warmup + n {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			sess, err := c.script(ctx, "provision", execStep("true"))
			t1 := time.Now()
			if err != nil {
				b.Fatal(err)
			}
			id := sess.Metadata.SessionID
			connected := make(chan time.Time, 1)
			f := follow(ctx, c.admin, id, func(ev api.Event, at time.Time) bool {
				if ev.Type == api.EventRemoteConnected {
					select {
					case connected <- at:
					default:
					}
				}
				return false
			})
			var at time.Time
			select {
			case at = <-connected:
			case <-ctx.Done():
				b.Fatalf("session %d (%s): its remote did not connect within 90 s", i, id)
			}
			if err := c.waitGone(ctx, id); err != nil {
				b.Fatal(err)
			}
			_, _ = f.wait(ctx)
			evs, err := c.admin.Sessions.Events(ctx, id, 0, 1000)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			time.Sleep(150 * time.Millisecond)
			if i < warmup {
				continue
			}
			var created, claimed, remote int64
			for _, ev := range evs.Items {
				switch {
				case ev.Type == api.EventStatus && ev.Status == api.StatusNew && created == 0:
					created = ev.Time
				case ev.Type == api.EventClaim && claimed == 0:
					claimed = ev.Time
				case ev.Type == api.EventRemoteConnected && remote == 0:
					remote = ev.Time
				}
			}
			msd := func(a, b int64) time.Duration { return time.Duration(b-a) * time.Millisecond }
			fromReturn = append(fromReturn, at.Sub(t1))
			segClaim = append(segClaim, msd(created, claimed))
			segConnect = append(segConnect, msd(claimed, remote))
		}
		if backend == "docker" {
			if got := podmantest.Containers(b, "sh.outpost.outpost="+c.outpost); len(got) > 0 {
				b.Errorf("containers left: %v", got)
			}
		}
		d := summarize(fromReturn)
		report(b, "connect-", d, "ms")
		b.Logf("machine: %s", machineInfo())
		b.Logf("%s: queued (POST returned) → remote connected: %s", backend, d)
		b.Logf("  created → claimed (watch + claim), server ms:       %s", summarize(segClaim))
		b.Logf("  claimed → remote_connected (provision, start), ms:   %s", summarize(segConnect))
		if sum, count, ok := provisionSeconds("http://" + metrics + "/metrics"); ok && count > 0 {
			b.Logf("  backend Provision (orchestrator metrics): mean %s over %d", rd(time.Duration(sum/count*float64(time.Second))), int(count))
		}
		goal := "MET"
		if d.p50 >= goalP50 {
			goal = "MISSED"
		}
		b.Logf("SUMMARY provision %s: p50=%s p99=%s over %d sessions (goal p50 < %s: %s)", backend, rd(d.p50), rd(d.p99), d.n, goalP50, goal)
	}
}

// provisionSeconds reads the orchestrator's provision histogram's sum and
// count.
func provisionSeconds(url string) (sum, count float64, ok bool) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, v, found := strings.Cut(sc.Text(), " ")
		if !found {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			continue
		}
		switch name {
		case "outpost_orchestrator_provision_seconds_sum":
			sum = f
		case "outpost_orchestrator_provision_seconds_count":
			count, ok = f, true
		}
	}
	return sum, count, ok
}
