package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/api"
)

// BenchmarkProvisionDocker measures how long a session waits between being
// queued and its remote connecting from a fresh container, with a real
// server and a real `outpost orchestrate --backend docker` on Podman's
// Docker-compatible API service (started here, on a socket of its own),
// using the image scripts/test-image.sh makes.
//
// Sessions run one at a time, each a single `exec true` step; after each,
// the benchmark waits until the orchestrator released the claim (the
// container is removed by then), then 150 ms more. The latency is from the
// return of POST /v1/sessions to the arrival of the transcript's
// remote_connected event at a live follower; the transcript's event times
// (server clock, ms) split it into created→claimed (queue watch and claim)
// and claimed→remote_connected (container create and start, the remote's
// start-up, dial and hello).
//
// OUTPOST_BENCH_DOCKER_SESSIONS sets the number of sessions (default 30).
// Without podman the benchmark is skipped.
func BenchmarkProvisionDocker(b *testing.B) {
	n := envInt("OUTPOST_BENCH_DOCKER_SESSIONS", 30)
	const warmup = 3
	for range b.N {
		host := benchPodman(b)
		c := startCluster(b, "")
		home := b.TempDir()
		orch := start(b, "orchestrator", []string{"OUTPOST_SERVER=" + c.url, "OUTPOST_TOKEN=" + c.machine, "HOME=" + home, "XDG_CONFIG_HOME=" + home},
			"orchestrate", "--outpost", c.outpost, "--state-dir", filepath.Join(home, "orchestrator"), "--max-concurrent", "1",
			"--backend", "docker", "--docker-host", host, "--docker-image", benchDockerImage, "--log-level", "info")
		time.Sleep(time.Second) // API check, list, then watch
		select {
		case <-orch.done:
			b.Fatalf("the orchestrator exited: %v", orch.err)
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
				b.Fatalf("session %d (%s): no remote connected within 90 s", i, id)
			}
			if err := c.waitGone(ctx, id); err != nil {
				b.Fatal(err)
			}
			evs, err := c.admin.Sessions.Events(ctx, id, 0, 1000)
			cancel()
			_, _ = f.wait(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			if i >= warmup {
				fromReturn = append(fromReturn, at.Sub(t1))
				var created, claimed, conn int64
				for _, ev := range evs.Items {
					switch {
					case ev.Type == api.EventStatus && ev.Status == api.StatusNew && created == 0:
						created = ev.Time
					case ev.Type == api.EventClaim && claimed == 0:
						claimed = ev.Time
					case ev.Type == api.EventRemoteConnected && conn == 0:
						conn = ev.Time
					}
				}
				msd := func(a, b int64) time.Duration { return time.Duration(b-a) * time.Millisecond }
				segClaim = append(segClaim, msd(created, claimed))
				segConnect = append(segConnect, msd(claimed, conn))
			}
			time.Sleep(150 * time.Millisecond)
		}
		if out, err := exec.Command("podman", "ps", "-a", "-q", "--filter", "label=sh.outpost.outpost="+c.outpost).Output(); err == nil && len(strings.TrimSpace(string(out))) > 0 {
			b.Errorf("containers left: %s", out)
		}
		d := summarize(fromReturn)
		report(b, "provision-", d, "ms")
		b.Logf("machine: %s", machineInfo())
		b.Logf("queued (POST returned) → remote_connected seen: %s", d)
		b.Logf("breakdown, ms resolution (server event times):")
		b.Logf("  created → claimed (watch + claim):             %s", summarize(segClaim))
		b.Logf("  claimed → remote_connected (container, hello): %s", summarize(segConnect))
		b.Logf("  of which create + start (orchestrator's log):  %s", summarize(provisionTook(b, orch.log, warmup)))
		goal := "MET"
		if d.p50 >= time.Second {
			goal = "MISSED"
		}
		b.Logf("SUMMARY provision docker: p50=%s p99=%s over %d sessions (goal p50 < 1s: %s)", rd(d.p50), rd(d.p99), d.n, goal)
	}
}

const benchDockerImage = "outpost-test:bookworm"

// provisionTook reads the orchestrator's "remote started" log lines: how
// long the backend's Provision (container create and start) took, skipping
// the first skip.
func provisionTook(b *testing.B, logFile string, skip int) []time.Duration {
	raw, err := os.ReadFile(logFile)
	if err != nil {
		b.Fatal(err)
	}
	var out []time.Duration
	for _, m := range regexp.MustCompile(`remote started" .*took=([0-9.]+[a-zµ]+)`).FindAllStringSubmatch(string(raw), -1) {
		if d, err := time.ParseDuration(m[1]); err == nil {
			out = append(out, d)
		}
	}
	if len(out) > skip {
		return out[skip:]
	}
	return nil
}

// benchPodman makes the test image and starts a Podman API service on a
// socket of its own for the benchmark; it is stopped when the benchmark
// ends.
func benchPodman(b *testing.B) string {
	b.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		if os.Getenv("CI") != "" {
			b.Fatal("podman is not installed (CI is set)")
		}
		b.Skip("podman is not installed; apt-get install podman runc debootstrap")
	}
	img := exec.Command("../../scripts/test-image.sh", benchDockerImage)
	img.Stdout, img.Stderr = os.Stderr, os.Stderr
	if err := img.Run(); err != nil {
		b.Fatalf("scripts/test-image.sh: %v", err)
	}
	dir, err := os.MkdirTemp("", "outpost-podman")
	if err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(dir, "podman.sock")
	cmd := exec.Command("podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs", "system", "service", "--time=0", "unix://"+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start the podman API service: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	b.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		os.RemoveAll(dir)
	})
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := hc.Get("http://podman/_ping")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return "unix://" + sock
			}
		}
		if time.Now().After(deadline) {
			b.Fatal(fmt.Errorf("the podman API service did not answer: %w", err))
		}
	}
}
