//go:build unix

package fleetsim

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCheckFilesRefusesBeyondTheLimit: a fleet that needs more
// descriptors than this process may hold is refused before it starts,
// with the limit, the need and both ways out; one that fits is not. The
// estimate counts three descriptors a worker: a simulated worker holds a
// watch, a waiting claim and a connection for its other requests.
func TestCheckFilesRefusesBeyondTheLimit(t *testing.T) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Skip(err)
	}
	if l.Max > 1<<28 {
		t.Skipf("hard limit %d: no fleet is refused", l.Max)
	}
	over := Options{Workers: int(l.Max)/3 + 1}
	err := checkFiles(over.openFiles())
	if err == nil {
		t.Fatalf("%d workers with a hard limit of %d files: not refused", over.Workers, l.Max)
	}
	for _, want := range []string{"ulimit -n", "several simulators", "three a worker"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if err := checkFiles((Options{Workers: 10, Sessions: 2}).openFiles()); err != nil {
		t.Errorf("10 workers refused: %v", err)
	}
}

// TestProcessCPU: the process's CPU time grows with work it does.
func TestProcessCPU(t *testing.T) {
	c0, ok := processCPU()
	if !ok {
		t.Fatal("the process's CPU time could not be read")
	}
	x := 0
	for start := time.Now(); time.Since(start) < 200*time.Millisecond; {
		x++
	}
	c1, _ := processCPU()
	if c1-c0 < 0.05 {
		t.Errorf("CPU %.3f s → %.3f s after 200 ms of work (%d rounds), want at least 0.05 s more", c0, c1, x)
	}
}
