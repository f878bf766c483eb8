package dist

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// distFixture is a published layout over loopback: a dist dir with builds
// "pinned", "latest" (the latest pointer) and "tampered" (whose check line
// does not match) for the Resolver's platform, served by a real Handler.
type distFixture struct {
	dir, base string
}

const (
	idPinned   = "0aaaaaaaaaa1"
	idDefault  = "0bbbbbbbbbb2"
	idLatest   = "0cccccccccc3"
	idTampered = "0dddddddddd4"
	idSelf     = "5e1f5e1f5e1f"
	suffix     = SuffixLinuxArm64 // any platform: nothing is run here
)

func newFixture(t *testing.T) distFixture {
	t.Helper()
	dir := t.TempDir()
	for _, id := range []string{idPinned, idDefault, idLatest} {
		writeFile(t, dir, BinaryName(id, suffix), "build "+id)
		writeFile(t, dir, ChecksumName(id, suffix), CheckLine(sha("build "+id), suffix))
	}
	writeFile(t, dir, BinaryName(idTampered, suffix), "build "+idTampered+" with a backdoor")
	writeFile(t, dir, ChecksumName(idTampered, suffix), CheckLine(sha("build "+idTampered), suffix))
	writeFile(t, dir, LatestName(suffix), idLatest)
	_, base := distServer(t, HandlerOptions{Dir: dir, NoSelf: true})
	return distFixture{dir: dir, base: base}
}

// resolver returns a Resolver of the fixture with a worker pin and a log.
func (f distFixture) resolver(t *testing.T, base, cache, pin string, log *bytes.Buffer) *Resolver {
	t.Helper()
	var logger *slog.Logger
	if log != nil {
		logger = slog.New(slog.NewTextHandler(log, nil))
	}
	r, err := NewResolver(ResolverOptions{BaseURL: base, CacheDir: cache, Pin: pin, Self: []string{"self", "remote", "serve"},
		SelfID: idSelf, Suffix: suffix, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// ranBuild returns which build a resolved command runs: "self" or the
// content of the downloaded binary.
func ranBuild(t *testing.T, cmd []string) string {
	t.Helper()
	if cmd[0] == "self" {
		return "self"
	}
	if len(cmd) != 2 || cmd[1] != "serve" || filepath.Base(cmd[0]) != "devin-remote" {
		t.Fatalf("command %q is not <cache>/…/devin-remote serve", cmd)
	}
	b, err := os.ReadFile(cmd[0])
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(cmd[0])
	if fi.Mode().Perm()&0o111 == 0 {
		t.Errorf("%s is not executable: %v", cmd[0], fi.Mode())
	}
	return string(b)
}

func TestResolveOrder(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	down := "http://127.0.0.1:1/dist/" // nothing listens on port 1
	for _, tc := range []struct {
		name              string
		base, pin, worker string
		want              string
	}{
		{"session pin wins", f.base, idPinned, idDefault, "build " + idPinned},
		{"worker default without a session pin", f.base, "", idDefault, "build " + idDefault},
		{"latest without pins", f.base, "", "", "build " + idLatest},
		{"pin of this build runs it", f.base, idSelf, idDefault, "self"},
		{"short pin of this build runs it", f.base, idSelf[:6], "", "self"},
		{"worker default of this build", f.base, "", idSelf, "self"},
		{"latest unreachable: this build", down, "", "", "self"},
		{"no base URL: this build", "", "", "", "self"},
		{"short pin finds its build", f.base, idPinned[:7], "", "build " + idPinned},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := f.resolver(t, tc.base, t.TempDir(), tc.worker, nil)
			cmd, err := r.Resolve(t.Context(), tc.pin)
			if err != nil {
				t.Fatalf("Resolve(%q): %v", tc.pin, err)
			}
			if got := ranBuild(t, cmd); got != tc.want {
				t.Errorf("Resolve(%q) runs %q, want %q", tc.pin, got, tc.want)
			}
		})
	}
}

func TestResolveRefuses(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cache := t.TempDir()
	r := f.resolver(t, f.base, cache, "", nil)
	for _, tc := range []struct {
		name, pin string
		want      []string
	}{
		{"bad id", "ABC", []string{`"ABC" is not a remote version id`, "session pin"}},
		{"traversal id", "../../x", []string{"not a remote version id"}},
		{"unpublished", "0eeeeeeeeee5", []string{"0eeeeeeeeee5", "cannot read its checksum", f.base + ChecksumName("0eeeeeeeeee5", suffix), "404"}},
		{"tampered", idTampered, []string{
			idTampered, f.base + BinaryName(idTampered, suffix), "refusing to run it",
			"SHA-256 " + sha("build "+idTampered+" with a backdoor"), "says " + sha("build "+idTampered),
		}},
	} {
		cmd, err := r.Resolve(t.Context(), tc.pin)
		if err == nil {
			t.Errorf("%s: Resolve(%q) = %q, want an error", tc.name, tc.pin, cmd)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", tc.name, err, w)
			}
		}
	}
	// Nothing of the tampered build is left to run.
	if _, err := os.Stat(CachedPath(cache, idTampered, suffix)); !os.IsNotExist(err) {
		t.Errorf("the tampered binary is in the cache: %v", err)
	}
	leftovers, _ := filepath.Glob(filepath.Join(cache, "remote", "*", ".download-*"))
	if len(leftovers) > 0 {
		t.Errorf("downloads left behind: %v", leftovers)
	}
	// A pin that cannot be fetched fails; it never falls back to this build.
	down := f.resolver(t, "http://127.0.0.1:1/dist/", t.TempDir(), "", nil)
	if _, err := down.Resolve(t.Context(), idPinned); err == nil || !strings.Contains(err.Error(), idPinned) {
		t.Errorf("unreachable pin: %v", err)
	}
	none := f.resolver(t, "", t.TempDir(), "", nil)
	if _, err := none.Resolve(t.Context(), idPinned); err == nil || !strings.Contains(err.Error(), "no static base URL") {
		t.Errorf("pin without a base URL: %v", err)
	}
	if _, err := NewResolver(ResolverOptions{Self: []string{"x"}, Pin: "v1"}); err == nil {
		t.Error("a bad worker pin was accepted")
	}
}

