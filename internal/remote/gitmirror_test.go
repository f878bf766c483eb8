package remote

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/githttptest"
	"github.com/outpost-sh/outpost/internal/gitmirror"
)

// httpOrigin serves a repository made by newOrigin over HTTP on loopback
// and returns its URL and the work clone to push from.
func httpOrigin(t *testing.T) (url, work string) {
	t.Helper()
	bare, work := newOrigin(t)
	return githttptest.Serve(t, filepath.Dir(bare), "").URL + "/" + filepath.Base(bare), work
}

// mirrorCall is a git_clone call of a session with its own state dir.
func mirrorCall(t *testing.T) *testCall {
	t.Helper()
	tc := newTestCall(t, t.TempDir(), nil)
	tc.c.stateDir = t.TempDir()
	return tc
}

// updateMirrors does what the worker does after a session: it makes or
// updates the mirror of every URL the session recorded.
func updateMirrors(t *testing.T, root, stateDir string) {
	t.Helper()
	urls, err := gitmirror.Wanted(stateDir)
	if err != nil || len(urls) == 0 {
		t.Fatalf("the session recorded no URL to mirror: %q, %v", urls, err)
	}
	if err := gitmirror.Prepare(root); err != nil {
		t.Fatal(err)
	}
	for _, u := range urls {
		if err := gitmirror.Update(context.Background(), root, u, ""); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGitCloneThroughMirror: the first session's clone goes to the
// upstream and records its URL; the worker then makes the mirror; the
// next session's clone takes its objects from the mirror, which it only
// reads, and still gets a commit pushed upstream after the mirror was
// made; the clone stands on its own afterwards (dissociated).
func TestGitCloneThroughMirror(t *testing.T) {
	// Not parallel: it sets OUTPOST_GIT_MIRRORS.
	url, work := httpOrigin(t)
	mirrors := t.TempDir()
	t.Setenv(api.EnvGitMirrors.Name, mirrors)
	ctx := context.Background()

	first := mirrorCall(t)
	var res api.GitCloneResult
	if err := first.run(t, ctx, api.ToolGitClone, api.GitCloneArgs{URL: url, Name: "app"}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Mirror != "" {
		t.Fatalf("the first clone used a mirror nobody made: %+v", res)
	}
	if entries, _ := os.ReadDir(mirrors); len(entries) != 0 {
		t.Fatalf("the remote wrote the mirrors directory: %v", entries)
	}
	updateMirrors(t, mirrors, first.c.stateDir)
	mirror, _ := gitmirror.Path(mirrors, url)
	old := gitT(t, mirror, "rev-parse", "refs/heads/main")
	newHead := commitFile(t, work, "README", "v2")
	gitT(t, work, "push", "origin", "HEAD:main")

	second := mirrorCall(t)
	var res2 api.GitCloneResult
	if err := second.run(t, ctx, api.ToolGitClone, api.GitCloneArgs{URL: url, Name: "app", Ref: "main"}, &res2); err != nil {
		t.Fatalf("%v\n%s", err, second.output(api.StreamStderr))
	}
	if res2.Mirror != mirror || res2.Head != newHead {
		t.Fatalf("second clone %+v, want head %s from mirror %s", res2, newHead, mirror)
	}
	if got := gitT(t, mirror, "rev-parse", "refs/heads/main"); got != old {
		t.Fatalf("the remote moved the mirror's main to %s: only the worker updates mirrors", got)
	}
	// Dissociated: removing the mirror leaves the clone whole.
	if err := os.RemoveAll(mirrors); err != nil {
		t.Fatal(err)
	}
	gitT(t, filepath.Join(second.c.workDir, "repos", "app"), "fsck", "--no-progress")
}

// TestGitCloneIgnoresTamperedMirror: a mirror whose configuration names an
// upload-pack program, an fsmonitor, a hooks path, hooks and another
// origin (what session code wrote when mirrors were writable, or someone
// by hand) runs none of them in the next session's clone, which still
// gets the upstream's newest commit.
func TestGitCloneIgnoresTamperedMirror(t *testing.T) {
	// Not parallel: it sets OUTPOST_GIT_MIRRORS.
	url, work := httpOrigin(t)
	evilURL, _ := httpOrigin(t)
	mirrors := t.TempDir()
	t.Setenv(api.EnvGitMirrors.Name, mirrors)
	ctx := context.Background()
	first := mirrorCall(t)
	if err := first.run(t, ctx, api.ToolGitClone, api.GitCloneArgs{URL: url, Name: "app"}, nil); err != nil {
		t.Fatal(err)
	}
	updateMirrors(t, mirrors, first.c.stateDir)
	mirror, _ := gitmirror.Path(mirrors, url)

	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	evil := filepath.Join(dir, "evil")
	if err := os.WriteFile(evil, []byte("#!/bin/sh\ntouch "+marker+"\ncat >/dev/null 2>&1\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	hooks := filepath.Join(mirror, "hooks")
	for _, kv := range [][2]string{
		{"remote.origin.uploadpack", evil}, {"core.fsmonitor", evil}, {"core.hooksPath", hooks},
		{"remote.origin.url", evilURL}, {"core.alternateRefsCommand", evil}, {"core.bare", "false"}, {"core.worktree", dir},
	} {
		gitT(t, mirror, "config", "--file", filepath.Join(mirror, "config"), kv[0], kv[1])
	}
	if err := os.MkdirAll(hooks, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"reference-transaction", "post-checkout", "pre-auto-gc", "post-index-change"} {
		if err := os.Symlink(evil, filepath.Join(hooks, h)); err != nil {
			t.Fatal(err)
		}
	}
	newHead := commitFile(t, work, "README", "v2")
	gitT(t, work, "push", "origin", "HEAD:main")

	second := mirrorCall(t)
	var res api.GitCloneResult
	err := second.run(t, ctx, api.ToolGitClone, api.GitCloneArgs{URL: url, Name: "app"}, &res)
	out := second.output(api.StreamStderr)
	if _, serr := os.Stat(marker); serr == nil {
		t.Fatalf("the clone ran the program the tampered mirror named\n%s", out)
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if res.Mirror != mirror || res.Head != newHead {
		t.Fatalf("clone %+v, want head %s with mirror %s\n%s", res, newHead, mirror, out)
	}
	if strings.Contains(gitT(t, res.Path, "config", "--list"), evil) {
		t.Fatal("the clone's configuration took something from the mirror's")
	}
}
