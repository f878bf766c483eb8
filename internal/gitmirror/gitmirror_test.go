package gitmirror

import (
	"context"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/githttptest"
)

// gitT runs git in dir for a test (githttptest.Git).
var gitT = githttptest.Git

// upstream serves a new repository app.git over HTTP on loopback (behind
// token when set) and returns its URL and a work clone to push from.
func upstream(t *testing.T, token string) (url, work string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	root := t.TempDir()
	bare := filepath.Join(root, "app.git")
	work = filepath.Join(t.TempDir(), "work")
	gitT(t, root, "init", "--bare", bare)
	gitT(t, root, "clone", bare, work)
	push(t, work, "v1")
	return githttptest.Serve(t, root, token).URL + "/app.git", work
}

// push commits a change in work, pushes it to main and returns the commit.
func push(t *testing.T, work, content string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(work, "README"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	gitT(t, work, "add", "README")
	gitT(t, work, "commit", "-m", content)
	gitT(t, work, "push", "origin", "HEAD:main")
	return gitT(t, work, "rev-parse", "HEAD")
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// evilScript writes a program that creates marker when run, and returns
// its path.
func evilScript(t *testing.T, dir, marker string) string {
	t.Helper()
	p := filepath.Join(dir, "evil")
	if err := os.WriteFile(p, []byte("#!/bin/sh\ntouch "+marker+"\ncat >/dev/null 2>&1\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// Tamper writes into the mirror at path what session code could write
// into a mirror it could reach: an upload-pack program, an fsmonitor, a
// hooks path and hooks, another origin URL and alternates, all pointing at
// evil. It is what an earlier version, or someone by hand, may have left.
func tamper(t *testing.T, path, evil, otherURL string) {
	t.Helper()
	for _, kv := range [][2]string{
		{"remote.origin.uploadpack", evil}, {"core.fsmonitor", evil}, {"core.hooksPath", filepath.Dir(evil) + "/hooks"},
		{"remote.origin.url", otherURL}, {"core.alternateRefsCommand", evil}, {"uploadpack.packObjectsHook", evil},
	} {
		gitT(t, path, "config", "--file", filepath.Join(path, "config"), kv[0], kv[1])
	}
	for _, dir := range []string{filepath.Join(path, "hooks"), filepath.Dir(evil) + "/hooks"} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, h := range []string{"reference-transaction", "post-checkout", "pre-auto-gc", "post-merge"} {
			if err := os.Symlink(evil, filepath.Join(dir, h)); err != nil && !os.IsExist(err) {
				t.Fatal(err)
			}
		}
	}
}

// TestUpdateMakesAndRefreshesMirror: the worker makes a mirror over HTTP
// with the session's token, readable by other users, and brings it up to
// date with a commit pushed afterwards; without the token it cannot.
func TestUpdateMakesAndRefreshesMirror(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	url, work := upstream(t, "s3cret")
	root := filepath.Join(t.TempDir(), "mirrors")
	if err := Prepare(root); err != nil {
		t.Fatal(err)
	}
	if err := Update(ctx, root, url, ""); err == nil {
		t.Fatal("Update without the token made a mirror of a private repository")
	}
	if err := Update(ctx, root, url, "s3cret"); err != nil {
		t.Fatal(err)
	}
	path, _ := Path(root, url)
	if !Ready(path) {
		t.Fatalf("no mirror at %s", path)
	}
	v2 := push(t, work, "v2")
	if err := Update(ctx, root, url, "s3cret"); err != nil {
		t.Fatal(err)
	}
	if got := gitT(t, path, "rev-parse", "refs/heads/main"); got != v2 {
		t.Fatalf("mirror's main at %s, want %s", got, v2)
	}
	if b, err := os.ReadFile(filepath.Join(path, "config")); err != nil || strings.Contains(string(b), "s3cret") {
		t.Fatalf("mirror config holds the token or is unreadable (%v):\n%s", err, b)
	}
	// Sessions of another user read mirrors: nothing in it is private.
	err := filepath.WalkDir(path, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o004 == 0 || (d.IsDir() && fi.Mode().Perm()&0o001 == 0) {
			t.Errorf("%s has mode %v: not readable by other users", p, fi.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestUpdateIgnoresTamperedMirror: a mirror whose configuration and hooks
// were tampered with runs nothing when the worker updates it, and comes
// out with its configuration written anew, the URL the one it is for.
func TestUpdateIgnoresTamperedMirror(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	url, work := upstream(t, "")
	otherURL, otherWork := upstream(t, "")
	push(t, otherWork, "not the upstream's")
	root := filepath.Join(t.TempDir(), "mirrors")
	if err := Prepare(root); err != nil {
		t.Fatal(err)
	}
	if err := Update(ctx, root, url, ""); err != nil {
		t.Fatal(err)
	}
	path, _ := Path(root, url)
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	tamper(t, path, evilScript(t, dir, marker), otherURL)
	if err := os.WriteFile(filepath.Join(path, "objects", "info", "alternates"), []byte(dir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	v2 := push(t, work, "v2")
	if err := Update(ctx, root, url, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("updating a tampered mirror ran the program its configuration named")
	}
	if got := gitT(t, path, "rev-parse", "refs/heads/main"); got != v2 {
		t.Fatalf("mirror's main at %s, want %s from %s", got, v2, url)
	}
	cfg := gitT(t, path, "config", "--file", filepath.Join(path, "config"), "--list")
	for _, bad := range []string{"uploadpack", "alternaterefs", "hookspath=" + dir, otherURL} {
		if strings.Contains(strings.ToLower(cfg), strings.ToLower(bad)) {
			t.Errorf("the rewritten config still holds %q:\n%s", bad, cfg)
		}
	}
	if !strings.Contains(cfg, "remote.origin.url="+url) {
		t.Errorf("the rewritten config does not name %s:\n%s", url, cfg)
	}
	for _, gone := range []string{"hooks", "objects/info/alternates"} {
		if _, err := os.Lstat(filepath.Join(path, gone)); err == nil {
			t.Errorf("%s is still in the mirror", gone)
		}
	}
}

// TestPathMirrorsNetworkURLsOnly: local paths, file://, ssh and URLs with
// credentials are not mirrored (the worker would copy what the session
// cannot read, or show credentials to every session).
func TestPathMirrorsNetworkURLsOnly(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"https://example.com/a.git", "http://127.0.0.1:8080/a.git", "git://example.com/a"} {
		if p, err := Path("/m", u); err != nil || filepath.Dir(p) != "/m" || !strings.HasSuffix(p, ".mirror") {
			t.Errorf("Path(%q) = %q, %v", u, p, err)
		}
	}
	for _, u := range []string{"/srv/repo.git", "file:///root/secret.git", "ssh://git@example.com/a", "git@example.com:a.git",
		"https://user:tok@example.com/a.git", "ext::sh -c evil", "https://example.com/a b", "https://-oProxy/a", ""} {
		if p, err := Path("/m", u); err == nil {
			t.Errorf("Path(%q) = %q, want an error", u, p)
		}
	}
}

// TestWantedReadsOnlyWhatTheSessionRecorded: Want records URLs once and
// only mirrorable ones; Wanted drops junk lines and refuses a link (session
// code could point it at a file of the worker's).
func TestWantedReadsOnlyWhatTheSessionRecorded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, u := range []string{"https://example.com/a.git", "/local/repo", "https://example.com/a.git", "https://example.com/b.git"} {
		if err := Want(dir, u); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, WantFile), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("file:///etc/shadow\nnot a url\n")
	f.Close()
	got, err := Wanted(dir)
	if want := []string{"https://example.com/a.git", "https://example.com/b.git"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("Wanted = %q, %v; want %q", got, err, want)
	}
	linked := t.TempDir()
	if err := os.Symlink(filepath.Join(dir, WantFile), filepath.Join(linked, WantFile)); err != nil {
		t.Fatal(err)
	}
	if got, err := Wanted(linked); err == nil || got != nil {
		t.Fatalf("Wanted through a link = %q, %v; want an error", got, err)
	}
	if got, err := Wanted(t.TempDir()); err != nil || got != nil {
		t.Fatalf("Wanted without a file = %q, %v", got, err)
	}
}

// TestTokenFor reads the session's token for a URL's host as the remote's
// credential helper would answer it.
func TestTokenFor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, credFile), []byte("* any\nGITHUB_COM gh\n127_0_0_1_8080 local\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for u, want := range map[string]string{
		"https://github.com/a/b.git": "gh", "http://127.0.0.1:8080/a.git": "local", "https://example.com/x": "any",
		"http://example.com/x": "", "git://github.com/a/b": "gh",
	} {
		if got := TokenFor(dir, u); got != want {
			t.Errorf("TokenFor(%q) = %q, want %q", u, got, want)
		}
	}
}

// TestPrepareRemovesStaleMirrors: mirrors of earlier versions (which
// session code could write) and clones left unfinished long ago go; a
// clone that may be another worker's under way and other files stay.
func TestPrepareRemovesStaleMirrors(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, d := range []string{"0123456789abcdef.git/objects", ".mirror-123/objects", ".mirror-new/objects", "keep-me"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * staleAfter)
	if err := os.Chtimes(filepath.Join(root, ".mirror-123"), old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := Prepare(root); err != nil {
		t.Fatal(err)
	}
	var names []string
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{".mirror-new", "keep-me"}; !slices.Equal(names, want) {
		t.Errorf("after Prepare the directory holds %q, want %q (a clone under way stays)", names, want)
	}
	if fi, err := os.Stat(root); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("mirrors directory mode %v (%v), want 0755", fi.Mode(), err)
	}
}

// TestUpdateUsesNoCredentialsOfTheWorker: the worker's user has git
// credentials for a host in its own configuration (an extraHeader, as a
// build machine may have). A session that asks for the mirror of a private
// repository of that host without a token of its own must not get one made
// with the worker's credentials, which every session could then read.
func TestUpdateUsesNoCredentialsOfTheWorker(t *testing.T) {
	ctx := testCtx(t)
	url, _ := upstream(t, "w0rker-only")
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	// The worker's user's own configuration, also under `make test`, which
	// points GIT_CONFIG_GLOBAL at a file of its own.
	t.Setenv("GIT_CONFIG_GLOBAL", filepath.Join(home, ".gitconfig"))
	auth := "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:w0rker-only"))
	gitT(t, home, "config", "--global", "http."+url+".extraHeader", auth)
	if got := gitT(t, home, "config", "--global", "--get-urlmatch", "http.extraHeader", url); got != auth {
		t.Fatalf("the worker's configuration does not hold the credentials: %q", got)
	}
	root := filepath.Join(t.TempDir(), "mirrors")
	if err := Prepare(root); err != nil {
		t.Fatal(err)
	}
	err := Update(ctx, root, url, "")
	path, _ := Path(root, url)
	if err == nil || Ready(path) {
		t.Fatalf("Update without the session's token made a mirror with the worker's credentials (err %v)", err)
	}
	// With the session's own token it is made as usual.
	if err := Update(ctx, root, url, "w0rker-only"); err != nil {
		t.Fatal(err)
	}
}
