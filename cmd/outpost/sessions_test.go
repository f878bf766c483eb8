package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

func TestParseSessionFile(t *testing.T) {
	t.Parallel()
	yml := `
outpost: dev
title: build
repos:
  - url: https://example.com/app.git
    name: app
agent:
  kind: script
  steps:
    - tool: exec
      args: {command: "make test", timeout_s: 60}
env: {CI: "1"}
limits: {max_duration_s: 600}
`
	req, err := parseSessionFile("s.yaml", []byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	var args api.ExecArgs
	if req.Outpost != "dev" || req.Agent.Kind != api.AgentScript || len(req.Agent.Steps) != 1 || req.Repos[0].Name != "app" ||
		req.Env["CI"] != "1" || req.Limits.MaxDurationS != 600 {
		t.Fatalf("parsed %+v", req)
	}
	if err := json.Unmarshal(req.Agent.Steps[0].Args, &args); err != nil || args.Command != "make test" || args.TimeoutS != 60 {
		t.Errorf("step args = %s (%v)", req.Agent.Steps[0].Args, err)
	}

	if _, err := parseSessionFile("s.json", []byte(`{"outpost":"dev","agent":{"kind":"llm"}}`)); err != nil {
		t.Errorf("JSON file: %v", err)
	}
	_, err = parseSessionFile("s.yaml", []byte("outpost: dev\ntitel: typo\n"))
	if err == nil || !strings.Contains(err.Error(), "titel") || !strings.HasPrefix(err.Error(), "s.yaml") {
		t.Errorf("unknown field: err = %v", err)
	}
	if _, err := parseSessionFile("s.yaml", []byte("agent: {kind: script, stepz: []}")); err == nil {
		t.Error("unknown nested field accepted")
	}
	// The key's line and the field meant.
	for _, c := range []struct{ file, want string }{
		{"outpost: dev\ntitel: typo\n", `s.yaml is not a valid session file: line 2: unknown key "titel" (did you mean "title"?)`},
		{"outpost: dev\nagent:\n  kind: script\n  step:\n    - tool: exec\n", `s.yaml is not a valid session file: line 4: unknown key "step" (did you mean "steps"?)`},
		{"outpost: dev\nrepos:\n  - name: app\n    reff: main\n", `s.yaml is not a valid session file: line 4: unknown key "reff" (did you mean "ref"?)`},
		{"outpost: dev\nzzzzzzzz: 1\n", `s.yaml is not a valid session file: line 2: unknown key "zzzzzzzz": see docs/api.md`},
	} {
		if _, err := parseSessionFile("s.yaml", []byte(c.file)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.file, err, c.want)
		}
	}
}

func TestSessionsCreateFlagsOverrideFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(path, []byte("outpost: from-file\ntitle: file title\nprompt: file prompt\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var got *SessionsCreateOptions
	tf := newTestFactory(t, nil)
	cmd := NewCmdSessionsCreate(tf.Factory, func(_ context.Context, o *SessionsCreateOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"--file", path, "--outpost", "from-flag", "--title", "flag title"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if r := got.Request; r.Outpost != "from-flag" || r.Title != "flag title" || r.Prompt != "file prompt" {
		t.Errorf("request = %+v", r)
	}
}

func TestSessionsCreatePriority(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(path, []byte("outpost: dev\npriority: 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--file", path}, 5},                    // the file's
		{[]string{"--file", path, "--priority", "9"}, 9}, // the flag wins
		{[]string{"--file", path, "--priority", "0"}, 0}, // even when it is 0
		{[]string{"--outpost", "dev", "--priority", "-2"}, -2},
	} {
		got, _ := mustParse(t, nil, NewCmdSessionsCreate, tc.args...)
		if got.Request.Priority != tc.want {
			t.Errorf("%v: priority %d, want %d", tc.args, got.Request.Priority, tc.want)
		}
	}
}

func TestTranscriptRendering(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC).UnixMilli()
	ok, notOK, zero, two := true, false, 0, 2
	events := []api.Event{
		{Seq: 1, Time: base, Type: api.EventStatus, Status: api.StatusNew, Reason: "Waiting for a machine."},
		{Seq: 2, Time: base + 1000, Type: api.EventClaim, AcceptorID: "worker-a"},
		{Seq: 3, Time: base + 2000, Type: api.EventRemoteConnected, Capabilities: &api.Capabilities{OS: "linux", Arch: "amd64", Hostname: "box"}},
		{Seq: 4, Time: base + 2000, Type: api.EventStatus, Status: api.StatusRunning, StatusDetail: api.DetailWorking},
		{Seq: 5, Type: api.EventCall, CallSeq: 1, Tool: api.ToolExec, Args: json.RawMessage(`{"command":"make test"}`)},
		{Seq: 6, Type: api.EventOutput, CallSeq: 1, Stream: api.StreamStdout, Text: "ok  pkg\nFAIL"},
		{Seq: 7, Type: api.EventResult, CallSeq: 1, OK: &ok, ExitCode: &two},
		{Seq: 8, Type: api.EventCall, CallSeq: 2, Tool: api.ToolExec, Args: json.RawMessage(`{"argv":["echo","a b"],"cwd":"repos/app"}`)},
		{Seq: 9, Type: api.EventOutput, CallSeq: 2, Text: "a b\n"},
		{Seq: 10, Type: api.EventResult, CallSeq: 2, OK: &ok, Value: json.RawMessage(`{"exit_code":0,"duration_ms":3}`)},
		{Seq: 11, Type: api.EventCall, CallSeq: 3, Tool: api.ToolReadFile, Args: json.RawMessage(`{"path":"go.mod"}`)},
		{Seq: 12, Type: api.EventResult, CallSeq: 3, OK: &notOK, Error: "open go.mod: no such file"},
		{Seq: 13, Type: api.EventCall, CallSeq: 4, Tool: api.ToolExec, Args: json.RawMessage(`{"command":"true"}`)},
		{Seq: 14, Type: api.EventResult, CallSeq: 4, OK: &ok, ExitCode: &zero},
		{Seq: 15, Type: api.EventCall, CallSeq: 5, Tool: api.ToolExec, Args: json.RawMessage(`{"command":"sleep 9"}`)},
		{Seq: 16, Type: api.EventResult, CallSeq: 5, Tool: api.ToolExec, OK: &notOK, ExitCode: &two, Error: "exit code 2",
			Value: json.RawMessage(`{"exit_code":2,"timed_out":true}`)},
		{Seq: 17, Type: api.EventCall, CallSeq: 6, Tool: api.ToolReadFile, Args: json.RawMessage(`{"path":"go.mod"}`)},
		{Seq: 18, Type: api.EventResult, CallSeq: 6, OK: &ok, Value: json.RawMessage(`{"content":"module x\n\ngo 1.26\n","size":2150}`)},
		{Seq: 19, Type: api.EventCall, CallSeq: 7, Tool: api.ToolListDir, Args: json.RawMessage(`{}`)},
		{Seq: 20, Type: api.EventResult, CallSeq: 7, OK: &ok, Value: json.RawMessage(`{"entries":[{"name":"a"},{"name":"b"},{"name":"c"}]}`)},
		{Seq: 21, Type: api.EventCall, CallSeq: 8, Tool: api.ToolWriteFile, Args: json.RawMessage(`{"path":"x","content":"hi"}`)},
		{Seq: 22, Type: api.EventResult, CallSeq: 8, OK: &ok, Value: json.RawMessage(`{"bytes":2}`)},
		{Seq: 23, Type: api.EventCall, CallSeq: 9, Tool: api.ToolBrowserNavigate, Args: json.RawMessage(`{"url":"http://127.0.0.1:8080/"}`)},
		{Seq: 24, Type: api.EventResult, CallSeq: 9, OK: &ok, Value: json.RawMessage(`{"url":"http://127.0.0.1:8080/login","title":"Sign in"}`)},
		{Seq: 25, Type: api.EventCall, CallSeq: 10, Tool: api.ToolGitCommit, Args: json.RawMessage(`{"repo":"app","message":"m","all":true}`)},
		{Seq: 26, Type: api.EventResult, CallSeq: 10, OK: &ok, Value: json.RawMessage(`{"commit":"1a2b3c4d5e6f","branch":"main"}`)},
		{Seq: 27, Type: api.EventCall, CallSeq: 11, Tool: api.ToolGitClone, Args: json.RawMessage(`{"url":"/srv/app.git","name":"app"}`)},
		{Seq: 28, Type: api.EventResult, CallSeq: 11, OK: &ok, Value: json.RawMessage(`{"path":"repos/app","head":"9f8e7d6c5b4a"}`)},
		{Seq: 29, Type: api.EventCall, CallSeq: 12, Tool: api.ToolBrowserClick, Args: json.RawMessage(`{"selector":"#go"}`)},
		{Seq: 30, Type: api.EventResult, CallSeq: 12, OK: &ok, Value: json.RawMessage(`{}`)},
		{Seq: 31, Time: base + 9000, Type: api.EventEnd, Status: api.StatusExit, StatusDetail: api.DetailFinished, Reason: "The script finished."},
	}
	var out bytes.Buffer
	p := newTranscriptPrinter(&out, time.UTC)
	for _, ev := range events {
		if err := p.Print(ev); err != nil {
			t.Fatal(err)
		}
	}
	want := `[15:04:05] status new: Waiting for a machine.
[15:04:06] claimed by worker-a
[15:04:07] remote connected: linux/amd64 on box
[15:04:07] status running (working)
$ make test
ok  pkg
FAIL
[exit 2]
$ echo 'a b'    (in repos/app)
a b
[exit 0]
> read_file {"path":"go.mod"}
[error] open go.mod: no such file
$ true
[exit 0]
$ sleep 9
[exit 2, timed out]
> read_file {"path":"go.mod"}
[ok] 3 lines, 2.1 KiB
> list_dir
[ok] 3 entries
> write_file {"path":"x","content":"hi"}
[ok] wrote 2 B
> browser_navigate {"url":"http://127.0.0.1:8080/"}
[ok] "Sign in" at http://127.0.0.1:8080/login
> git_commit {"repo":"app","message":"m","all":true}
[ok] commit 1a2b3c4 on main
> git_clone {"url":"/srv/app.git","name":"app"}
[ok] repos/app at 9f8e7d6
> browser_click {"selector":"#go"}
[ok]
[15:04:14] session ended: exit (finished): The script finished.
`
	if out.String() != want {
		t.Errorf("transcript:\n%s\nwant:\n%s", out.String(), want)
	}
}
