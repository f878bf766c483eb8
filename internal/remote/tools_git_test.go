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
