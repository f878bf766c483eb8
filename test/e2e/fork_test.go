//go:build linux

package e2e

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/demo"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// TestForkRunningSession: an outside agent's session with uncommitted
// files in its repository and a file outside it is forked into three from
// the CLI while it runs. Each fork runs on its own machine with those
// files, the uncommitted change still uncommitted, and its transcript
// opens with the parent's (the call that wrote them) and the fork's new
// instruction; the family shows in the API. The parent goes on: still
// running, its files as they were, blind to a file a fork writes. A bad
// count is refused with a 400, a suspended session forks from its
// snapshot, and an ended one is refused with a 409 that says why.
func TestForkRunningSession(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "fork")
	startOrchestrator(t, c, "fork", token, t.TempDir(), "--backend", "process", "--max-concurrent", "6")
	repo, err := demo.MakeRepo(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	parent := createSession(t, c, api.CreateSessionRequest{Outpost: "fork", Title: "fork me",
		Repos: []api.Repo{{URL: "file://" + repo, Name: "app"}},
		Agent: api.Agent{Kind: api.AgentExternal}})
	waitfor.Within(t, 60*time.Second, "the session to run", func() bool { return c.session(parent).Status.Status == api.StatusRunning })
	externalExec(t, c, parent, "echo changed-before-the-fork >> repos/app/README.md && echo untracked > repos/app/new.txt && "+
		"mkdir -p notes && echo outside-the-repo > notes/todo.txt")
	parentEvents := c.events(parent)

	out := run(t, c.env(c.admin), "sessions", "fork", parent, "--count", "3", "--prompt", "Try the other approach.")
	children := strings.Fields(out)
	if len(children) != 3 {
		t.Fatalf("sessions fork printed %q, want three ids", out)
	}
	if s := c.session(parent); s.Status.Status != api.StatusRunning {
		t.Fatalf("the parent after the fork: %+v", s.Status)
	}
	check := "cat repos/app/README.md repos/app/new.txt notes/todo.txt && git -C repos/app status --porcelain"
	for _, id := range children {
		waitfor.Within(t, 90*time.Second, "fork "+id+" to run", func() bool { return c.session(id).Status.Status == api.StatusRunning })
		s := c.session(id)
		if s.Spec.ForkedFrom != parent || s.Spec.Outpost != "fork" || s.Spec.Agent.Kind != api.AgentExternal {
			t.Errorf("fork %s spec: forked_from %q, outpost %q, agent %q", id, s.Spec.ForkedFrom, s.Spec.Outpost, s.Spec.Agent.Kind)
		}
		got := externalExec(t, c, id, check)
		for _, want := range []string{"changed-before-the-fork", "untracked", "outside-the-repo", " M README.md", "?? new.txt"} {
			if !strings.Contains(got, want) {
				t.Errorf("fork %s's workspace lacks %q:\n%s", id, want, got)
			}
		}
		checkForkTranscript(t, c.events(id), parentEvents, parent)
	}

	// A file one fork writes is its own.
	externalExec(t, c, children[0], "echo mine > fork-only.txt")
	got := externalExec(t, c, parent, check+" && ls")
	if strings.Contains(got, "fork-only.txt") {
		t.Errorf("the parent sees a fork's file:\n%s", got)
	}
	for _, want := range []string{"changed-before-the-fork", "untracked", "outside-the-repo", " M README.md", "?? new.txt"} {
		if !strings.Contains(got, want) {
			t.Errorf("the parent's workspace lacks %q after the fork:\n%s", want, got)
		}
	}
	for _, id := range children[1:] {
		if got := externalExec(t, c, id, "ls"); strings.Contains(got, "fork-only.txt") {
			t.Errorf("fork %s sees another fork's file:\n%s", id, got)
		}
	}

	// The family: the forks by their parent, the fork on its transcript.
	var forks api.SessionList
	if code := c.api("GET", "/v1/sessions?forked_from="+parent, c.admin, nil, &forks); code != 200 {
		t.Fatalf("list forks: %d", code)
	}
	var listed []string
	for _, s := range forks.Items {
		listed = append(listed, s.Metadata.SessionID)
	}
	slices.Sort(listed)
	want := slices.Sorted(slices.Values(children))
	if !slices.Equal(listed, want) || forks.Total != 3 {
		t.Errorf("forks of %s listed %v (total %d), want %v", parent, listed, forks.Total, want)
	}
	if listOut := run(t, c.env(c.admin), "sessions", "list", "--forked-from", parent); !strings.Contains(listOut, children[0]) {
		t.Errorf("sessions list --forked-from printed %q", listOut)
	}
	var forkEv *api.Event
	for _, ev := range c.events(parent) {
		if ev.Type == api.EventFork {
			forkEv = &ev
		}
	}
	if forkEv == nil || !strings.Contains(forkEv.Reason, children[2]) {
		t.Errorf("the parent's fork event: %+v", forkEv)
	}

	// Bad counts.
	cl := adminClient(t, c)
	for _, n := range []int{0, api.MaxForkCount + 1} {
		_, err := cl.Sessions.Fork(t.Context(), parent, api.ForkRequest{Count: n})
		var e *client.Error
		if !errors.As(err, &e) || e.StatusCode != 400 || !strings.Contains(e.Message, "out of range") {
			t.Errorf("fork with count %d: %v", n, err)
		}
	}
	if msg := runFail(t, c.env(c.admin), "sessions", "fork", parent, "--count", "11"); !strings.Contains(msg, "1 to 10") {
		t.Errorf("sessions fork --count 11 said %q", msg)
	}

	// A suspended session forks from the snapshot it is suspended with.
	if out := run(t, c.env(c.admin), "sessions", "suspend", parent); !strings.Contains(out, "suspended") {
		t.Fatalf("sessions suspend printed %q", out)
	}
	var fromSuspended api.SessionList
	if code := c.api("POST", "/v1/sessions/"+parent+"/fork", c.admin, api.ForkRequest{Count: 1}, &fromSuspended); code != 201 || len(fromSuspended.Items) != 1 {
		t.Fatalf("fork of the suspended session: %d %+v", code, fromSuspended)
	}
	late := fromSuspended.Items[0].Metadata.SessionID
	waitfor.Within(t, 90*time.Second, "the suspended session's fork to run", func() bool { return c.session(late).Status.Status == api.StatusRunning })
	if got := externalExec(t, c, late, check); !strings.Contains(got, "changed-before-the-fork") || !strings.Contains(got, "outside-the-repo") {
		t.Errorf("the suspended session's fork lacks its files:\n%s", got)
	}
	if s := c.session(parent); s.Status.Status != api.StatusSuspended {
		t.Errorf("the suspended parent after its fork: %+v", s.Status)
	}

	// An ended session has nothing to fork.
	run(t, c.env(c.admin), "sessions", "terminate", parent)
	c.waitFinal(parent, 30*time.Second)
	_, err = cl.Sessions.Fork(t.Context(), parent, api.ForkRequest{Count: 1})
	var e *client.Error
	if !errors.As(err, &e) || e.StatusCode != 409 || !strings.Contains(e.Message, "has ended") {
		t.Errorf("fork of an ended session: %v", err)
	}
}

