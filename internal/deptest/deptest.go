// Package deptest guards dependency graphs in tests: it lists what a
// package links (its non-test imports, all the way down) and fails a test
// when something that must stay out of it is in.
package deptest

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Deps returns the import paths pkg depends on, itself included, as the go
// command sees them for the build of the running test: non-test imports,
// recursively, standard library included. It runs `go list -deps`.
func Deps(t testing.TB, pkg string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr.Bytes())
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, pkg) {
		t.Fatalf("go list -deps %s does not list %s itself: %q", pkg, pkg, deps)
	}
	return deps
}

// Rule says why a dependency must stay out: Forbidden reports, for an
// import path, whether it is one, and Why says it in a sentence.
type Rule struct {
	Forbidden func(importPath string) bool
	Why       string
}

// Prefix is a Rule against path and every package under it.
func Prefix(path, why string) Rule {
	return Rule{
		Forbidden: func(p string) bool { return p == path || strings.HasPrefix(p, path+"/") },
		Why:       why,
	}
}

// Contains is a Rule against every import path with part in it.
func Contains(part, why string) Rule {
	return Rule{Forbidden: func(p string) bool { return strings.Contains(p, part) }, Why: why}
}

// Check fails t for every dependency of pkg that a rule forbids, and
// returns the dependencies it looked at.
func Check(t testing.TB, pkg string, rules ...Rule) []string {
	t.Helper()
	deps := Deps(t, pkg)
	for _, d := range deps {
		for _, r := range rules {
			if r.Forbidden(d) {
				t.Errorf("%s depends on %s: %s", pkg, d, r.Why)
			}
		}
	}
	return deps
}
