//go:build unix

package main

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestBenchFleetRefusesMoreWorkersThanFiles: a fleet larger than this
// process may hold descriptors for is refused as bad flags (exit 2),
// saying how to split it, before the local server is started.
func TestBenchFleetRefusesMoreWorkersThanFiles(t *testing.T) {
	t.Parallel()
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Skip(err)
	}
	if l.Max > 1<<28 {
		t.Skipf("hard limit %d: no fleet is refused", l.Max)
	}
	workers := strconv.FormatUint(l.Max/3+1, 10)
	tf := newTestFactory(t, nil)
	code := tf.run(t, "bench", "fleet", "--local", "--workers", workers, "--sessions", "1")
	msg := tf.errOut.String()
	if code != exitUsage || !strings.Contains(msg, "several simulators") {
		t.Errorf("bench fleet --local --workers %s: exit %d, %q; want exit %d naming several simulators", workers, code, msg, exitUsage)
	}
	if strings.Contains(msg, "local server at") {
		t.Errorf("a server was started before the refusal: %q", msg)
	}
}
