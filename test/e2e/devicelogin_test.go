//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

var userCodeLine = regexp.MustCompile(`(?m)^code: ([A-Z]{4}-[A-Z]{4})$`)

// userCode waits for p to print its device login's user code.
func userCode(t *testing.T, p *proc) string {
	t.Helper()
	var code string
	waitfor.Within(t, 30*time.Second, p.name+" to print a user code", func() bool {
		if m := userCodeLine.FindStringSubmatch(p.out.String()); m != nil {
			code = m[1]
			return true
		}
		return false
	})
	return code
}

// noTokenEnv points the CLI at c with no token and no saved login.
func noTokenEnv(t *testing.T, c *cluster) []string {
	return []string{"OUTPOST_SERVER=" + c.url, api.EnvToken.Name + "=", "HOME=" + t.TempDir(), "XDG_CONFIG_HOME=" + t.TempDir(), "DISPLAY=", "WAYLAND_DISPLAY="}
}

// TestDeviceLoginEndToEnd: `outpost login --server` without a token waits
// for a person; approved through the API, it saves a token that later
// commands use; denied, it exits 1 and saves nothing.
func TestDeviceLoginEndToEnd(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	env := noTokenEnv(t, c)
	login := start(t, "login", env, "login", "--server", c.url)
	code := userCode(t, login)
	if !strings.Contains(login.out.String(), c.url+"/ui/device?user_code="+code) {
		t.Errorf("login did not print the verification URL:\n%s", login.out.String())
	}
	var g api.DeviceGrant
	if st := c.api("POST", api.DeviceApprovePath, c.admin, api.DeviceDecisionRequest{UserCode: code}, &g); st != 200 || g.ClientID != api.DeviceClientCLI {
		t.Fatalf("approve: %d %+v", st, g)
	}
	if err := waitExit(t, login, 30*time.Second); err != nil {
		t.Fatalf("login after approval: %v\n%s", err, login.out.String())
	}
	cfgPath := filepath.Join(envValue(env, "XDG_CONFIG_HOME"), "outpost", "config.json")
	fi, err := os.Stat(cfgPath)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("saved login %s: %v %v", cfgPath, fi, err)
	}
	var cfg struct{ Server, Token string }
	b, _ := os.ReadFile(cfgPath)
	if json.Unmarshal(b, &cfg) != nil || cfg.Token == "" || cfg.Token == c.admin || cfg.Server != c.url {
		t.Fatalf("saved login: %s", b)
	}
	// Later commands use the saved login.
	withoutServer := []string{api.EnvToken.Name + "=", "OUTPOST_SERVER=", "HOME=" + envValue(env, "HOME"), "XDG_CONFIG_HOME=" + envValue(env, "XDG_CONFIG_HOME")}
	run(t, withoutServer, "sessions", "list")

	// Denied: exit 1, nothing saved.
	env2 := noTokenEnv(t, c)
	denied := start(t, "login-denied", env2, "login", "--server", c.url, "--no-browser")
	code = userCode(t, denied)
	if st := c.api("POST", api.DeviceDenyPath, c.admin, api.DeviceDecisionRequest{UserCode: code}, nil); st != 200 {
		t.Fatalf("deny: %d", st)
	}
	err = waitExit(t, denied, 30*time.Second)
	if ee, ok := err.(interface{ ExitCode() int }); !ok || ee.ExitCode() != 1 || !strings.Contains(denied.out.String(), "denied") {
		t.Errorf("denied login: %v\n%s", err, denied.out.String())
	}
	if _, err := os.Stat(filepath.Join(envValue(env2, "XDG_CONFIG_HOME"), "outpost", "config.json")); err == nil {
		t.Errorf("a denied login saved a config")
	}
}

