//go:build linux

package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// doctorRun runs `outpost doctor` with env and args and returns its exit
// status, standard output and standard error.
func doctorRun(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"doctor", "--dir", t.TempDir()}, args...)...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("run outpost doctor: %v", err)
	return 0, "", ""
}

// TestDoctor runs `outpost doctor` against a real server: a worker's
// token passes (exit 0, its scopes and outpost in the JSON), a bad token
// fails on the token line, and no server fails on the server line.
func TestDoctor(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "doctor-boxes")
	base := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "XDG_CONFIG_HOME=" + t.TempDir(), "OUTPOST_SERVER=" + c.url}

	code, out, stderr := doctorRun(t, append(base, "OUTPOST_TOKEN="+token), "--outpost", "doctor-boxes", "-o", "json")
	var r struct {
		OK     bool `json:"ok"`
		Checks []struct {
			Name, Status, Detail string
			Required             bool
		} `json:"checks"`
		Server struct {
			URL         string      `json:"url"`
			ClockSkewMS *int64      `json:"clock_skew_ms"`
			Token       *api.WhoAmI `json:"token"`
		} `json:"server"`
		Machine struct {
			OS  string `json:"os"`
			Git string `json:"git"`
		} `json:"machine"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("doctor -o json printed %q: %v (stderr %q)", out, err, stderr)
	}
	if code != 0 || !r.OK {
		t.Fatalf("a worker's token: exit %d, ok %v: %s %s", code, r.OK, out, stderr)
	}
	status := map[string]string{}
	for _, ch := range r.Checks {
		status[ch.Name] = ch.Status
	}
	for name, want := range map[string]string{"git": "ok", "workspace": "ok", "server": "ok", "tls": "skip", "clock": "ok", "token": "ok", "outpost": "ok"} {
		if status[name] != want {
			t.Errorf("check %s is %q, want %q", name, status[name], want)
		}
	}
	if r.Server.URL != c.url || r.Server.ClockSkewMS == nil || r.Server.Token == nil || r.Server.Token.Name != "e2e-worker" ||
		r.Server.Token.Outpost != "doctor-boxes" || !api.HasScope(r.Server.Token.Scopes, api.ScopeMachine) || r.Machine.OS == "" || r.Machine.Git == "" {
		t.Errorf("the report: %s", out)
	}

	code, out, stderr = doctorRun(t, append(base, "OUTPOST_TOKEN=opt_not-a-real-token"))
	if code != 1 || !strings.Contains(out, "FAIL  token       The API token is not valid.") || !strings.Contains(out, "ok    server ") ||
		!strings.Contains(stderr, "required check failed") {
		t.Errorf("a bad token: exit %d:\n%s%s", code, out, stderr)
	}

	code, out, _ = doctorRun(t, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "XDG_CONFIG_HOME=" + t.TempDir(),
		"OUTPOST_SERVER=http://" + freeAddr(t), "OUTPOST_TOKEN=" + token})
	if code != 1 || !strings.Contains(out, "FAIL  server      cannot reach http://127.0.0.1:") || !strings.Contains(out, "connection refused") ||
		!strings.Contains(out, "skip  token       not checked: the server cannot be reached") {
		t.Errorf("no server: exit %d:\n%s", code, out)
	}
}
