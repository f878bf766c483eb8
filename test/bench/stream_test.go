//go:build !windows

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// BenchmarkStream runs a session whose one exec writes SIZE bytes to
// stdout (`head -c SIZE /dev/zero | tr '\0' a`) on a real server, worker
// and remote, and follows it live with client.Sessions.Follow. It reports
// the rate the follower sees output at (bytes of output events received,
// over the time from the first output event to the result event), how many
// of the bytes written reached the follower, and the peak RSS (VmHWM) of
// the server process and of the remote process (the worker's child).
// Sizes: 256 MiB and 1 GiB, each on a fresh server; OUTPOST_BENCH_STREAM_MIB
// replaces them with one size.
func BenchmarkStream(b *testing.B) {
	sizes := []int{256, 1024}
	if v := envInt("OUTPOST_BENCH_STREAM_MIB", 0); v > 0 {
		sizes = []int{v}
	}
	for _, mib := range sizes {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			for range b.N {
				runStream(b, int64(mib)<<20)
			}
		})
	}
}

// memWatch samples the peak RSS of the server and of the worker's remote.
type memWatch struct {
	mu                   sync.Mutex
	serverHWM, remoteHW  int64
	remoteRSS            int64 // largest VmRSS sample of the remote
	remotePID            int
	serverCPU, remoteCPU time.Duration // user+system CPU time, last sample
}

// procCPU reads the user+system CPU time of a process.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which ends with the last ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	var ut, st int64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &st)
	return time.Duration(ut+st) * 10 * time.Millisecond, nil // USER_HZ = 100
}

func (m *memWatch) run(ctx context.Context, serverPID, workerPID int) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		m.sample(serverPID, workerPID)
		select {
		case <-ctx.Done():
			m.sample(serverPID, workerPID)
			return
		case <-t.C:
		}
	}
}

func (m *memWatch) sample(serverPID, workerPID int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if hwm, _, err := procMem(serverPID); err == nil {
		m.serverHWM = max(m.serverHWM, hwm)
	}
	if cpu, err := procCPU(serverPID); err == nil {
		m.serverCPU = cpu
	}
	if m.remotePID == 0 {
		for _, pid := range children(workerPID) {
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "outpost" {
				m.remotePID = pid
			}
		}
	}
	if m.remotePID != 0 {
		if hwm, rss, err := procMem(m.remotePID); err == nil {
			m.remoteHW = max(m.remoteHW, hwm)
			m.remoteRSS = max(m.remoteRSS, rss)
		}
		if cpu, err := procCPU(m.remotePID); err == nil {
			m.remoteCPU = cpu
		}
	}
}

