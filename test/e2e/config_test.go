//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// jsonLogLines checks that p logged in JSON: every line on its output
// that is not the server's one-time admin token notice is a JSON object
// with a time, a level and a message. It returns the messages.
func jsonLogLines(t *testing.T, p *proc) []string {
	t.Helper()
	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(p.out.String()), "\n") {
		if line == "" || !strings.HasPrefix(line, "{") && !strings.HasPrefix(line, "time=") {
			continue // the admin token banner and other plain output
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("%s logged a line that is not JSON: %q", p.name, line)
			continue
		}
		for _, k := range []string{"time", "level", "msg"} {
			if _, ok := rec[k]; !ok {
				t.Errorf("%s log line without %s: %q", p.name, k, line)
			}
		}
		msgs = append(msgs, fmt.Sprint(rec["msg"]))
	}
	return msgs
}

// TestConfigFileOnly starts a server and a worker with nothing but a
// config file each (no flags besides --config, no OUTPOST_ variables):
// the server listens where its file says and logs JSON; the worker, its
// token and server in its file, serves a session to its end.
func TestConfigFileOnly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addr := freeAddr(t)
	dataDir := filepath.Join(dir, "server")
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	serverConf := write("server.yaml", fmt.Sprintf(`# outpost server, configured by this file alone
listen: %s
data-dir: %s
claim-ttl: 120s
reconnect-grace: 30s
log-format: json
log-level: debug
`, addr, dataDir))
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	srv := startExact(t, "server", env, dir, "server", "--config", serverConf)
	url := "http://" + addr
	waitfor.Within(t, 20*time.Second, "server ready on the file's address", func() bool {
		resp, err := (&cluster{}).client().Get(url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	raw, err := os.ReadFile(filepath.Join(dataDir, "admin-token"))
	if err != nil {
		t.Fatalf("the server's data dir is not the file's: %v", err)
	}
	c := &cluster{t: t, url: url, admin: strings.TrimSpace(string(raw)), dataDir: dataDir, addr: addr, server: srv}
	token := setupOutpost(t, c, "cfg")

	workerConf := write("worker.yaml", fmt.Sprintf(`outpost: cfg
server: %s
token: %s
dir: %s
data-dir: %s
isolation: none
once: true
grace-period: 10s
log-format: json
`, url, token, filepath.Join(dir, "workspace"), filepath.Join(dir, "worker")))
	if err := os.MkdirAll(filepath.Join(dir, "workspace"), 0o700); err != nil {
		t.Fatal(err)
	}
	worker := startExact(t, "worker", env, dir, "worker", "start", "--config", workerConf)

	id := createSession(t, c, scriptSession("cfg", "configured by files", execStep("echo configured-by-file")))
	assertFinished(t, c.waitFinal(id, 60*time.Second))
	found := false
	for _, ev := range c.events(id) {
		found = found || ev.Type == api.EventOutput && strings.Contains(ev.Text, "configured-by-file")
	}
	if !found {
		t.Error("the session's output is not on its transcript")
	}
	// --once: the worker exits by itself after the session.
	select {
	case <-worker.done:
		if worker.err != nil {
			t.Errorf("worker exited with %v", worker.err)
		}
	case <-time.After(30 * time.Second):
		t.Error("the worker (once: true in its file) did not exit after its session")
	}

	msgs := jsonLogLines(t, srv)
	if !containsString(msgs, "outpost server listening") {
		t.Errorf("the server's JSON log has no listening line: %q", msgs)
	}
	if wm := jsonLogLines(t, worker); len(wm) == 0 {
		t.Error("the worker logged nothing in JSON")
	}

	// A mistake in the file stops the command before it starts, naming
	// the file and the key.
	bad := write("bad.yaml", "listen: 127.0.0.1:0\nclaim-tll: 300s\n")
	cmdOut := runFail(t, env, "server", "--config", bad)
	if !strings.Contains(cmdOut, bad) || !strings.Contains(cmdOut, `did you mean "claim-ttl"?`) {
		t.Errorf("a typo in the file: %q", cmdOut)
	}
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
