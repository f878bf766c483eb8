package worker

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// git runs git in dir for a test and returns its trimmed output.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// originRepo makes a repository with one commit on main (a README and a
// .gitignore ignoring *.log) and a tag v1, and returns its path.
func originRepo(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "origin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "init", "-q")
	writeFile(t, filepath.Join(dir, "README.md"), "hello\n")
	writeFile(t, filepath.Join(dir, ".gitignore"), "*.log\n")
	git(t, dir, "add", ".")
	git(t, dir, "commit", "-qm", "first")
	git(t, dir, "tag", "v1")
	return dir
}

func openTestWorkspace(t *testing.T, dir, dataDir string, keep bool) *workspace {
	t.Helper()
	ws, err := openWorkspace(Options{Dir: dir, DataDir: dataDir, KeepWorkspace: keep, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("openWorkspace: %v", err)
	}
	t.Cleanup(ws.close)
	return ws
}

// TestWorkspaceClearedBetweenSessions: what one session leaves — files,
// a dirty repository with local commits, branches, tags, a stash, hooks
// and configuration — is gone before another session starts, the
// repository's object store excepted; nothing outside the workspace is
// touched, even through symbolic links or a core.worktree pointing away;
// and the same session taking the workspace back finds it as it left it.
func TestWorkspaceClearedBetweenSessions(t *testing.T) {
	t.Parallel()
	requireUnix(t)
	ctx, _ := testContext(t)
	origin := originRepo(t)
	dir := t.TempDir()
	dataDir := filepath.Join(dir, ".worker") // inside: must survive
	ws := openTestWorkspace(t, dir, dataDir, false)
	if err := ws.before(ctx, "ses_1"); err != nil {
		t.Fatal(err)
	}

	// Session 1 at work.
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "precious.txt"), "keep me\n")
	marker := filepath.Join(outside, "hook-ran")
	writeFile(t, filepath.Join(dir, "notes.txt"), "session 1 notes\n")
	writeFile(t, filepath.Join(dir, "deep", "er", "file"), "x")
	writeFile(t, filepath.Join(dir, "locked", "file"), "x")
	if err := os.Chmod(filepath.Join(dir, "locked"), 0o500); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(dir, "repos", "app")
	if err := os.MkdirAll(filepath.Join(dir, "repos"), 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, filepath.Join(dir, "repos"), "clone", "-q", origin, "app")
	originHead := git(t, app, "rev-parse", "HEAD")
	writeFile(t, filepath.Join(app, "secret.txt"), "session 1 secret\n")
	git(t, app, "add", "secret.txt")
	git(t, app, "commit", "-qm", "local work")
	git(t, app, "branch", "feature")
	git(t, app, "tag", "-f", "v1") // moves v1 to the local commit
	writeFile(t, filepath.Join(app, "README.md"), "changed\n")
	git(t, app, "stash", "-q")
	writeFile(t, filepath.Join(app, "README.md"), "changed again\n")
	writeFile(t, filepath.Join(app, "untracked.txt"), "u\n")
	writeFile(t, filepath.Join(app, "build.log"), "ignored\n")
	writeFile(t, filepath.Join(app, ".git", "hooks", "post-checkout"), "#!/bin/sh\ntouch "+marker+"\n")
	if err := os.Chmod(filepath.Join(app, ".git", "hooks", "post-checkout"), 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, app, "config", "core.fsmonitor", "touch "+marker)
	git(t, app, "config", "alias.st", "!touch "+marker)
	writeFile(t, filepath.Join(dir, "repos", "notes.txt"), "not a repo\n")
	writeFile(t, filepath.Join(dir, "repos", "plain", "file"), "not a repo\n")
	// A repository whose configuration points its work tree outside.
	evil := filepath.Join(dir, "repos", "evil")
	git(t, filepath.Join(dir, "repos"), "clone", "-q", origin, "evil")
	git(t, evil, "config", "core.worktree", outside)

	// The same session taking the workspace back keeps everything.
	if err := ws.before(ctx, "ses_1"); err != nil {
		t.Fatal(err)
	}
	if !exists(filepath.Join(dir, "notes.txt")) {
		t.Fatal("the same session's files were cleared")
	}

	if err := ws.before(ctx, "ses_2"); err != nil {
		t.Fatalf("before the next session: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != ".worker repos" {
		t.Errorf("workspace after clearing holds %q, want .worker (the data dir) and repos", names)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "precious.txt")); err != nil || string(b) != "keep me\n" {
		t.Errorf("a file outside the workspace was touched: %q %v", b, err)
	}
	if exists(filepath.Join(dir, "repos", "notes.txt")) || exists(filepath.Join(dir, "repos", "plain")) {
		t.Error("non-repositories under repos/ were kept")
	}
	if got := git(t, app, "status", "--porcelain", "--ignored"); got != "" {
		t.Errorf("repository not clean:\n%s", got)
	}
	if got := git(t, app, "rev-parse", "HEAD"); got != originHead {
		t.Errorf("HEAD at %s, want the remote's main %s", got, originHead)
	}
	if got := git(t, app, "for-each-ref", "--format=%(refname)", "refs/heads", "refs/tags", "refs/stash"); got != "" {
		t.Errorf("local refs kept: %q", got)
	}
	if exists(filepath.Join(app, "secret.txt")) || exists(filepath.Join(app, ".git", "hooks")) || exists(filepath.Join(app, ".git", "logs")) {
		t.Error("the session's file, hooks or reflogs survived")
	}
	if b, _ := os.ReadFile(filepath.Join(app, "README.md")); string(b) != "hello\n" {
		t.Errorf("README.md = %q", b)
	}
	cfg, _ := os.ReadFile(filepath.Join(app, ".git", "config"))
	if strings.Contains(string(cfg), "fsmonitor") || strings.Contains(string(cfg), "alias") || !strings.Contains(string(cfg), origin) {
		t.Errorf(".git/config:\n%s", cfg)
	}
	git(t, app, "status") // would run the fsmonitor, were it kept
	if exists(marker) {
		t.Error("a hook or command the session configured ran")
	}
	// The evil clone's work tree lies outside: it is reset in place or
	// removed, never cleaned where core.worktree pointed.
	if exists(evil) {
		if got := git(t, evil, "status", "--porcelain"); got != "" {
			t.Errorf("evil clone: %s", got)
		}
	}

	// The next git_clone fetches into it as into a fresh clone.
	git(t, app, "fetch", "-q", "--tags", "origin")
	git(t, app, "checkout", "-q", "-b", "main", "--track", "origin/main")
	if got := git(t, app, "rev-parse", "v1"); got != originHead {
		t.Errorf("tag v1 after a fetch = %s, want the remote's %s", got, originHead)
	}
}

