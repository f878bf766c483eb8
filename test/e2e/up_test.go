//go:build linux

package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/waitfor"
)

// TestUp runs the README's first command twice on one directory: each time
// the demo session finishes, the URLs and admin token are shown, and
// Ctrl-C stops everything cleanly.
func TestUp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for round := range 2 {
		addr := freeAddr(t)
		p := start(t, "up", []string{"HOME=" + t.TempDir()}, "up", "--dir", dir, "--listen", addr)
		waitfor.Within(t, 60*time.Second, "outpost up to be ready", func() bool {
			return strings.Contains(p.out.String(), "Press Ctrl-C to stop.")
		})
		out := p.out.String()
		for _, want := range []string{"Demo session finished", "ok: README mentions hello", "+This greeting says bar.", "http://" + addr + "/v1/", "Admin token        opt_"} {
			if !strings.Contains(out, want) {
				t.Errorf("round %d: output lacks %q:\n%s", round, want, out)
			}
		}
		if err := p.stop(syscall.SIGINT, 30*time.Second); err != nil {
			t.Fatalf("round %d: outpost up exit after Ctrl-C: %v\n%s", round, err, p.out.String())
		}
		if !strings.Contains(p.out.String(), "Outpost stopped.") {
			t.Errorf("round %d: no stop message:\n%s", round, p.out.String())
		}
	}
}