func TestResolveCache(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cache := t.TempDir()
	var log bytes.Buffer
	r := f.resolver(t, f.base, cache, "", &log)
	first, err := r.Resolve(t.Context(), idPinned)
	if err != nil {
		t.Fatal(err)
	}
	if want := CachedPath(cache, idPinned, suffix); first[0] != want {
		t.Errorf("cached at %s, want %s", first[0], want)
	}
	line, _ := os.ReadFile(first[0] + ".sha256")
	if string(line) != CheckLine(sha("build "+idPinned), suffix) {
		t.Errorf("cached check line %q", line)
	}
	// Once cached, the build is used without the server: another Resolver
	// on the same cache, whose base URL answers nothing, still finds it.
	other := f.resolver(t, "http://127.0.0.1:1/dist/", cache, "", nil)
	again, err := other.Resolve(t.Context(), idPinned)
	if err != nil || !slices.Equal(again, first) {
		t.Fatalf("cached Resolve = %q, %v", again, err)
	}
	// A cached copy that was changed is not run: it is downloaded again.
	if err := os.WriteFile(first[0], []byte("corrupted"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Resolve(t.Context(), idPinned); err == nil {
		t.Error("a corrupted cached binary was used")
	}
	fixed, err := r.Resolve(t.Context(), idPinned)
	if err != nil || ranBuild(t, fixed) != "build "+idPinned {
		t.Fatalf("Resolve after corruption = %q, %v", fixed, err)
	}
	if n := strings.Count(log.String(), "downloading remote build"); n != 2 {
		t.Errorf("%d downloads, want 2:\n%s", n, log.String())
	}
	// The latest pointer's warning is logged once.
	var warn bytes.Buffer
	down := f.resolver(t, "http://127.0.0.1:1/dist/", t.TempDir(), "", &warn)
	for range 3 {
		if cmd, err := down.Resolve(t.Context(), ""); err != nil || cmd[0] != "self" {
			t.Fatalf("Resolve without latest = %q, %v", cmd, err)
		}
	}
	if n := strings.Count(warn.String(), "cannot read the latest remote build"); n != 1 {
		t.Errorf("warned %d times, want once:\n%s", n, warn.String())
	}
}

// TestResolveConcurrentCache runs Resolvers of separate "workers" on one
// cache directory at once: each gets a whole, verified binary.
func TestResolveConcurrentCache(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cache := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 8 {
		r := f.resolver(t, f.base, cache, "", nil)
		wg.Go(func() {
			for _, id := range []string{idPinned, idLatest} {
				cmd, err := r.Resolve(t.Context(), id)
				if err != nil {
					errs <- err
					return
				}
				if b, err := os.ReadFile(cmd[0]); err != nil || string(b) != "build "+id {
					errs <- fmt.Errorf("%s holds %q (%v)", cmd[0], b, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent resolve: %v", err)
	}
	leftovers, _ := filepath.Glob(filepath.Join(cache, "remote", "*", ".*"))
	if len(leftovers) > 0 {
		t.Errorf("temporary files left behind: %v", leftovers)
	}
}

// TestResolveLatestMaxAge: with LatestMaxAge, the latest pointer read once
// (by a Resolve or Refresh) serves the Resolves after it; a new pointer is
// seen at the next read, which Refresh does.
func TestResolveLatestMaxAge(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r, err := NewResolver(ResolverOptions{BaseURL: f.base, CacheDir: t.TempDir(), Self: []string{"self", "remote", "serve"},
		SelfID: idSelf, Suffix: suffix, LatestMaxAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	resolve := func() string {
		t.Helper()
		cmd, err := r.Resolve(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		return ranBuild(t, cmd)
	}
	if got := resolve(); got != "build "+idLatest {
		t.Fatalf("first Resolve runs %q, want the latest", got)
	}
	writeFile(t, f.dir, LatestName(suffix), idDefault)
	if got := resolve(); got != "build "+idLatest {
		t.Errorf("Resolve within the max age runs %q, want the latest as read before", got)
	}
	r.Refresh(t.Context())
	if got := resolve(); got != "build "+idDefault {
		t.Errorf("Resolve after Refresh runs %q, want the new latest", got)
	}
}
