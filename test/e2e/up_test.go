//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// TestUp runs the README's first command twice on one directory: each time
// the demo session finishes, the URLs and admin token are shown, and
// Ctrl-C stops everything cleanly. The second start reuses the worker's
// token of the first instead of making another.
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
		admin, err := os.ReadFile(filepath.Join(dir, "server", "admin-token"))
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.New("http://"+addr, strings.TrimSpace(string(admin)))
		if err != nil {
			t.Fatal(err)
		}
		toks, err := c.Tokens.List(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		workers := 0
		for _, tok := range toks.Items {
			if tok.Name == "outpost-up worker" {
				workers++
			}
		}
		if workers != 1 {
			t.Errorf("round %d: %d worker tokens, want the one of the first start", round, workers)
		}
		if err := p.stop(syscall.SIGINT, 30*time.Second); err != nil {
			t.Fatalf("round %d: outpost up exit after Ctrl-C: %v\n%s", round, err, p.out.String())
		}
		if !strings.Contains(p.out.String(), "Outpost stopped.") {
			t.Errorf("round %d: no stop message:\n%s", round, p.out.String())
		}
	}
}
