//go:build !windows

package bench

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/steptrace"
)

// traceSteps, with OUTPOST_BENCH_TRACE=1, makes every process of the
// benchmark (this one, the server, the worker and the remotes it starts)
// append its dispatch steps to one file in dir (steptrace), and returns
// that file; "" without it.
func traceSteps(b *testing.B, dir string) string {
	b.Helper()
	if os.Getenv("OUTPOST_BENCH_TRACE") != "1" {
		return ""
	}
	path := filepath.Join(dir, "steps.trace")
	b.Setenv(steptrace.Env, path)
	return path
}

// stepSpan is one dispatch in a trace: the steps between from and to,
// the first time each happened.
type stepSpan map[string]int64

// reportSteps reads a trace, splits it into dispatches at each from step
// (this process marks one per session, sessions run one at a time) and
// logs, for each step in the order they happen, the time from the step
// before it.
func reportSteps(b *testing.B, path, from string, skip int) {
	b.Helper()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var spans []stepSpan
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 {
			continue
		}
		at, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			continue
		}
		step := fields[2]
		if step == from {
			spans = append(spans, stepSpan{})
		}
		if len(spans) == 0 {
			continue
		}
		if _, ok := spans[len(spans)-1][step]; !ok {
			spans[len(spans)-1][step] = at
		}
	}
	if len(spans) > skip {
		spans = spans[skip:]
	}
	// Steps ordered by their median offset from the first.
	offsets := map[string][]time.Duration{}
	for _, s := range spans {
		for step, at := range s {
			offsets[step] = append(offsets[step], time.Duration(at-s[from]))
		}
	}
	steps := make([]string, 0, len(offsets))
	for step := range offsets {
		steps = append(steps, step)
	}
	slices.SortFunc(steps, func(a, c string) int {
		return int(summarize(offsets[a]).p50 - summarize(offsets[c]).p50)
	})
	b.Logf("steps of %d dispatches (time from the step before, and from %s):", len(spans), from)
	for i, step := range steps {
		var gaps []time.Duration
		if i > 0 {
			prev := steps[i-1]
			for _, s := range spans {
				a, ok1 := s[prev]
				c, ok2 := s[step]
				if ok1 && ok2 {
					gaps = append(gaps, time.Duration(c-a))
				}
			}
		}
		g := summarize(gaps)
		o := summarize(offsets[step])
		b.Logf("  %-24s +p50 %8s +p99 %8s   at p50 %8s", step, rd(g.p50), rd(g.p99), rd(o.p50))
	}
}
