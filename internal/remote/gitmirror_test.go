package remote

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestGitCloneThroughMirror clones twice through a shared mirror: the
// mirror is made once, brought up to date before the second clone, and
// each clone stands on its own afterwards (dissociated).
func TestGitCloneThroughMirror(t *testing.T) {
	// Not parallel: it sets OUTPOST_GIT_MIRRORS.
	bare, work := newOrigin(t)
	mirrors := t.TempDir()
	t.Setenv(api.EnvGitMirrors.Name, mirrors)
	ctx := context.Background()

	first := newTestCall(t, t.TempDir(), nil)
	var res api.GitCloneResult
	if err := first.run(t, ctx, api.ToolGitClone, api.GitCloneArgs{URL: bare, Name: "app"}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Mirror == "" || filepath.Dir(res.Mirror) != mirrors {
		t.Fatalf("clone did not use a mirror: %+v", res)
	}
	newHead := commitFile(t, work, "README", "v2")
	gitT(t, work, "push", "origin", "HEAD:main")

	second := newTestCall(t, t.TempDir(), nil)
	var res2 api.GitCloneResult
	if err := second.run(t, ctx, api.ToolGitClone, api.GitCloneArgs{URL: bare, Name: "app", Ref: "main"}, &res2); err != nil {
		t.Fatal(err)
	}
	if res2.Mirror != res.Mirror || res2.Head != newHead {
		t.Fatalf("second clone %+v, want head %s from mirror %s", res2, newHead, res.Mirror)
	}
	if got := gitT(t, res.Mirror, "rev-parse", "refs/heads/main"); got != newHead {
		t.Fatalf("mirror main at %s, want %s", got, newHead)
	}
	// Dissociated: removing the mirror leaves the clone whole.
	if err := os.RemoveAll(mirrors); err != nil {
		t.Fatal(err)
	}
	gitT(t, filepath.Join(second.c.workDir, "repos", "app"), "fsck", "--no-progress")
}
