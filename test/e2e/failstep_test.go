//go:build linux

package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// runExit runs the binary to completion and returns its exit code and
// output.
func runExit(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("outpost %s: %v", strings.Join(args, " "), err)
	}
	return code, out.String(), errOut.String()
}

// TestFailedStepFailsTheRun is a CI job: `sessions create --follow` of a
// script whose second step fails. The script stops there (step 3 never
// runs), the session ends in error naming the step, and the command exits
// 1, as `sessions logs -f` does afterwards; plain `sessions logs` exits 0.
func TestFailedStepFailsTheRun(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "ci")
	startWorker(t, c, "ci", token)

	file := filepath.Join(t.TempDir(), "ci.yaml")
	yml := `outpost: ci
title: a failing build
agent:
  kind: script
  steps:
    - {tool: exec, args: {command: "echo step-one-ran"}}
    - {tool: exec, args: {command: "echo step-two-ran; exit 4"}}
    - {tool: exec, args: {command: "echo step-three-ran"}}
`
	if err := os.WriteFile(file, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runExit(t, c.env(c.admin), "sessions", "create", "--file", file, "--follow")
	if code != 1 {
		t.Fatalf("sessions create --follow: exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	const reason = `Step 2 of 3 (exec "echo step-two-ran; exit 4") failed: exit code 4. The script stopped there; step 3 did not run.`
	for _, want := range []string{"step-one-ran", "step-two-ran", "[exit 4]", "session ended: error (error): " + reason} {
		if !strings.Contains(out, want) {
			t.Errorf("transcript lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "step-three-ran") {
		t.Errorf("step 3 ran:\n%s", out)
	}
	if !strings.Contains(errOut, "error: session ") || !strings.Contains(errOut, " failed: "+reason) {
		t.Errorf("stderr %q does not name the failed step", errOut)
	}

	var sessions api.SessionList
	if code := c.api("GET", "/v1/sessions?outpost=ci", c.admin, nil, &sessions); code != 200 || len(sessions.Items) != 1 {
		t.Fatalf("list sessions: %d %+v", code, sessions)
	}
	s := c.waitFinal(sessions.Items[0].Metadata.SessionID, 10*time.Second)
	id := s.Metadata.SessionID
	if s.Status.Status != api.StatusError || s.Status.StatusDetail != api.DetailError || s.Status.Reason != reason {
		t.Errorf("session status %+v", s.Status)
	}
	for _, ev := range c.events(id) {
		if ev.Type == api.EventCall && ev.CallSeq > 2 {
			t.Errorf("call %d was recorded after the failed step: %+v", ev.CallSeq, ev)
		}
	}

	if code, _, errOut := runExit(t, c.env(c.admin), "sessions", "logs", "-f", id); code != 1 || !strings.Contains(errOut, reason) {
		t.Errorf("sessions logs -f: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := runExit(t, c.env(c.admin), "sessions", "logs", id); code != 0 {
		t.Errorf("sessions logs: exit %d, stderr %q", code, errOut)
	}

	// Rerun: a new session with the same spec fails the same way, and
	// --follow exits 1 as create --follow did.
	code, out, errOut = runExit(t, c.env(c.admin), "sessions", "rerun", id, "--follow")
	if code != 1 || !strings.Contains(out, "session ended: error (error): "+reason) || !strings.Contains(errOut, ", a rerun of "+id+";") {
		t.Errorf("sessions rerun --follow: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if code := c.api("GET", "/v1/sessions?outpost=ci", c.admin, nil, &sessions); code != 200 || len(sessions.Items) != 2 ||
		sessions.Items[0].Spec.Title != "a failing build" || sessions.Items[0].Metadata.SessionID == id {
		t.Errorf("after the rerun: %d %+v", code, sessions.Items)
	}
	if code, _, errOut := runExit(t, c.env(c.admin), "sessions", "rerun", "ses_nope"); code == 0 || !strings.Contains(errOut, "ses_nope") {
		t.Errorf("rerun of an unknown session: exit %d, stderr %q", code, errOut)
	}
}
