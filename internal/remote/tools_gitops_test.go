package remote

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/githttptest"
)

// cloneForTest clones url into ws/repos/name with git_clone.
func cloneForTest(t *testing.T, tc *testCall, url, name string) string {
	t.Helper()
	var res api.GitCloneResult
	if err := tc.run(t, context.Background(), api.ToolGitClone, api.GitCloneArgs{URL: url, Name: name}, &res); err != nil {
		t.Fatalf("git_clone: %v\n%s", err, tc.output(api.StreamStderr))
	}
	return res.Path
}

func TestGitOpsLocal(t *testing.T) {
	t.Parallel()
	bare, _ := newOrigin(t)
	ws := t.TempDir()
	ctx := context.Background()
	tc := newTestCall(t, ws, nil)
	dir := cloneForTest(t, tc, bare, "proj")

	var st api.GitStatusResult
	if err := tc.run(t, ctx, api.ToolGitStatus, api.GitStatusArgs{Repo: "proj"}, &st); err != nil {
		t.Fatal(err)
	}
	if st.Branch != "main" || !st.Clean || len(st.Files) != 0 || st.Upstream != "origin/main" || len(st.Head) != 40 {
		t.Errorf("status of a fresh clone = %+v", st)
	}

	// Changes: a modified file, a new one (with a space), staged and not.
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("v1\nmore\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "new file.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := tc.run(t, ctx, api.ToolGitStatus, api.GitStatusArgs{Repo: "proj"}, &st); err != nil {
		t.Fatal(err)
	}
	want := map[string]api.GitFileStatus{
		"README":       {Path: "README", Index: ".", Worktree: "M", Kind: "changed"},
		"new file.txt": {Path: "new file.txt", Index: "?", Worktree: "?", Kind: "untracked"},
	}
	if st.Clean || len(st.Files) != len(want) {
		t.Fatalf("status = %+v", st)
	}
	for _, f := range st.Files {
		if want[f.Path] != f {
			t.Errorf("file %+v, want %+v", f, want[f.Path])
		}
	}

	var d api.GitDiffResult
	if err := tc.run(t, ctx, api.ToolGitDiff, api.GitDiffArgs{Repo: "proj"}, &d); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(d.Diff, "+more") || d.Truncated || d.Bytes != int64(len(d.Diff)) {
		t.Errorf("diff = %+v", d)
	}
	if err := tc.run(t, ctx, api.ToolGitDiff, api.GitDiffArgs{Repo: "proj", Staged: true}, &d); err != nil || d.Diff != "" {
		t.Errorf("staged diff = %+v, %v", d, err)
	}

	// A new branch, a commit of everything, a push that sets the upstream.
	var co api.GitCheckoutResult
	if err := tc.run(t, ctx, api.ToolGitCheckout, api.GitCheckoutArgs{Repo: "proj", Ref: "agent/fix", Create: true}, &co); err != nil {
		t.Fatal(err)
	}
	if co.Branch != "agent/fix" {
		t.Errorf("checkout = %+v", co)
	}
	if err := tc.run(t, ctx, api.ToolGitCheckout, api.GitCheckoutArgs{Repo: "proj", Ref: "agent/fix", Create: true}, nil); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second create: %v", err)
	}
	var cm api.GitCommitResult
	if err := tc.run(t, ctx, api.ToolGitCommit, api.GitCommitArgs{Repo: "proj", Message: "agent: more", All: true}, &cm); err != nil {
		t.Fatal(err)
	}
	if len(cm.Commit) != 40 || cm.Branch != "agent/fix" {
		t.Errorf("commit = %+v", cm)
	}
	if who := gitT(t, dir, "log", "-1", "--format=%an <%ae>|%cn <%ce>|%s"); who != "Outpost Agent <agent@outpost.invalid>|Outpost Agent <agent@outpost.invalid>|agent: more" {
		t.Errorf("commit by %q", who)
	}
	if err := tc.run(t, ctx, api.ToolGitCommit, api.GitCommitArgs{Repo: "proj", Message: "again"}, nil); err == nil || !strings.Contains(err.Error(), "nothing to commit") {
		t.Errorf("empty commit: %v", err)
	}
	var ps api.GitPushResult
	if err := tc.run(t, ctx, api.ToolGitPush, api.GitPushArgs{Repo: "proj", SetUpstream: true}, &ps); err != nil {
		t.Fatalf("push: %v\n%s", err, tc.output(api.StreamStderr))
	}
	if ps.Remote != "origin" || ps.Branch != "agent/fix" || ps.Commit != cm.Commit {
		t.Errorf("push = %+v", ps)
	}
	if got := gitT(t, bare, "rev-parse", "refs/heads/agent/fix"); got != cm.Commit {
		t.Errorf("origin has %s, want %s", got, cm.Commit)
	}
	if err := tc.run(t, ctx, api.ToolGitStatus, api.GitStatusArgs{Repo: "proj"}, &st); err != nil {
		t.Fatal(err)
	}
	if st.Upstream != "origin/agent/fix" || st.Ahead != 0 || st.Behind != 0 || !st.Clean || st.Head != cm.Commit {
		t.Errorf("status after push = %+v", st)
	}

	// The session's author; paths stage only what they name.
	tc2 := newTestCall(t, ws, map[string]string{"GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.com"})
	for _, n := range []string{"a.txt", "b.txt"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := tc2.run(t, ctx, api.ToolGitCommit, api.GitCommitArgs{Repo: "proj", Message: "add a", Paths: []string{"a.txt"}}, &cm); err != nil {
		t.Fatal(err)
	}
	if who := gitT(t, dir, "log", "-1", "--format=%an <%ae>|%cn <%ce>"); who != "Ada <ada@example.com>|Ada <ada@example.com>" {
		t.Errorf("commit by %q", who)
	}
	if err := tc.run(t, ctx, api.ToolGitStatus, api.GitStatusArgs{Repo: "proj"}, &st); err != nil {
		t.Fatal(err)
	}
	if st.Ahead != 1 || len(st.Files) != 1 || st.Files[0].Path != "b.txt" {
		t.Errorf("status = %+v", st)
	}

	// A branch only on origin is checked out tracking it; an unknown ref is refused.
	if err := tc.run(t, ctx, api.ToolGitCheckout, api.GitCheckoutArgs{Repo: "proj", Ref: "feature"}, &co); err != nil {
		t.Fatal(err)
	}
	if co.Branch != "feature" || gitT(t, dir, "rev-parse", "--abbrev-ref", "feature@{upstream}") != "origin/feature" {
		t.Errorf("checkout feature = %+v", co)
	}
	if err := tc.run(t, ctx, api.ToolGitCheckout, api.GitCheckoutArgs{Repo: "proj", Ref: "nope"}, nil); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("unknown ref: %v", err)
	}
	// Detached HEAD: push needs a branch name.
	if err := tc.run(t, ctx, api.ToolGitCheckout, api.GitCheckoutArgs{Repo: "proj", Ref: cm.Commit}, &co); err != nil || co.Branch != "" || co.Head != cm.Commit {
		t.Errorf("checkout sha = %+v, %v", co, err)
	}
	if err := tc.run(t, ctx, api.ToolGitPush, api.GitPushArgs{Repo: "proj"}, nil); err == nil || !strings.Contains(err.Error(), "detached") {
		t.Errorf("push detached: %v", err)
	}
}

