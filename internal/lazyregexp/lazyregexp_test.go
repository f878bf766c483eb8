package lazyregexp

import (
	"sync"
	"testing"
)

// TestCompiledOnFirstUse: nothing is compiled by New; the first use
// compiles once, also when it races with others, and matches as regexp
// does.
func TestCompiledOnFirstUse(t *testing.T) {
	t.Parallel()
	r := New(`^[a-z][a-z0-9-]{0,61}$`)
	if r.rx != nil {
		t.Fatal("New compiled the pattern")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if !r.MatchString("ok-1") || r.Match([]byte("Bad")) {
				t.Error("wrong match")
			}
		})
	}
	wg.Wait()
	if got := New(`-c([0-9]+)$`).FindStringSubmatch("key-c42"); len(got) != 2 || got[1] != "42" {
		t.Errorf("FindStringSubmatch = %q", got)
	}
	if r.String() != `^[a-z][a-z0-9-]{0,61}$` {
		t.Errorf("String = %q", r.String())
	}
}

// TestBadPatternPanicsOnUse: like regexp.MustCompile, but at first use.
func TestBadPatternPanicsOnUse(t *testing.T) {
	t.Parallel()
	r := New(`(`)
	defer func() {
		if recover() == nil {
			t.Error("no panic for a pattern that does not compile")
		}
	}()
	r.MatchString("x")
}