// checkForkTranscript checks a fork's transcript opens with its parent's
// events as they were when it was forked, then the fork, then the new
// instruction.
func checkForkTranscript(t *testing.T, evs, parentEvents []api.Event, parent string) {
	t.Helper()
	var wrote bool
	for _, ev := range evs {
		if ev.Type == api.EventCall && strings.Contains(string(ev.Args), "changed-before-the-fork") {
			wrote = true
		}
	}
	if !wrote {
		t.Errorf("the fork's transcript lacks the parent's call that wrote its files")
	}
	for i, pe := range parentEvents {
		if i >= len(evs) || evs[i].Seq != pe.Seq || evs[i].Type != pe.Type || evs[i].Reason != pe.Reason {
			t.Errorf("the fork's event %d is not its parent's: %+v, want %+v", i+1, evs[min(i, len(evs)-1)], pe)
			break
		}
	}
	if i := slices.IndexFunc(evs, func(ev api.Event) bool { return ev.Type == api.EventResume }); i < 0 || !strings.Contains(evs[i].Reason, "is a fork") {
		t.Errorf("the fork's resume event does not say it is a fork: %+v", evs[max(i, 0)])
	}
	fork := slices.IndexFunc(evs, func(ev api.Event) bool { return ev.Type == api.EventFork })
	if fork < 0 || !strings.Contains(evs[fork].Reason, parent) {
		t.Fatalf("the fork's transcript has no fork event naming %s", parent)
	}
	if fork+1 >= len(evs) || evs[fork+1].Type != api.EventMessage || evs[fork+1].Text != "Try the other approach." {
		t.Errorf("the event after the fork is not its instruction: %+v", evs[min(fork+1, len(evs)-1)])
	}
}