// TestWorkspaceKept: with KeepWorkspace nothing is cleared and a
// workspace holding files is accepted.
func TestWorkspaceKept(t *testing.T) {
	t.Parallel()
	ctx, _ := testContext(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mine.txt"), "x")
	ws := openTestWorkspace(t, dir, t.TempDir(), true)
	for _, id := range []string{"ses_1", "ses_2"} {
		if err := ws.before(ctx, id); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, id+".txt"), id)
	}
	for _, name := range []string{"mine.txt", "ses_1.txt", "ses_2.txt"} {
		if !exists(filepath.Join(dir, name)) {
			t.Errorf("%s was removed from a kept workspace", name)
		}
	}
}

// TestWorkspaceOneSessionTakenAsItIs: a worker serving one session
// (--session) serves in the directory its orchestrator prepared, files
// and all, and never clears it, even where the record says another
// session ran last.
func TestWorkspaceOneSessionTakenAsItIs(t *testing.T) {
	t.Parallel()
	ctx, _ := testContext(t)
	dir, dataDir := t.TempDir(), t.TempDir()
	prepared := map[string]string{"checkpoint.txt": "restored", ".dotfile": "dot", "repos/app/wip.txt": "work", "repos/notarepo": "file"}
	for name, content := range prepared {
		writeFile(t, filepath.Join(dir, name), content)
	}
	rec := filepath.Join(dataDir, workspaceRecordFile)
	resolvedDir, _ := filepath.EvalSymlinks(dir)
	writeFile(t, rec, `{"dir":"`+resolvedDir+`","last_session":"ses_0"}`)
	ws, err := openWorkspace(Options{Dir: dir, DataDir: dataDir, SessionID: "ses_1", Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("a prepared workspace for one session: %v", err)
	}
	defer ws.close()
	if err := ws.before(ctx, "ses_1"); err != nil {
		t.Fatal(err)
	}
	for name, want := range prepared {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != want {
			t.Errorf("%s: %q %v, want %q", name, got, err, want)
		}
	}
	if b, err := os.ReadFile(rec); err != nil || !strings.Contains(string(b), "ses_0") {
		t.Errorf("the workspace record changed: %s %v", b, err)
	}
}

// TestWorkspaceRefused: a workspace holding files the worker did not see
// a session make, the home directory, the root directory and a workspace
// another worker holds are refused; a workspace the worker took over is
// accepted again after a restart even though it holds session files.
func TestWorkspaceRefused(t *testing.T) {
	t.Parallel()
	requireUnix(t)
	ctx, _ := testContext(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "session.yaml"), "x")
	_, err := openWorkspace(Options{Dir: dir, DataDir: t.TempDir(), Logger: testLogger(t)})
	if !errors.Is(err, ErrWorkspace) || !strings.Contains(err.Error(), "session.yaml") || !strings.Contains(err.Error(), "--keep-workspace") {
		t.Errorf("workspace with a file: %v", err)
	}

	for _, tc := range []struct{ dir, home, want string }{
		{"/", "/home/u", "root directory"},
		{"/home/u", "/home/u", "home directory"},
		{"/home", "/home/u", "holds the home directory"},
	} {
		ws := &workspace{dir: tc.dir, home: tc.home, dataDir: "/var/lib/w"}
		if err := ws.checkClearable(); !errors.Is(err, ErrWorkspace) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("workspace %s: %v, want %q", tc.dir, err, tc.want)
		}
	}

	empty, dataDir := t.TempDir(), t.TempDir()
	ws := openTestWorkspace(t, empty, dataDir, false)
	if _, err := openWorkspace(Options{Dir: empty, DataDir: t.TempDir(), Logger: testLogger(t)}); !errors.Is(err, ErrWorkspace) || !strings.Contains(err.Error(), "in use by another worker") {
		t.Errorf("second worker on the workspace: %v", err)
	}
	if err := ws.before(ctx, "ses_1"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(empty, "left.txt"), "x")
	ws.close()
	ws = openTestWorkspace(t, empty, dataDir, false)
	if ws.last != "ses_1" {
		t.Errorf("after a restart the last session is %q, want ses_1", ws.last)
	}
	if err := ws.before(ctx, "ses_2"); err != nil || exists(filepath.Join(empty, "left.txt")) {
		t.Errorf("the restarted worker did not clear the previous session's files: %v", err)
	}
}

