//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/demo"
)

// setupOutpost creates an outpost and a machine token for it through the
// CLI, and returns the token.
func setupOutpost(t *testing.T, c *cluster, name string) string {
	t.Helper()
	out := run(t, c.env(c.admin), "worker", "outpost", "create", name, "--platform", "linux", "--description", "e2e machines")
	if !strings.Contains(out, "outpost_") {
		t.Fatalf("outpost create printed %q, want the new id", out)
	}
	var tok api.CreateTokenResponse
	raw := run(t, c.env(c.admin), "tokens", "create", "--scope", api.ScopeMachine, "--outpost", name, "--name", "e2e-worker", "-o", "json")
	if err := json.Unmarshal([]byte(raw), &tok); err != nil || tok.Secret == "" {
		t.Fatalf("tokens create -o json printed %q: %v", raw, err)
	}
	return tok.Secret
}

// startWorker runs `outpost worker start` on an outpost in its own
// workspace and returns the worker and its workspace. Its sessions run
// without isolation (OUTPOST_WORKER_ISOLATION=none; an --isolation in
// extra wins), so they can clone the repositories tests make in their
// temporary directories, which a sandbox does not show;
// TestWorkerIsolation covers the sandboxes.
func startWorker(t *testing.T, c *cluster, name, token string, extra ...string) (*proc, string) {
	t.Helper()
	dir := t.TempDir()
	args := append([]string{"worker", "start", "--outpost", name, "--dir", dir, "--data-dir", filepath.Join(t.TempDir(), "worker")}, extra...)
	return start(t, "worker", append(c.env(token), api.EnvWorkerIsolation.Name+"=none"), args...), dir
}

// createSession creates a session from a request through the CLI.
func createSession(t *testing.T, c *cluster, req api.CreateSessionRequest) string {
	t.Helper()
	b, _ := json.Marshal(req)
	file := filepath.Join(t.TempDir(), "session.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	var s api.Session
	raw := run(t, c.env(c.admin), "sessions", "create", "--outpost", req.Outpost, "--file", file, "-o", "json")
	if err := json.Unmarshal([]byte(raw), &s); err != nil || s.Metadata.SessionID == "" {
		t.Fatalf("sessions create printed %q: %v", raw, err)
	}
	return s.Metadata.SessionID
}

// TestScriptSessionEndToEnd is the spine: a server, an outpost and a token
// made with the CLI, a worker, and a script session that clones a local git
// repository, runs a command and edits a file.
func TestScriptSessionEndToEnd(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "e2e")
	_, workspace := startWorker(t, c, "e2e", token)

	repo, err := demo.MakeRepo(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	req := demo.Session("e2e", repo)
	req.Secrets = map[string]string{"DEMO_TOKEN": "s3cr3t-value-never-shown"}
	req.Agent.Steps = append(req.Agent.Steps, api.Step{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"echo token=$DEMO_TOKEN ci=$CI"}`)})
	id := createSession(t, c, req)

	s := c.waitFinal(id, 60*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	if s.Status.Capabilities == nil || s.Status.Capabilities.Git == "" {
		t.Errorf("capabilities not reported: %+v", s.Status.Capabilities)
	}
	readme, err := os.ReadFile(filepath.Join(workspace, "repos", "demo", "README.md"))
	if err != nil || !strings.Contains(string(readme), "says bar") {
		t.Fatalf("README on the worker: %q %v", readme, err)
	}

	evs := c.events(id)
	var types []string
	output := ""
	results := map[int64]int{}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: the transcript must be dense and ordered", i, ev.Seq)
		}
		types = append(types, ev.Type)
		switch ev.Type {
		case api.EventOutput:
			output += ev.Text
		case api.EventResult:
			results[ev.CallSeq]++
			if ev.OK == nil || !*ev.OK {
				t.Errorf("call %d failed: %s", ev.CallSeq, ev.Error)
			}
		}
	}
	joined := strings.Join(types, " ")
	for _, want := range []string{api.EventClaim, api.EventRemoteConnected, api.EventCall, api.EventOutput, api.EventResult, api.EventEnd} {
		if !strings.Contains(joined, want) {
			t.Errorf("transcript lacks a %s event: %s", want, joined)
		}
	}
	if len(results) != 6 {
		t.Errorf("results for %d calls, want 6 (clone + 5 steps): %v", len(results), results)
	}
	for seq, n := range results {
		if n != 1 {
			t.Errorf("call %d has %d results", seq, n)
		}
	}
	for _, want := range []string{"running tests", "-This greeting says foo.", "+This greeting says bar.", "ci=1", "token=[REDACTED"} {
		if !strings.Contains(output, want) {
			t.Errorf("output lacks %q:\n%s", want, output)
		}
	}
	if strings.Contains(output, "s3cr3t-value-never-shown") {
		t.Error("a secret reached the transcript")
	}

	logs := run(t, c.env(c.admin), "sessions", "logs", id)
	if !strings.Contains(logs, "running tests") || !strings.Contains(logs, "make test") {
		t.Errorf("sessions logs output:\n%s", logs)
	}
}

// TestSecretSplitAcrossChunks prints a secret in pieces, with pauses, so
// it reaches the remote's redactor across output chunks: the transcript
// never holds it.
func TestSecretSplitAcrossChunks(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "secrets")
	startWorker(t, c, "secrets", token)
	const secret = "tok-9f8e7d6c5b4a39281706"
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "secrets", Title: "split",
		Secrets: map[string]string{"API_TOKEN": secret},
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"printf 'start tok-9f8e7d'; sleep 0.2; printf '6c5b4a3'; sleep 0.2; printf '9281706 end\\n'; echo \"$API_TOKEN\" >&2"}`)},
		}}})
	c.waitFinal(id, 60*time.Second)
	var all strings.Builder
	for _, ev := range c.events(id) {
		b, _ := json.Marshal(ev)
		all.Write(b)
	}
	if strings.Contains(all.String(), secret) || strings.Contains(all.String(), "9f8e7d6c5b4a3") {
		t.Fatalf("the transcript holds the secret:\n%s", all.String())
	}
	if !strings.Contains(all.String(), "REDACTED") {
		t.Fatalf("no redaction marker in the transcript:\n%s", all.String())
	}
}
