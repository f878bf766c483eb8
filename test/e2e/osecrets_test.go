//go:build linux

package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// TestOutpostSecretsReachSessions stores a secret on an outpost with
// `outpost secrets set` (the value on standard input), and runs a session
// that names it in use_secrets on a real worker: the command sees the
// value, a secret the session gives itself under the same name wins over
// the outpost's, the output shows it redacted, and no API answer, CLI
// output, web page, server log or database file shows the stored value.
func TestOutpostSecretsReachSessions(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "osec")
	const stored = "stored-e2e-outpost-value-7c1d" // 29 characters
	const shadowed = "outpost-shadowed-value-4b2e"
	setSecret := func(name, value string) {
		t.Helper()
		cmd := exec.Command(binary, "secrets", "set", "--outpost", "osec", name)
		cmd.Env = append(os.Environ(), c.env(c.admin)...)
		cmd.Stdin = strings.NewReader(value + "\n")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("secrets set %s: %v\n%s%s", name, err, stdout.String(), stderr.String())
		}
		mustNotShow(t, "secrets set", stdout.String()+stderr.String(), value)
	}
	setSecret("STORED_KEY", stored)
	setSecret("SHADOWED", shadowed)

	list := run(t, c.env(c.admin), "secrets", "list", "--outpost", "osec")
	if !strings.Contains(list, "STORED_KEY") || !strings.Contains(list, "SHADOWED") {
		t.Errorf("secrets list:\n%s", list)
	}
	mustNotShow(t, "secrets list", list, stored, shadowed)

	id := createSession(t, c, api.CreateSessionRequest{Outpost: "osec", Title: "uses stored secrets",
		UseSecrets: []string{"STORED_KEY", "SHADOWED"},
		Secrets:    map[string]string{"SHADOWED": "own-session-value"},
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			execStep(`printf %s "$STORED_KEY" | wc -c`),
			execStep(`echo "v=$STORED_KEY"`),
			execStep(`test "$SHADOWED" = own-session-value && echo own-wins`),
		}}})
	startWorker(t, c, "osec", token)
	if s := c.waitFinal(id, 60*time.Second); s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	output := map[int64]string{}
	for _, ev := range c.events(id) {
		if ev.Type == api.EventOutput {
			output[ev.CallSeq] += ev.Text
		}
	}
	for seq, want := range map[int64]string{1: "29", 2: "v=[REDACTED:STORED_KEY]", 3: "own-wins"} {
		if got := strings.TrimSpace(output[seq]); got != want {
			t.Errorf("call %d printed %q, want %q", seq, got, want)
		}
	}

	for _, path := range []string{"/v1/outposts/osec/secrets", "/v1/outposts/osec/secrets/STORED_KEY",
		"/v1/sessions/" + id, "/v1/sessions/" + id + "/events", "/v1/sessions"} {
		code, body := getRaw(t, c, path, false)
		if code != 200 {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		mustNotShow(t, "GET "+path, body, stored, shadowed)
	}
	logs := run(t, c.env(c.admin), "sessions", "logs", id)
	mustNotShow(t, "sessions logs", logs, stored, shadowed)
	code, page := getRaw(t, c, "/ui/outposts/osec", true)
	if code != 200 || !strings.Contains(page, "STORED_KEY") {
		t.Errorf("the outpost's web page: %d, without the secret's name", code)
	}
	mustNotShow(t, "the outpost's web page", page, stored, shadowed)
	mustNotShow(t, "the server's log", c.server.out.String(), stored, shadowed)
	for _, f := range []string{"outpost.db", "outpost.db-wal"} {
		b, err := os.ReadFile(filepath.Join(c.dataDir, f))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(stored)) || bytes.Contains(b, []byte(shadowed)) {
			t.Errorf("%s holds a stored secret's value in the clear", f)
		}
	}

	// A name the outpost lacks is refused with the way to store it.
	if got := c.api("POST", "/v1/sessions", c.admin, api.CreateSessionRequest{Outpost: "osec",
		Agent: api.Agent{Kind: api.AgentScript}, UseSecrets: []string{"NOT_STORED"}}, nil); got != 400 {
		t.Errorf("use_secrets with a missing name: %d, want 400", got)
	}
	run(t, c.env(c.admin), "secrets", "delete", "--outpost", "osec", "STORED_KEY")
	list = run(t, c.env(c.admin), "secrets", "list", "--outpost", "osec")
	if strings.Contains(list, "STORED_KEY") {
		t.Errorf("after delete, secrets list:\n%s", list)
	}
}
