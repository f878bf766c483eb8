package steptrace

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestMark: with the variable set before the first step, each step is one
// line of time, process, step and session ("-" for none), in order.
func TestMark(t *testing.T) {
	path := filepath.Join(t.TempDir(), "steps.trace")
	t.Setenv(Env, path)
	Mark("server.created", "s1")
	Mark("worker.claim_sent", "")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("trace %q, want 2 lines", b)
	}
	var last int64
	for i, want := range []string{"server.created s1", "worker.claim_sent -"} {
		f := strings.Fields(lines[i])
		at, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || at < last || f[1] != strconv.Itoa(os.Getpid()) || strings.Join(f[2:], " ") != want {
			t.Errorf("line %d = %q, want time, pid, %q", i, lines[i], want)
		}
		last = at
	}
}
