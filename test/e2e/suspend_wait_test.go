//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// runBoth runs the binary and returns its standard output and error and
// how it exited.
func runBoth(t *testing.T, env []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// startLongCall runs a long command as the session's outside agent, in
// the background; the returned channel gets its result.
func startLongCall(t *testing.T, c *cluster, id, command string) <-chan *api.ToolResult {
	t.Helper()
	done := make(chan *api.ToolResult, 1)
	cl := adminClient(t, c)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		res, err := cl.Sessions.CallTool(ctx, id, api.ToolExec, api.ExecArgs{Command: command})
		if err != nil {
			res = &api.ToolResult{Error: err.Error()}
		}
		done <- res
	}()
	waitfor.Within(t, 30*time.Second, "the call to run", func() bool {
		for _, ev := range c.events(id) {
			if ev.Type == api.EventCall && strings.Contains(string(ev.Args), command) {
				return true
			}
		}
		return false
	})
	return done
}

// TestSuspendWhileACallRuns follows docs/cli.md's `sessions suspend` on a
// session whose command runs: the CLI says what it waits for; --wait gives
// up and withdraws the suspend (the session goes on running, the command
// too); --interrupt stops the command, whose result says it was
// interrupted, and suspends; the API's asynchronous suspend answers 202
// with a Location that follows it to suspended; --no-wait returns at once.
func TestSuspendWhileACallRuns(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "longcalls")
	_, workspace := startWorker(t, c, "longcalls", token)
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "longcalls", Title: "suspend while a call runs", Agent: api.Agent{Kind: api.AgentExternal}})
	waitfor.Within(t, 60*time.Second, "the session to run", func() bool { return c.session(id).Status.Status == api.StatusRunning })
	env := c.env(c.admin)

	// --wait: the suspend gives up, the session and its command go on.
	result := startLongCall(t, c, id, "sleep 60; echo slept")
	start := time.Now()
	_, stderr, err := runBoth(t, env, "sessions", "suspend", id, "--wait", "2s")
	if err == nil {
		t.Fatalf("sessions suspend --wait 2s succeeded while a call ran")
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("sessions suspend --wait 2s took %s", took)
	}
	for _, want := range []string{"waiting for the running call to finish: exec `sleep 60; echo slept` (running ", "still running after 2s", "the suspend is withdrawn", "--interrupt"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("sessions suspend --wait 2s lacks %q:\n%s", want, stderr)
		}
	}
	if s := c.session(id); s.Status.Status != api.StatusRunning {
		t.Fatalf("after a withdrawn suspend the session is %s", s.Status.Status)
	}
	var p api.SuspendProgress
	if code := c.api("GET", "/v1/sessions/"+id+"/suspend", c.admin, nil, &p); code != 200 || p.State != api.SuspendFailed || !strings.Contains(p.Error, "withdrawn") {
		t.Errorf("GET suspend = %d %+v, want the failed suspend", code, p)
	}

	// --interrupt: the command stops, its result says why, the session
	// is suspended.
	_, stderr, err = runBoth(t, env, "sessions", "suspend", id, "--interrupt")
	if err != nil {
		t.Fatalf("sessions suspend --interrupt: %v\n%s", err, stderr)
	}
	// The first answer tells of the call as the suspend found it, however
	// soon the interrupt stops it.
	if !strings.Contains(stderr, "stopping the running call: exec `sleep 60; echo slept`") {
		t.Errorf("sessions suspend --interrupt did not say what it does:\n%s", stderr)
	}
	if s := c.session(id); s.Status.Status != api.StatusSuspended {
		t.Fatalf("after suspend --interrupt the session is %s", s.Status.Status)
	}
	select {
	case res := <-result:
		if res.OK || !strings.HasPrefix(res.Error, "Interrupted: the session was suspended") || strings.Contains(res.Output, "slept") {
			t.Errorf("the interrupted call's result = %+v", res)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the interrupted call never answered")
	}
	var interrupted bool
	for _, ev := range c.events(id) {
		if ev.Type == api.EventResult && ev.Tool == api.ToolExec && strings.HasPrefix(ev.Error, "Interrupted: ") {
			interrupted = true
		}
	}
	if !interrupted {
		t.Errorf("the transcript does not record the interrupted call")
	}

	// The API's asynchronous suspend: 202, then Location says suspended.
	run(t, env, "sessions", "resume", id)
	waitfor.Within(t, 90*time.Second, "the session to run again", func() bool { return c.session(id).Status.Status == api.StatusRunning })
	// The transcript records a call just before it is sent: the file
	// says it runs, so the suspend finds it.
	result = startLongCall(t, c, id, "touch async-started; sleep 45")
	waitfor.Within(t, 30*time.Second, "the command to start", func() bool {
		_, err := os.Stat(filepath.Join(workspace, "async-started"))
		return err == nil
	})
	req, _ := http.NewRequest("POST", c.url+"/v1/sessions/"+id+"/suspend", strings.NewReader(`{"interrupt": true}`))
	req.Header.Set("Authorization", "Bearer "+c.admin)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Prefer", "respond-async")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var accepted api.SuspendProgress
	_ = json.NewDecoder(resp.Body).Decode(&accepted)
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusAccepted || loc != "/v1/sessions/"+id+"/suspend" || !accepted.Interrupt ||
		accepted.State != api.SuspendWaiting || len(accepted.Calls) != 1 || accepted.Calls[0].Target != "touch async-started; sleep 45" {
		t.Fatalf("async suspend = %d, Location %q, %+v", resp.StatusCode, loc, accepted)
	}
	waitfor.Within(t, 60*time.Second, "the Location to say suspended", func() bool {
		var p api.SuspendProgress
		return c.api("GET", loc, c.admin, nil, &p) == 200 && p.State == api.SuspendDone
	})
	<-result

	// --no-wait returns once the suspend has begun; no call runs, so
	// the snapshot is what comes.
	run(t, env, "sessions", "resume", id)
	waitfor.Within(t, 90*time.Second, "the session to run again", func() bool { return c.session(id).Status.Status == api.StatusRunning })
	out := run(t, env, "sessions", "suspend", id, "--no-wait")
	if !strings.Contains(out, "is being suspended (taking the workspace snapshot)") {
		t.Errorf("sessions suspend --no-wait printed %q", out)
	}
	waitfor.Within(t, 60*time.Second, "the session to be suspended", func() bool { return c.session(id).Status.Status == api.StatusSuspended })
}
