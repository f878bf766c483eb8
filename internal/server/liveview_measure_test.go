//go:build unix

package server

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// TestLiveDesktopMeasure measures the live desktop for docs/benchmarks.md:
// the latency from a screen change to the viewer receiving its tile, and
// the bytes a second of an idle and a busy desktop. It runs only with
// OUTPOST_MEASURE_LIVEVIEW=1 (it takes about 15 s) and needs xterm for the
// busy screen.
func TestLiveDesktopMeasure(t *testing.T) {
	if os.Getenv("OUTPOST_MEASURE_LIVEVIEW") != "1" {
		t.Skip("a measurement: set OUTPOST_MEASURE_LIVEVIEW=1")
	}
	needDesktop(t)
	const changes = 40
	ts := startServer(t, Options{})
	ts.outpost("lv")
	work := t.TempDir()
	// The script stamps the time just before each change, so a latency
	// includes starting xsetroot: an upper bound.
	paint := `while [ ! -f go ]; do sleep 0.02; done; for i in $(seq 1 ` + strconv.Itoa(changes) + `); do
		date +%s%N >> stamps; xsetroot -solid "#$(printf '%02x' $i)4080"; sleep 0.25; done`
	busy := `xterm -geometry 160x50+0+0 -e 'while true; do head -c 2000 /dev/urandom | base64; sleep 0.01; done' & sleep 6; kill $!`
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, map[string]any{"outpost": "lv", "desktop": map[string]int{"width": 1280, "height": 800},
		"agent": map[string]any{"kind": "script", "steps": []any{
			map[string]any{"tool": "computer", "args": map[string]any{"action": "screenshot"}},
			map[string]any{"tool": "exec", "args": map[string]any{"command": paint}},
			map[string]any{"tool": "exec", "args": map[string]any{"command": `while [ ! -f busy ]; do sleep 0.02; done; ` + busy, "timeout_s": 60}},
		}}}, &s)
	id := s.Metadata.SessionID
	runDesktopRemote(t, ts, id, work)
	waitfor.True(t, "the desktop to start", func() bool { _, ok := resultOf(ts, id, api.ToolComputer, 1); return ok })
	v, _ := dialViewer(t, ts, id, ts.admin)
	v.frame("a keyframe", func(f api.DesktopTiles) bool { return f.Keyframe })
	for len(v.bytes) > 0 {
		<-v.bytes
	}
	cpu0 := cpuTime()
	idle := count(v, 3*time.Second)
	t.Logf("idle: %d bytes in %d frames over 3 s; this process (server and remote) used %.0f%% of a core",
		idle.bytes, idle.frames, 100*(cpuTime()-cpu0).Seconds()/3)

	// Latency: each change's first frame whose tile 0,0 has its colour.
	got := map[int]time.Time{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for len(got) < changes {
			select {
			case f := <-v.tiles:
				at := time.Now()
				if tl := tileAt(f, 0, 0); tl != nil {
					if i := int(decodeRGBA(t, tl.PNG).Pix[0]); i >= 1 && i <= changes {
						if _, seen := got[i]; !seen {
							got[i] = at
						}
					}
				}
			case <-time.After(10 * time.Second):
				return
			}
		}
	}()
	if err := os.WriteFile(filepath.Join(work, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	<-done
	for len(v.bytes) > 0 {
		<-v.bytes
	}
	fh, err := os.Open(filepath.Join(work, "stamps"))
	if err != nil {
		t.Fatal(err)
	}
	var lat []time.Duration
	sc := bufio.NewScanner(fh)
	for i := 1; sc.Scan(); i++ {
		ns, _ := strconv.ParseInt(strings.TrimSpace(sc.Text()), 10, 64)
		if at, ok := got[i]; ok {
			lat = append(lat, at.Sub(time.Unix(0, ns)))
		}
	}
	fh.Close()
	slices.Sort(lat)
	if len(lat) < changes/2 {
		t.Fatalf("only %d of %d changes seen", len(lat), changes)
	}
	t.Logf("latency over %d changes: p50 %v, p90 %v, max %v", len(lat), lat[len(lat)/2], lat[len(lat)*9/10], lat[len(lat)-1])

	if err := os.WriteFile(filepath.Join(work, "busy"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // xterm starts
	for len(v.bytes) > 0 {  // frames received before the window
		<-v.bytes
		<-v.tiles
	}
	cpu0 = cpuTime()
	busyN := count(v, 4*time.Second)
	t.Logf("busy: this process used %.0f%% of a core", 100*(cpuTime()-cpu0).Seconds()/4)
	t.Logf("busy (xterm printing base64): %d bytes in %d frames over 4 s: %.0f KB/s, %.1f fps",
		busyN.bytes, busyN.frames, float64(busyN.bytes)/4/1000, float64(busyN.frames)/4)
}

// cpuTime is the CPU time this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type tally struct{ bytes, frames int }

func count(v *viewer, d time.Duration) tally {
	var n tally
	end := time.After(d)
	for {
		select {
		case b := <-v.bytes:
			n.bytes += b
			n.frames++
			<-v.tiles
		case <-end:
			return n
		}
	}
}