func runStream(b *testing.B, size int64) {
	c := startCluster(b, "")
	ws := b.TempDir()
	w := c.startWorker(ws)
	idleHWM, _, _ := procMem(c.server.cmd.Process.Pid)
	idleCPU, _ := procCPU(c.server.cmd.Process.Pid)
	var self0, self1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self0)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	watchCtx, stopWatch := context.WithCancel(ctx)
	mem := &memWatch{}
	watched := make(chan struct{})
	go func() {
		mem.run(watchCtx, c.server.cmd.Process.Pid, w.cmd.Process.Pid)
		close(watched)
	}()

	sess, err := c.script(ctx, "stream", execStep(fmt.Sprintf(`head -c %d /dev/zero | tr '\0' a`, size)))
	if err != nil {
		b.Fatal(err)
	}
	var (
		stored, spilled, events atomic.Int64
		first, callAt, resAt    time.Time
		dropped                 bool
		result                  api.ExecResult
		marker                  string
	)
	f := follow(ctx, c.admin, sess.Metadata.SessionID, func(ev api.Event, at time.Time) bool {
		switch ev.Type {
		case api.EventCall:
			callAt = at
		case api.EventOutput:
			if ev.Seq > 0 && ev.Spilled {
				marker = ev.Text // where the rest went
				return false
			}
			if first.IsZero() {
				first = at
			}
			events.Add(1)
			if ev.Spilled {
				spilled.Add(int64(len(ev.Text)))
			} else {
				stored.Add(int64(len(ev.Text)))
			}
			if !dropped && strings.Contains(ev.Text, "[outpost: output dropped") {
				dropped = true
			}
		case api.EventResult:
			resAt = at
			_ = json.Unmarshal(ev.Value, &result)
			if ev.OK == nil || !*ev.OK {
				b.Errorf("the exec failed: %s", ev.Error)
			}
		}
		return false
	})
	if _, err := f.wait(ctx); err != nil {
		st, gerr := c.admin.Sessions.Get(context.Background(), sess.Metadata.SessionID)
		if gerr == nil {
			b.Logf("session %s: %s/%s: %s", sess.Metadata.SessionID, st.Status.Status, st.Status.StatusDetail, st.Status.Reason)
		}
		b.Logf("follower saw %d output bytes; result seen: %v", stored.Load()+spilled.Load(), !resAt.IsZero())
		b.Fatalf("follow: %v", err)
	}
	if err := c.waitGone(ctx, sess.Metadata.SessionID); err != nil {
		b.Fatal(err)
	}
	stopWatch()
	<-watched
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self1)
	selfCPU := time.Duration(self1.Utime.Nano()+self1.Stime.Nano()-self0.Utime.Nano()-self0.Stime.Nano()) * time.Nanosecond
	if first.IsZero() || resAt.IsZero() {
		b.Fatal("no output or no result seen")
	}

	got := stored.Load() + spilled.Load()
	span := resAt.Sub(first)
	rate := float64(got) / span.Seconds() / 1e6
	e2e := float64(size) / resAt.Sub(callAt).Seconds() / 1e6
	mib := func(v int64) float64 { return float64(v) / (1 << 20) }
	b.ReportMetric(rate, "follower-MB/s")
	b.ReportMetric(100*float64(got)/float64(size), "delivered-%")
	b.ReportMetric(mib(mem.serverHWM), "server-hwm-MiB")
	b.ReportMetric(mib(mem.remoteHW), "remote-hwm-MiB")
	b.Logf("wrote %d bytes (%d MiB); the exec reported output_bytes=%d", size, size>>20, result.OutputBytes)
	b.Logf("follower received %d bytes in %d output events (%d kept in the transcript, %d live spilled chunks) = %.1f%% of the output",
		got, events.Load(), stored.Load(), spilled.Load(), 100*float64(got)/float64(size))
	if dropped {
		b.Logf("the output contains the remote's 'output dropped' marker: the remote discarded output")
	}
	var more int64
	fmt.Sscanf(marker, "[%d more bytes", &more)
	if marker == "" {
		// The follower missed the marker: read it from the transcript.
		after := int64(0)
		for {
			page, err := c.admin.Sessions.Events(ctx, sess.Metadata.SessionID, after, 1000)
			if err != nil {
				b.Fatal(err)
			}
			for _, ev := range page.Items {
				if ev.Type == api.EventOutput && ev.Spilled {
					marker = ev.Text
				}
				if os.Getenv("OUTPOST_BENCH_DEBUG") != "" && ev.Type != api.EventOutput {
					b.Logf("event %d %s %s %s", ev.Seq, ev.Type, ev.Status, ev.Reason)
				}
			}
			after = page.Next
			if !page.HasNextPage {
				break
			}
		}
		b.Logf("the follower did not see the spill marker; the transcript has: %q", marker)
		fmt.Sscanf(marker, "[%d more bytes", &more)
	}
	atServer := stored.Load() + more
	b.ReportMetric(100*float64(atServer)/float64(size), "at-server-%")
	b.Logf("the server got %d bytes (%.1f%%): %d in the transcript, %d spilled to a file (%s)",
		atServer, 100*float64(atServer)/float64(size), stored.Load(), more, marker)
	b.Logf("first output → result: %s; follower rate %.0f MB/s; call → result: %s (%.0f MB/s of output written)",
		rd(span), rate, rd(resAt.Sub(callAt)), e2e)
	b.Logf("peak RSS (VmHWM): server %.1f MiB (idle before: %.1f MiB), remote %.1f MiB", mib(mem.serverHWM), mib(idleHWM), mib(mem.remoteHW))
	b.Logf("CPU time during the session: server %s, remote %s (until its last sample, ≤10 ms before exit), this process (the follower) %s; wall %s on %d CPUs",
		rd(mem.serverCPU-idleCPU), rd(mem.remoteCPU), rd(selfCPU), rd(resAt.Sub(callAt)), runtime.NumCPU())
	goal := "MET"
	if rate < 200 || got < size {
		goal = "MISSED"
	}
	b.Logf("SUMMARY stream %d MiB: %.0f MB/s seen by the follower, %.1f%% delivered, server HWM %.1f MiB, remote HWM %.1f MiB (goal ≥ 200 MB/s, all bytes: %s)",
		size>>20, rate, 100*float64(got)/float64(size), mib(mem.serverHWM), mib(mem.remoteHW), goal)
}