// TestWorkerRegistersByApproval: a worker started without a token asks for
// a machine token, a person approves, and it serves; it keeps the token in
// its data dir (0600) and reuses it on the next start, and refuses one
// other users may read.
func TestWorkerRegistersByApproval(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	run(t, c.env(c.admin), "worker", "outpost", "create", "reg", "--platform", "linux")
	env := append(noTokenEnv(t, c), api.EnvWorkerIsolation.Name+"=none")
	dir, data := t.TempDir(), filepath.Join(t.TempDir(), "worker")
	args := []string{"worker", "start", "--outpost", "reg", "--dir", dir, "--data-dir", data}
	w := start(t, "worker", env, args...)
	code := userCode(t, w)
	var g api.DeviceGrant
	if st := c.api("GET", api.DeviceGrantPath+"?user_code="+code, c.admin, nil, &g); st != 200 ||
		g.ClientID != api.DeviceClientWorker || g.Outpost != "reg" || len(g.Scopes) != 1 || g.Scopes[0] != api.ScopeMachine {
		t.Fatalf("the worker's request: %d %+v", st, g)
	}
	if st := c.api("POST", api.DeviceApprovePath, c.admin, api.DeviceDecisionRequest{UserCode: code}, nil); st != 200 {
		t.Fatalf("approve: %d", st)
	}
	waitfor.Within(t, 30*time.Second, "the worker to show in the outpost's workers", func() bool {
		var list api.WorkerList
		return c.api("GET", "/v1/outposts/reg/workers", c.admin, nil, &list) == 200 && list.Total == 1
	})
	serveOne := func(title string) {
		t.Helper()
		id := createSession(t, c, api.CreateSessionRequest{Outpost: "reg", Title: title,
			Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"echo served-by-approval"}`)}}}})
		if s := c.waitFinal(id, 60*time.Second); s.Status.Status != api.StatusExit {
			t.Fatalf("session ended %s: %s", s.Status.Status, s.Status.Reason)
		}
		if out := sessionOutput(t, c, id); !strings.Contains(out, "served-by-approval") {
			t.Errorf("session output %q", out)
		}
	}
	serveOne("first")
	tokFile := filepath.Join(data, "machine-token.json")
	fi, err := os.Stat(tokFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("machine token file: %v %v", fi, err)
	}
	var saved struct {
		Server  string `json:"server"`
		Outpost string `json:"outpost"`
		TokenID string `json:"token_id"`
		Token   string `json:"token"`
	}
	b, _ := os.ReadFile(tokFile)
	if json.Unmarshal(b, &saved) != nil || saved.Token == "" || saved.TokenID == "" || saved.Server != c.url || saved.Outpost != "reg" {
		t.Fatalf("machine token file: %s", b)
	}
	var who api.WhoAmI
	if st := c.api("GET", "/v1/whoami", saved.Token, nil, &who); st != 200 || who.Outpost != "reg" || who.ID != saved.TokenID {
		t.Errorf("the saved token: %d %+v", st, who)
	}
	if err := w.stop(syscall.SIGTERM, 20*time.Second); err != nil {
		t.Fatalf("stop the worker: %v", err)
	}

	// The next start reuses the token: no code, and it serves.
	w2 := start(t, "worker-again", env, args...)
	waitfor.Within(t, 30*time.Second, "the restarted worker to use its saved token", func() bool {
		return strings.Contains(w2.out.String(), "using the machine token saved at registration")
	})
	serveOne("second")
	if userCodeLine.MatchString(w2.out.String()) {
		t.Errorf("the restarted worker asked for approval again:\n%s", w2.out.String())
	}
	if err := w2.stop(syscall.SIGTERM, 20*time.Second); err != nil {
		t.Fatalf("stop the worker: %v", err)
	}

	// A token file others may read is refused.
	if err := os.Chmod(tokFile, 0o644); err != nil {
		t.Fatal(err)
	}
	exit, _, stderr := runExit(t, env, args...)
	if exit == 0 || !strings.Contains(stderr, "can be read by other users") {
		t.Errorf("worker with a 0644 token file: exit %d, %s", exit, stderr)
	}
}

// envValue is the value of key in env.
func envValue(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}