func TestGitOpsRefusals(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	tc := newTestCall(t, ws, nil)
	ctx := context.Background()
	for _, name := range []string{"", "..", "a/b", "-x"} {
		if err := tc.run(t, ctx, api.ToolGitStatus, api.GitStatusArgs{Repo: name}, nil); err == nil || !strings.Contains(err.Error(), "repo name") {
			t.Errorf("repo %q: %v", name, err)
		}
	}
	if err := tc.run(t, ctx, api.ToolGitDiff, api.GitDiffArgs{Repo: "absent"}, nil); err == nil || !strings.Contains(err.Error(), "git_clone") {
		t.Errorf("absent clone: %v", err)
	}
	if err := tc.run(t, ctx, api.ToolGitCommit, api.GitCommitArgs{Repo: "absent", Message: " "}, nil); err == nil || !strings.Contains(err.Error(), "message") {
		t.Errorf("empty message: %v", err)
	}
	if err := tc.run(t, ctx, api.ToolGitCheckout, api.GitCheckoutArgs{Repo: "absent", Ref: "--orphan"}, nil); err == nil || !strings.Contains(err.Error(), "must not start") {
		t.Errorf("option ref: %v", err)
	}
	if err := tc.run(t, ctx, api.ToolGitPush, api.GitPushArgs{Repo: "absent", Remote: "--mirror"}, nil); err == nil || !strings.Contains(err.Error(), "must not start") {
		t.Errorf("option remote: %v", err)
	}
}