// TestForkLLMSession: an llm session that wrote a file and waits for its
// user is forked into two with a new instruction. Each fork's model is
// asked with the parent's conversation — the task, its own call and its
// result, its answer — and the instruction last, and its first call finds
// the parent's file on the fork's own machine.
func TestForkLLMSession(t *testing.T) {
	t.Parallel()
	const instruction = "Now read it back."
	// A fork's first request carries the instruction (the resume note
	// may follow it) and no read yet.
	firstOfFork := func(req map[string]any) bool {
		b, _ := json.Marshal(req["messages"])
		return strings.Contains(string(b), instruction) && !strings.Contains(string(b), "call_read")
	}
	next := func(req map[string]any) map[string]any {
		if firstOfFork(req) {
			return toolCall("call_read", "exec", `{"command":"cat notes.txt"}`)
		}
		return say("Done.")
	}
	fake := newFakeOpenAI(t,
		func(req map[string]any) map[string]any {
			return toolCall("call_write", "write_file", `{"path":"notes.txt","content":"from-the-parent"}`)
		},
		func(req map[string]any) map[string]any { return say("Wrote notes.txt.") },
		next, next, next, next, next, next,
	)
	c := startClusterEnv(t, []string{"OUTPOST_LLM_PROVIDER=openai", "OUTPOST_LLM_BASE_URL=" + fake.srv.URL + "/v1",
		"OUTPOST_LLM_MODEL=fake-model"})
	token := setupOutpost(t, c, "fork-llm")
	startOrchestrator(t, c, "fork-llm", token, t.TempDir(), "--backend", "process", "--max-concurrent", "4")
	parent := createSession(t, c, api.CreateSessionRequest{Outpost: "fork-llm", Title: "fork the model", Prompt: "Write notes.txt.",
		Agent: api.Agent{Kind: api.AgentLLM, Interactive: true}, Limits: api.Limits{IdleS: 120}})
	waitfor.Within(t, 60*time.Second, "the agent to wait for its user", func() bool {
		return c.session(parent).Status.StatusDetail == api.DetailWaitingForUser
	})
	children := strings.Fields(run(t, c.env(c.admin), "sessions", "fork", parent, "--count", "2", "--prompt", instruction))
	if len(children) != 2 {
		t.Fatalf("sessions fork printed %v", children)
	}
	for _, id := range children {
		t.Cleanup(func() {
			if t.Failed() {
				for _, ev := range c.events(id) {
					b, _ := json.Marshal(ev)
					t.Logf("fork %s: %s", id, b)
				}
			}
		})
		waitfor.Within(t, 90*time.Second, "fork "+id+" to read the file back", func() bool {
			for _, ev := range c.events(id) {
				if ev.Type == api.EventOutput && strings.Contains(ev.Text, "from-the-parent") {
					return true
				}
			}
			return false
		})
	}
	asked := 0
	for _, req := range fake.requests() {
		if !firstOfFork(req) {
			continue
		}
		asked++
		b, _ := json.Marshal(req["messages"])
		for _, want := range []string{"Write notes.txt.", "call_write", "Wrote notes.txt."} {
			if !strings.Contains(string(b), want) {
				t.Errorf("a fork's model was asked without %q from its parent's conversation: %s", want, b)
			}
		}
		if strings.Index(string(b), "Wrote notes.txt.") > strings.Index(string(b), instruction) {
			t.Errorf("a fork's instruction came before its parent's conversation: %s", b)
		}
	}
	if asked != 2 {
		t.Errorf("the model was asked with the instruction %d times, want once per fork", asked)
	}
	if s := c.session(parent); s.Status.Status != api.StatusRunning || s.Status.StatusDetail != api.DetailWaitingForUser {
		t.Errorf("the parent after the fork: %+v", s.Status)
	}
}