// TestDataDirLock: a second worker on a data dir is refused with the dir,
// the holder's pid and the flag to use instead.
func TestDataDirLock(t *testing.T) {
	t.Parallel()
	requireUnix(t)
	dir := t.TempDir()
	id, err := openIdentity(Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer id.Close()
	_, err = openIdentity(Options{DataDir: dir})
	if !errors.Is(err, ErrDataDirInUse) || !strings.Contains(err.Error(), "the worker data dir "+dir+" is in use by another worker (pid "+strconv.Itoa(os.Getpid())+")") ||
		!strings.Contains(err.Error(), "--data-dir") {
		t.Errorf("second lock: %v", err)
	}
}

// TestWorkspaceDataDir: each workspace has a data dir of its own, the
// same whichever path reaches it.
func TestWorkspaceDataDir(t *testing.T) {
	t.Parallel()
	requireUnix(t)
	root := t.TempDir()
	a, b := filepath.Join(root, "Box.1"), filepath.Join(root, "box-2")
	for _, d := range []string{a, b} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(a, link); err != nil {
		t.Fatal(err)
	}
	da, _ := WorkspaceDataDir("/home/u", a)
	db, _ := WorkspaceDataDir("/home/u", b)
	dl, _ := WorkspaceDataDir("/home/u", link)
	if da == db || da != dl {
		t.Errorf("data dirs %q, %q, via a link %q", da, db, dl)
	}
	if filepath.Dir(da) != "/home/u/.outpost/worker" || !strings.HasPrefix(filepath.Base(da), "box-1-") || len(filepath.Base(da)) != len("box-1-")+8 {
		t.Errorf("data dir %q, want /home/u/.outpost/worker/box-1-<8 hex digits>", da)
	}
}
