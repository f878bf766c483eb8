//go:build unix

package worker

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/githttptest"
	"github.com/outpost-sh/outpost/internal/gitmirror"
)

// gitRun runs git in dir for a test (githttptest.Git).
var gitRun = githttptest.Git

// pushReadme commits content as README in work and pushes it to main.
func pushReadme(t *testing.T, work, content string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(work, "README"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	gitRun(t, work, "add", "README")
	gitRun(t, work, "commit", "-m", content)
	gitRun(t, work, "push", "origin", "HEAD:main")
	return gitRun(t, work, "rev-parse", "HEAD")
}

// TestSessionCannotWriteMirrors: session code (here the remote itself, a
// script) tries to tamper with the worker's git mirror of a repository it
// cloned — an upload-pack program in its config, a hook, a new entry, a
// rename — under bwrap and under user isolation as a user of its own. The mirrors
// directory is read-only to it, yet it can read the mirror; after the
// session the worker brings the mirror up to date with the upstream's
// newest commit, the config as the worker wrote it.
func TestSessionCannotWriteMirrors(t *testing.T) {
	requireUnix(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	for _, mode := range []Isolation{IsolationBwrap, IsolationUser} {
		t.Run(string(mode), func(t *testing.T) {
			// Not parallel: OUTPOST_GIT_MIRRORS is the worker's environment.
			switch mode {
			case IsolationBwrap:
				requireBwrap(t)
			case IsolationUser:
				if os.Geteuid() != 0 {
					t.Skip("needs root")
				}
			}
			ctx, _ := testContext(t)
			// The run-as user must reach the workspace, the data dir and the mirrors,
			// and t.TempDir's parent is closed to other users.
			base, err := os.MkdirTemp("", "outpost-mirrors-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(base) })
			if err := os.Chmod(base, 0o755); err != nil {
				t.Fatal(err)
			}
			repos := t.TempDir()
			bare, work := filepath.Join(repos, "app.git"), filepath.Join(t.TempDir(), "work")
			gitRun(t, repos, "init", "--bare", bare)
			gitRun(t, repos, "clone", bare, work)
			pushReadme(t, work, "v1")
			url := githttptest.Serve(t, repos, "").URL + "/app.git"

			mirrors := filepath.Join(base, "mirrors")
			t.Setenv(api.EnvGitMirrors.Name, mirrors)
			if err := gitmirror.Prepare(mirrors); err != nil {
				t.Fatal(err)
			}
			if err := gitmirror.Update(ctx, mirrors, url, ""); err != nil {
				t.Fatal(err)
			}
			mirror, _ := gitmirror.Path(mirrors, url)
			if mode == IsolationUser {
				// An earlier version gave the mirrors to the run-as user.
				if err := os.Chown(mirrors, 65534, 65534); err != nil {
					t.Fatal(err)
				}
			}
			v2 := pushReadme(t, work, "v2")

			var out syncBuffer
			opts := directOptions(t, `m="$OUTPOST_GIT_MIRRORS/`+filepath.Base(mirror)+`"
git --git-dir="$m" -c safe.directory="$m" log -1 --format=read=%s main
git config --file "$m/config" remote.origin.uploadpack /tmp/evil 2>/dev/null && echo tampered=config
mkdir "$m/hooks" 2>/dev/null && echo tampered=hooks
touch "$OUTPOST_GIT_MIRRORS/planted" 2>/dev/null && echo tampered=root
mv "$m" "$m.old" 2>/dev/null && echo tampered=rename
echo "`+url+`" >"$OUTPOST_STATE_DIR/`+gitmirror.WantFile+`"
echo done`)
			opts.DataDir, opts.Dir = filepath.Join(base, "data"), filepath.Join(base, "work")
			if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
				t.Fatal(err)
			}
			opts.Stdout = &out
			opts.Isolation = IsolationOptions{Mode: mode}
			if mode == IsolationUser {
				// A user of the test's own: the worker ends every process
				// of its run-as user.
				opts.Isolation.RunAs = testSessionUser(t).name
			}
			if err := ServeDirect(ctx, opts); err != nil {
				t.Fatalf("ServeDirect = %v\n%s", err, out.String())
			}
			got := out.String()
			if !strings.Contains(got, "read=v1") || !strings.Contains(got, "done") {
				t.Errorf("the session could not read the mirror:\n%s", got)
			}
			if strings.Contains(got, "tampered=") {
				t.Errorf("session code wrote the git mirrors:\n%s", got)
			}
			fi, err := os.Lstat(mirrors)
			if err != nil {
				t.Fatal(err)
			}
			if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Geteuid() {
				t.Errorf("the mirrors directory is owned by uid %d, not the worker", st.Uid)
			}
			if head := gitRun(t, mirror, "rev-parse", "refs/heads/main"); head != v2 {
				t.Errorf("after the session the mirror's main is %s, want the upstream's %s", head, v2)
			}
			if cfg := gitRun(t, mirror, "config", "--file", filepath.Join(mirror, "config"), "--list"); strings.Contains(cfg, "uploadpack") {
				t.Errorf("the mirror's config holds an upload-pack program:\n%s", cfg)
			}
		})
	}
}

// TestMirrorsOutsideTheWorkspace: a mirrors directory inside the
// workspace, which session code writes, is refused at start.
func TestMirrorsOutsideTheWorkspace(t *testing.T) {
	requireUnix(t)
	requireBwrap(t)
	ctx, _ := testContext(t)
	opts := directOptions(t, `echo served`)
	opts.Isolation.Mode = IsolationBwrap
	t.Setenv(api.EnvGitMirrors.Name, filepath.Join(opts.Dir, "mirrors"))
	err := ServeDirect(ctx, opts)
	if err == nil || !strings.Contains(err.Error(), "must be outside the workspace") {
		t.Fatalf("ServeDirect = %v, want a refusal of mirrors inside the workspace", err)
	}
}

// TestMirrorsOutsideTheRunAsUsersDirs: in user isolation session code runs
// as the run-as user outside any sandbox, so a mirrors directory in a
// directory of that user (its HOME, say) could be renamed away and
// replaced by one of the session's, whose mirrors the next session would
// clone with. The worker refuses it at start.
func TestMirrorsOutsideTheRunAsUsersDirs(t *testing.T) {
	requireUnix(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	home := t.TempDir()
	if err := os.Chown(home, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	w := &worker{opts: Options{Dir: t.TempDir()}, log: testLogger(t),
		iso: &isolation{mode: IsolationUser, user: &sessionUser{name: "nobody", uid: 65534, gid: 65534}}}
	t.Setenv(api.EnvGitMirrors.Name, filepath.Join(home, "cache", "mirrors"))
	if _, err := w.setupMirrors(); err == nil || !strings.Contains(err.Error(), "run-as user") {
		t.Fatalf("setupMirrors = %v, want a refusal of mirrors in a directory of the run-as user", err)
	}
	t.Setenv(api.EnvGitMirrors.Name, filepath.Join(t.TempDir(), "mirrors"))
	if _, err := w.setupMirrors(); err != nil {
		t.Fatalf("setupMirrors in a directory of the worker's = %v", err)
	}
}
