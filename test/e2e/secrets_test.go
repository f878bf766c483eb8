//go:build linux

package e2e

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// getRaw returns the status and body of a GET on the cluster, signed in by
// bearer token, or with the web UI's cookie when cookie is set.
func getRaw(t *testing.T, c *cluster, path string, cookie bool, header ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", c.url+path, nil)
	if cookie {
		req.AddCookie(&http.Cookie{Name: "outpost_token", Value: c.admin})
	} else {
		req.Header.Set("Authorization", "Bearer "+c.admin)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// mustNotShow fails t when text holds any of values.
func mustNotShow(t *testing.T, where, text string, values ...string) {
	t.Helper()
	for _, v := range values {
		if strings.Contains(text, v) {
			t.Errorf("%s shows a secret's value (%s…):\n%s", where, v[:6], text)
		}
	}
}

// TestSecretInCallArguments: a script whose steps hold a secret's value
// in their own arguments, run by a real worker. The commands get the value
// (their output proves it), while the events API, the SSE stream,
// `outpost sessions logs` (also -f), the session views, the web pages and
// the server's log show it redacted. A second secret, used only by name,
// is not in the database files at all.
func TestSecretInCallArguments(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "sec")
	const literal = "hunter2-e2e-literal-value" // 25 characters
	const byName = "tok-only-by-name-5e6f7a8b9c"
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "sec", Title: "deploy " + literal,
		Secrets: map[string]string{"API_TOKEN": literal, "BY_NAME": byName},
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			execStep("printf %s " + literal + " | wc -c"),
			{Tool: api.ToolExec, Args: json.RawMessage(`{"argv":["sh","-c","test \"$1\" = \"$API_TOKEN\" && echo arg-is-the-secret","sh","` + literal + `"]}`)},
			execStep(`printf %s "$BY_NAME" | wc -c`),
		}}})
	follower := start(t, "follower", c.env(c.admin), "sessions", "logs", "-f", id)
	sse := make(chan string, 1)
	go func() {
		_, body := getRaw(t, c, "/v1/sessions/"+id+"/events", false, "Accept", "text/event-stream")
		sse <- body
	}()
	waitfor.Within(t, 10*time.Second, "the follower to print the queued status", func() bool {
		return strings.Contains(follower.out.String(), "status new")
	})
	startWorker(t, c, "sec", token)
	if s := c.waitFinal(id, 60*time.Second); s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}

	output := map[int64]string{}
	for _, ev := range c.events(id) {
		if ev.Type == api.EventOutput {
			output[ev.CallSeq] += ev.Text
		}
	}
	for seq, want := range map[int64]string{1: "25", 2: "arg-is-the-secret", 3: "27"} {
		if got := strings.TrimSpace(output[seq]); got != want {
			t.Errorf("call %d printed %q, want %q", seq, got, want)
		}
	}

	select {
	case <-follower.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the follower did not end with the session")
	}
	logs := run(t, c.env(c.admin), "sessions", "logs", id)
	for where, text := range map[string]string{"sessions logs": logs, "sessions logs -f": follower.out.String()} {
		mustNotShow(t, where, text, literal, byName)
		if !strings.Contains(text, "$ printf %s [REDACTED:API_TOKEN] | wc -c") {
			t.Errorf("%s lacks the redacted command:\n%s", where, text)
		}
	}
	select {
	case body := <-sse:
		mustNotShow(t, "the SSE stream", body, literal, byName)
		if !strings.Contains(body, "[REDACTED:API_TOKEN]") {
			t.Errorf("the SSE stream lacks the redacted calls:\n%s", body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the SSE stream did not end with the session")
	}
	for _, path := range []string{"/v1/sessions/" + id + "/events", "/v1/sessions/" + id, "/v1/sessions"} {
		code, body := getRaw(t, c, path, false)
		if code != 200 {
			t.Fatalf("GET %s: %d", path, code)
		}
		mustNotShow(t, "GET "+path, body, literal, byName)
	}
	code, page := getRaw(t, c, "/ui/sessions/"+id, true)
	if code != 200 || !strings.Contains(page, "[REDACTED:API_TOKEN]") {
		t.Fatalf("the session's web page: %d, without the redacted call:\n%s", code, page)
	}
	mustNotShow(t, "the web page", page, literal, byName)
	mustNotShow(t, "the server's log", c.server.out.String(), literal, byName)

	// The database: the secrets column is sealed, and a secret used only by
	// name is in neither the database file nor its log.
	db, err := sql.Open("sqlite", filepath.Join(c.dataDir, "outpost.db")+"?mode=ro&_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var sealedText string
	if err := db.QueryRowContext(t.Context(), `SELECT secrets_json FROM sessions WHERE id = ?`, id).Scan(&sealedText); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sealedText, "v1:") {
		t.Errorf("the secrets column is not sealed: %.40q", sealedText)
	}
	for _, f := range []string{"outpost.db", "outpost.db-wal"} {
		b, err := os.ReadFile(filepath.Join(c.dataDir, f))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(byName)) {
			t.Errorf("%s holds the value of a secret used only by name", f)
		}
	}
	if fi, err := os.Stat(filepath.Join(c.dataDir, "secret-key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the server's key file: %v, %v", fi, err)
	}
}

// TestSecretInModelCalls: an llm session whose prompt holds a secret's
// value and whose model, behind an OpenAI-compatible server on loopback,
// writes it into a tool call. The command gets the value; the transcript
// shows it redacted; and no request that reaches the model provider
// carries it.
func TestSecretInModelCalls(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-e2e-model-value" // 23 characters
	var sawResult string
	fake := newFakeOpenAI(t,
		func(req map[string]any) map[string]any {
			return toolCall("call_1", "exec", `{"command":"printf %s '`+secret+`' | wc -c"}`)
		},
		func(req map[string]any) map[string]any {
			sawResult, _ = lastMessage(req)["content"].(string)
			return say("The value " + secret + " has 23 characters.")
		},
	)
	c := startClusterEnv(t, []string{"OUTPOST_LLM_PROVIDER=openai", "OUTPOST_LLM_BASE_URL=" + fake.srv.URL + "/v1",
		"OUTPOST_LLM_API_KEY=sk-test", "OUTPOST_LLM_MODEL=fake-model"})
	token := setupOutpost(t, c, "llmsec")
	startWorker(t, c, "llmsec", token)
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "llmsec", Prompt: "Count the characters of " + secret + ".",
		Secrets: map[string]string{"API_TOKEN": secret}, Agent: api.Agent{Kind: api.AgentLLM}})
	if s := c.waitFinal(id, 60*time.Second); s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	if !strings.Contains(sawResult, "23") {
		t.Errorf("the model saw the result %q, want the length 23", sawResult)
	}
	_, events := getRaw(t, c, "/v1/sessions/"+id+"/events", false)
	mustNotShow(t, "the events", events, secret)
	if !strings.Contains(events, "Count the characters of [REDACTED:API_TOKEN].") || !strings.Contains(events, "The value [REDACTED:API_TOKEN] has 23") {
		t.Errorf("the messages are not on the transcript, redacted:\n%s", events)
	}
	logs := run(t, c.env(c.admin), "sessions", "logs", id)
	mustNotShow(t, "sessions logs", logs, secret)
	reqs := fake.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	for _, req := range reqs {
		b, _ := json.Marshal(req)
		mustNotShow(t, "a request to the model provider", string(b), secret)
	}
	mustNotShow(t, "the server's log", c.server.out.String(), secret)
}