func TestParseGitStatus(t *testing.T) {
	t.Parallel()
	in := strings.Join([]string{
		"# branch.oid 0123456789012345678901234567890123456789",
		"# branch.head (detached)",
		"2 R. N... 100644 100644 100644 aaaa bbbb R100 new name.go", "old name.go",
		"u UU N... 100644 100644 100644 100644 aaaa bbbb cccc conflict.go",
		"! build/",
		"",
	}, "\x00")
	got := parseGitStatus(in)
	if got.Branch != "" || got.Head != "0123456789012345678901234567890123456789" || got.Clean || len(got.Files) != 3 {
		t.Fatalf("parse = %+v", got)
	}
	if f := got.Files[0]; f.Path != "new name.go" || f.OrigPath != "old name.go" || f.Kind != "renamed" || f.Index != "R" {
		t.Errorf("rename = %+v", f)
	}
	if f := got.Files[1]; f.Path != "conflict.go" || f.Kind != "unmerged" {
		t.Errorf("unmerged = %+v", f)
	}
	if f := got.Files[2]; f.Path != "build/" || f.Kind != "ignored" {
		t.Errorf("ignored = %+v", f)
	}
}

// grepTree fails the test when a file under root holds s.
func grepTree(t *testing.T, root, s string) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), s) {
			t.Errorf("%s holds the token", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestGitPushWithToken(t *testing.T) {
	t.Parallel()
	bare, _ := newOrigin(t)
	gitT(t, bare, "config", "http.receivepack", "true")
	const token = "tok_s3cret_0123456789"
	srv := githttptest.Serve(t, filepath.Dir(bare), token)
	url := srv.URL + "/" + filepath.Base(bare)

	ws := t.TempDir()
	state := t.TempDir()
	secrets := map[string]string{"GIT_TOKEN_127_0_0_1": token}
	if err := writeGitCredentials(state, secrets); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tc := newTestCall(t, ws, secrets)
	tc.c.stateDir = state
	dir := cloneForTest(t, tc, url, "proj")
	if err := tc.run(t, ctx, api.ToolGitCheckout, api.GitCheckoutArgs{Repo: "proj", Ref: "agent/http", Create: true}, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pushed.txt"), []byte("over http\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var cm api.GitCommitResult
	if err := tc.run(t, ctx, api.ToolGitCommit, api.GitCommitArgs{Repo: "proj", Message: "over http", All: true}, &cm); err != nil {
		t.Fatal(err)
	}
	// A helper of the repository's own config is not given the token to keep.
	stored := filepath.Join(t.TempDir(), "stored-credentials")
	gitT(t, dir, "config", "credential.helper", "store --file="+stored)
	var ps api.GitPushResult
	if err := tc.run(t, ctx, api.ToolGitPush, api.GitPushArgs{Repo: "proj", SetUpstream: true}, &ps); err != nil {
		t.Fatalf("push: %v\n%s", err, tc.output(api.StreamStderr))
	}
	if b, err := os.ReadFile(stored); err == nil {
		t.Errorf("the repository's credential helper stored %q", b)
	}
	gitT(t, dir, "config", "--unset", "credential.helper")
	if got := gitT(t, bare, "rev-parse", "refs/heads/agent/http"); got != cm.Commit {
		t.Errorf("origin has %s, want %s", got, cm.Commit)
	}
	if out := tc.output(api.StreamStderr); strings.Contains(out, token) {
		t.Errorf("output holds the token: %q", out)
	}
	if cfg, _ := os.ReadFile(filepath.Join(dir, ".git", "config")); strings.Contains(string(cfg), "credential") {
		t.Errorf(".git/config names a credential helper:\n%s", cfg)
	}

	// A session without the token: the push is refused, and the error names
	// the secret to set.
	if err := os.WriteFile(filepath.Join(dir, "pushed.txt"), []byte("again\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noTok := newTestCall(t, ws, nil)
	noTok.c.stateDir = t.TempDir()
	if err := writeGitCredentials(noTok.c.stateDir, nil); err != nil {
		t.Fatal(err)
	}
	if err := noTok.run(t, ctx, api.ToolGitCommit, api.GitCommitArgs{Repo: "proj", Message: "again", All: true}, nil); err != nil {
		t.Fatal(err)
	}
	err := noTok.run(t, ctx, api.ToolGitPush, api.GitPushArgs{Repo: "proj"}, nil)
	t.Logf("push without a token: %v", err)
	if err == nil || !strings.Contains(err.Error(), "GIT_TOKEN_127_0_0_1") || !strings.Contains(err.Error(), "credentials") {
		t.Errorf("push without a token: %v", err)
	}
	if got := gitT(t, bare, "rev-parse", "refs/heads/agent/http"); got != cm.Commit {
		t.Errorf("origin moved to %s without a token", got)
	}
	grepTree(t, ws, token)
}
