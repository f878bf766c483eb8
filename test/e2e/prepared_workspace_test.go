//go:build linux

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// TestSessionWorkerKeepsPreparedWorkspace: an orchestrator prepares the
// directory of a session (a checked-out repository under repos/, a
// dotfile, a file at the top) and starts `worker start --session` there,
// once as the public orchestrators do (--session S --pool O --acceptor-id
// A, the older spelling of --outpost, with a machine token) and once in
// direct-serve mode (a connect token only). Each session runs in that
// directory and sees the prepared files, and afterwards every prepared
// file is still there with its content, and so is what the sessions made.
func TestSessionWorkerKeepsPreparedWorkspace(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "prepared")
	const acceptor = "orchestrator-7"

	ws, home := t.TempDir(), t.TempDir()
	repo := filepath.Join(ws, "repos", "app")
	prepared := map[string]string{
		"checkpoint.txt":      "restored checkpoint\n",
		".tool-config":        "dotfile from the orchestrator\n",
		"repos/app/README.md": "checked-out repository\n",
		"repos/app/wip.txt":   "uncommitted work\n",
	}
	for name, content := range prepared {
		if name == "repos/app/wip.txt" {
			continue // written after the commit, so it stays untracked
		}
		writePrepared(t, filepath.Join(ws, name), content)
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"add", "README.md"},
		{"-c", "user.name=e2e", "-c", "user.email=e2e@example.com", "commit", "-q", "-m", "prepared"},
	} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	writePrepared(t, filepath.Join(ws, "repos/app/wip.txt"), prepared["repos/app/wip.txt"])

	session := func(name string) string {
		return createSession(t, c, api.CreateSessionRequest{
			Outpost: "prepared", Title: name,
			Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
				execStep(`pwd; cat checkpoint.txt .tool-config repos/app/README.md repos/app/wip.txt; echo ` + name + ` > made-by-` + name + `.txt`),
			}},
		})
	}
	base := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, api.EnvWorkerIsolation.Name + "=none"}
	check := func(id string, w *proc) {
		t.Helper()
		if err := waitExit(t, w, 90*time.Second); err != nil {
			t.Fatalf("worker of %s exit: %v\n%s", id, err, w.out.String())
		}
		requireFinished(t, c.waitFinal(id, 10*time.Second))
		out := sessionOutput(t, c, id)
		want := ws + "\n" + prepared["checkpoint.txt"] + prepared[".tool-config"] + prepared["repos/app/README.md"] + prepared["repos/app/wip.txt"]
		if !strings.Contains(out, want) {
			t.Errorf("session %s did not run in the prepared directory with its files; output:\n%s\nwant:\n%s", id, out, want)
		}
	}

	// As the public orchestrators start it: they claimed the session under
	// their acceptor id and pass the machine token.
	first := session("first")
	claimAs(t, c, first, token, acceptor)
	w := startExact(t, "worker", append(base, "DEVIN_API_URL="+c.url, "DEVIN_OUTPOSTS_TOKEN="+token), ws,
		"worker", "start", "--session", first, "--pool", "prepared", "--acceptor-id", acceptor)
	check(first, w)
	if !strings.Contains(w.out.String(), "--pool is deprecated; use --outpost") {
		t.Errorf("no warning naming --outpost for --pool:\n%s", w.out.String())
	}

	// Direct-serve, in the same directory the first session left.
	second := session("second")
	e := claimAs(t, c, second, token, acceptor)
	w = startExact(t, "worker", append(base,
		"DEVIN_REMOTE_SESSION_TOKEN="+e.Status.ConnectToken, "DEVIN_OUTPOST_GATEWAY_URL="+e.Status.GatewayURL), ws,
		"worker", "start", "--session", second)
	check(second, w)

	prepared["made-by-first.txt"] = "first\n"
	prepared["made-by-second.txt"] = "second\n"
	for name, want := range prepared {
		got, err := os.ReadFile(filepath.Join(ws, name))
		if err != nil || string(got) != want {
			t.Errorf("%s after the sessions: %q %v, want %q", name, got, err, want)
		}
	}
	if out, err := exec.Command("git", "-C", repo, "log", "--format=%s").CombinedOutput(); err != nil || string(out) != "prepared\n" {
		t.Errorf("the prepared repository's history: %q %v", out, err)
	}
}

// writePrepared writes a file of a prepared workspace, making its
// directory.
func writePrepared(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
