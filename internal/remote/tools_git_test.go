package remote

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/githttptest"
)

// gitT runs git in dir for a test (githttptest.Git).
var gitT = githttptest.Git

// newOrigin makes a bare repository with one commit on main and a branch
// "feature"; it returns the bare repo's path and a work clone to push from.
func newOrigin(t *testing.T) (bare, work string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	root := t.TempDir()
	bare = filepath.Join(root, "origin.git")
	work = filepath.Join(root, "work")
	gitT(t, root, "init", "--bare", bare)
	gitT(t, root, "clone", bare, work)
	commitFile(t, work, "README", "v1")
	gitT(t, work, "push", "origin", "HEAD:main")
	gitT(t, work, "push", "origin", "HEAD:feature")
	return bare, work
}

func commitFile(t *testing.T, work, name, content string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(work, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	gitT(t, work, "add", name)
	gitT(t, work, "commit", "-m", "set "+name+" to "+content)
	return gitT(t, work, "rev-parse", "HEAD")
}

func TestGitCloneThenReuse(t *testing.T) {
	bare, work := newOrigin(t)
	v1 := gitT(t, work, "rev-parse", "HEAD")
	ws := t.TempDir()
	ctx := context.Background()

	tc := newTestCall(t, ws, nil)
	var res api.GitCloneResult
	if err := tc.run(t, ctx, api.ToolGitClone, api.GitCloneArgs{URL: bare, Name: "proj"}, &res); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(ws, "repos", "proj")
	if res.Path != dir || res.Head != v1 || res.Reused {
		t.Errorf("clone = %+v, want head %s in %s", res, v1, dir)
	}
	if out := tc.output(api.StreamStderr); !strings.Contains(out, "git clone") {
		t.Errorf("git output not streamed: %q", out)
	}

	v2 := commitFile(t, work, "README", "v2")
	gitT(t, work, "push", "origin", "HEAD:main")
	tc = newTestCall(t, ws, nil)
	if err := tc.run(t, ctx, api.ToolGitClone, api.GitCloneArgs{URL: bare, Name: "proj", Ref: "main"}, &res); err != nil {
		t.Fatal(err)
	}
	if !res.Reused || res.Head != v2 {
		t.Errorf("reuse = %+v, want reused at %s", res, v2)
	}
	if out := tc.output(api.StreamStderr); !strings.Contains(out, "git fetch") {
		t.Errorf("fetch output not streamed: %q", out)
	}

	// A branch only on origin, then a commit sha.
	tc = newTestCall(t, ws, nil)
	if err := tc.run(t, ctx, api.ToolGitClone, api.GitCloneArgs{URL: bare, Name: "proj", Ref: "feature"}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Head != v1 {
		t.Errorf("feature head = %s, want %s", res.Head, v1)
	}
	tc = newTestCall(t, ws, nil)
	if err := tc.run(t, ctx, api.ToolGitClone, api.GitCloneArgs{URL: bare, Name: "at-sha", Ref: v1}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Head != v1 || res.Reused {
		t.Errorf("clone at sha = %+v, want %s", res, v1)
	}
	tc = newTestCall(t, ws, nil)
	if err := tc.run(t, ctx, api.ToolGitClone, api.GitCloneArgs{URL: bare, Name: "at-branch", Ref: "feature"}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Head != v1 {
		t.Errorf("clone --branch feature head = %s, want %s", res.Head, v1)
	}
}

func TestGitCloneRefusals(t *testing.T) {
	bare, _ := newOrigin(t)
	ws := t.TempDir()
	tc := newTestCall(t, ws, nil)
	for _, name := range []string{"", ".", "..", "../x", "a/b", "/abs", "-x", ".hidden", "sp ace", "semi;colon"} {
		err := tc.run(t, context.Background(), api.ToolGitClone, api.GitCloneArgs{URL: bare, Name: name}, nil)
		if err == nil || !strings.Contains(err.Error(), "repo name") {
			t.Errorf("name %q: err = %v", name, err)
		}
	}
	if err := os.MkdirAll(filepath.Join(ws, "repos", "taken"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "repos", "taken", "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := tc.run(t, context.Background(), api.ToolGitClone, api.GitCloneArgs{URL: bare, Name: "taken"}, nil)
	if err == nil || !strings.Contains(err.Error(), "not a git repository") {
		t.Errorf("existing non-repo: err = %v", err)
	}
	err = tc.run(t, context.Background(), api.ToolGitClone, api.GitCloneArgs{URL: filepath.Join(ws, "nope.git"), Name: "nope"}, nil)
	if err == nil || !strings.Contains(err.Error(), "git clone") || !strings.Contains(err.Error(), "nope.git does not exist on this machine") ||
		!strings.Contains(err.Error(), "--bwrap-ro-bind") {
		t.Errorf("bad url: err = %v", err)
	}
}

// TestGitCloneReuseDetachedWithoutRef: a repository with no branch checked
// out (as the worker leaves one between sessions) reused by a git_clone
// without a ref lands on the remote's default branch as fetched, as a
// fresh clone would; one with a branch checked out stays on it.
func TestGitCloneReuseDetachedWithoutRef(t *testing.T) {
	bare, work := newOrigin(t)
	ws := t.TempDir()
	ctx := context.Background()
	var res api.GitCloneResult
	if err := newTestCall(t, ws, nil).run(t, ctx, api.ToolGitClone, api.GitCloneArgs{URL: bare, Name: "proj"}, &res); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(ws, "repos", "proj")
	gitT(t, dir, "checkout", "-q", "feature")
	v2 := commitFile(t, work, "README", "v2")
	gitT(t, work, "push", "origin", "HEAD:main")

	if err := newTestCall(t, ws, nil).run(t, ctx, api.ToolGitClone, api.GitCloneArgs{URL: bare, Name: "proj"}, &res); err != nil {
		t.Fatal(err)
	}
	if got := gitT(t, dir, "rev-parse", "--abbrev-ref", "HEAD"); got != "feature" || res.Head == v2 {
		t.Errorf("reuse on a branch moved to %s (%s), want it to stay on feature", got, res.Head)
	}

	gitT(t, dir, "checkout", "-q", "--detach")
	gitT(t, dir, "branch", "-q", "-D", "main", "feature")
	if err := newTestCall(t, ws, nil).run(t, ctx, api.ToolGitClone, api.GitCloneArgs{URL: bare, Name: "proj"}, &res); err != nil {
		t.Fatal(err)
	}
	if got := gitT(t, dir, "rev-parse", "--abbrev-ref", "HEAD"); got != "main" || res.Head != v2 || !res.Reused {
		t.Errorf("detached reuse = %+v on %s, want main at %s", res, got, v2)
	}
}

// TestGitCloneReuseAcrossSessions: a clone another session left (a worker
// with --keep-workspace) gives the next session the ref's clean tree: the
// previous session's edits, new files and unpushed commits are gone from
// it, stashed and kept in the object store, and ignored files (caches)
// stay. The session that made the clone finds its own edits again.
func TestGitCloneReuseAcrossSessions(t *testing.T) {
	bare, work := newOrigin(t)
	commitFile(t, work, ".gitignore", "cache/\n")
	v2 := gitT(t, work, "rev-parse", "HEAD")
	gitT(t, work, "push", "origin", "HEAD:main")
	ws := t.TempDir()
	ctx := context.Background()
	dir := filepath.Join(ws, "repos", "proj")
	clone := func(session string) (api.GitCloneResult, string) {
		t.Helper()
		tc := newTestCall(t, ws, nil)
		tc.c.session = session
		var res api.GitCloneResult
		if err := tc.run(t, ctx, api.ToolGitClone, api.GitCloneArgs{URL: bare, Name: "proj", Ref: "main"}, &res); err != nil {
			t.Fatalf("git_clone for %s: %v\n%s", session, err, tc.output(api.StreamStderr))
		}
		return res, tc.output(api.StreamStderr)
	}
	write := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return string(b)
	}

	clone("ses-a")
	unpushed := commitFile(t, dir, "local", "a's commit")
	write("README", "edited by a")
	write("new.txt", "a's new file")
	write("cache/blob", "cached")

	// The same session (a resume on the same machine) keeps its work.
	if res, _ := clone("ses-a"); res.Head != unpushed || read("README") != "edited by a" {
		t.Fatalf("the same session's reuse = %+v with README %q, want its own edits at %s", res, read("README"), unpushed)
	}

	res, out := clone("ses-b")
	if res.Head != v2 || !res.Reused {
		t.Errorf("the next session's clone = %+v, want reused at origin's main %s", res, v2)
	}
	if got := read("README"); got != "v1" {
		t.Errorf("README = %q, want the ref's clean %q", got, "v1")
	}
	for _, gone := range []string{"new.txt", "local"} {
		if _, err := os.Stat(filepath.Join(dir, gone)); err == nil {
			t.Errorf("%s of the previous session is still in the tree", gone)
		}
	}
	if st := gitT(t, dir, "status", "--porcelain"); st != "" {
		t.Errorf("the tree is not clean:\n%s", st)
	}
	if read("cache/blob") != "cached" {
		t.Errorf("the ignored cache was not kept")
	}
	if !strings.Contains(out, "left by session ses-a") || !strings.Contains(out, "clean tree") {
		t.Errorf("the transcript does not say whose changes were put aside: %q", out)
	}
	if stash := gitT(t, dir, "stash", "list"); !strings.Contains(stash, "uncommitted changes left by session ses-a") {
		t.Errorf("stash list = %q, want the previous session's changes", stash)
	}
	if _, err := exec.Command("git", "-C", dir, "cat-file", "-e", unpushed+"^{commit}").CombinedOutput(); err != nil {
		t.Errorf("the previous session's commit left the object store: %v", err)
	}
}
