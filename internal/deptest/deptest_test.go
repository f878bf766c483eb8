package deptest

import (
	"slices"
	"testing"
)

// TestDepsSeesTransitiveImports: the list holds the package, what it
// imports and what those import, so a rule can catch a dependency that
// comes in indirectly.
func TestDepsSeesTransitiveImports(t *testing.T) {
	t.Parallel()
	deps := Deps(t, "github.com/outpost-sh/outpost/internal/deptest")
	for _, want := range []string{"github.com/outpost-sh/outpost/internal/deptest", "os/exec", "os", "syscall"} {
		if !slices.Contains(deps, want) {
			t.Errorf("deps lack %s: %q", want, deps)
		}
	}
}

// TestCheckReports: a rule that matches fails the test, one that does not
// leaves it passing.
func TestCheckReports(t *testing.T) {
	t.Parallel()
	pkg := "github.com/outpost-sh/outpost/internal/deptest"
	var caught fakeT
	Check(&caught, pkg, Prefix("os", "no os here"))
	if !caught.failed {
		t.Error("a rule against os, which deptest imports, did not fail the test")
	}
	var clean fakeT
	Check(&clean, pkg, Prefix("github.com/docker", "no docker"), Prefix("o", "a prefix is a path, not a string prefix"))
	if clean.failed {
		t.Errorf("rules that match nothing failed the test: %v", clean.errors)
	}
}

// fakeT records failures instead of failing the test that runs it.
type fakeT struct {
	testing.TB
	failed bool
	errors []string
}

func (f *fakeT) Helper()                        {}
func (f *fakeT) Errorf(format string, a ...any) { f.failed = true; f.errors = append(f.errors, format) }
func (f *fakeT) Fatalf(format string, a ...any) { f.failed = true; panic("fatal: " + format) }
