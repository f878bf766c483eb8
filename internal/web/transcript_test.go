package web

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// fixture builds transcript events with sequence numbers and times.
type fixture struct {
	evs []api.Event
	now int64
}

func (f *fixture) add(ms int64, ev api.Event) *fixture {
	f.now += ms
	ev.Seq, ev.Time, ev.SessionID = int64(len(f.evs)+1), f.now, "ses_1"
	f.evs = append(f.evs, ev)
	return f
}

func ptr[T any](v T) *T { return &v }

func args(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// ciSession is a script session: a prompt, provisioning, a passing step, a
// failing step with coloured output, a step that runs, and a write_file.
func ciSession() *fixture {
	f := &fixture{now: 1_700_000_000_000}
	f.add(0, api.Event{Type: api.EventMessage, Role: api.RoleUser, Text: "Run the tests."}).
		add(5, api.Event{Type: api.EventClaim, AcceptorID: "orch-1", Reason: "Claimed by orch-1."}).
		add(0, api.Event{Type: api.EventStatus, Status: api.StatusClaimed, Reason: "Claimed by orch-1."}).
		add(3, api.Event{Type: api.EventMachine, Step: api.MachineStepCreate, Machine: "m-1", Backend: "process", Reason: "Creating."}).
		add(9, api.Event{Type: api.EventMachine, Step: api.MachineStepStart, Machine: "m-1", Backend: "process", Reason: "Started."}).
		add(20, api.Event{Type: api.EventRemoteConnected, AcceptorID: "orch-1", Capabilities: &api.Capabilities{OS: "linux", Arch: "amd64"}}).
		add(0, api.Event{Type: api.EventStatus, Status: api.StatusRunning, StatusDetail: api.DetailWorking, Reason: "Running on orch-1."}).
		add(1, api.Event{Type: api.EventCall, CallSeq: 1, Tool: api.ToolExec, Args: args(api.ExecArgs{Command: "make test"})}).
		add(10, api.Event{Type: api.EventOutput, CallSeq: 1, Stream: "stdout", Text: "\x1b[32mok\x1b[0m  pkg\n"}).
		add(1190, api.Event{Type: api.EventResult, CallSeq: 1, Tool: api.ToolExec, OK: ptr(true), ExitCode: ptr(0), Value: args(map[string]int{"exit_code": 0})}).
		add(0, api.Event{Type: api.EventCall, CallSeq: 2, Tool: api.ToolExec, Args: args(api.ExecArgs{Command: "printf '\\033[31mred\\033[0m'; exit 3"})}).
		add(5, api.Event{Type: api.EventOutput, CallSeq: 2, Stream: "stdout", Text: "\x1b[31mred\x1b[0m <script>alert(1)</script>"}).
		add(40, api.Event{Type: api.EventResult, CallSeq: 2, Tool: api.ToolExec, OK: ptr(false), ExitCode: ptr(3), Error: "exit code 3"}).
		add(0, api.Event{Type: api.EventCall, CallSeq: 3, Tool: api.ToolWriteFile, Args: args(api.WriteFileArgs{Path: "notes.txt", Content: "hello\n"})}).
		add(2, api.Event{Type: api.EventResult, CallSeq: 3, Tool: api.ToolWriteFile, OK: ptr(true), Value: args(api.WriteFileResult{Bytes: 6})}).
		add(0, api.Event{Type: api.EventCall, CallSeq: 4, Tool: api.ToolExec, Args: args(api.ExecArgs{Command: "sleep 60"})}).
		add(100, api.Event{Type: api.EventOutput, CallSeq: 4, Stream: "stderr", Text: "\x1b[33mwaiting\r"})
	return f
}

func TestBuildTranscriptGroups(t *testing.T) {
	t.Parallel()
	items := buildTranscript(ciSession().evs, transcriptOptions{})
	var kinds []string
	for _, it := range items {
		switch {
		case it.Step != nil:
			kinds = append(kinds, fmt.Sprintf("step %d", it.Step.Call))
		case it.Noise != nil:
			kinds = append(kinds, fmt.Sprintf("noise %d", len(it.Noise.Lines)))
		default:
			kinds = append(kinds, it.Event.Type)
		}
	}
	if got, want := strings.Join(kinds, ", "), "message, noise 6, step 1, step 2, step 3, step 4"; got != want {
		t.Fatalf("items: %s, want %s", got, want)
	}
	n := items[1].Noise
	if want := "6 events: claimed, machine create, machine start, connected, running — last: Running — Running on orch-1."; n.Summary != want {
		t.Errorf("noise summary %q, want %q", n.Summary, want)
	}
	if n.Failed || n.Lines[4].Text != "remote connected (linux/amd64)" {
		t.Errorf("noise %+v", n)
	}

	pass, fail, write, running := items[2].Step, items[3].Step, items[4].Step, items[5].Step
	check := func(s *step, state, status, took string, open bool) {
		t.Helper()
		if s.State != state || s.Status != status || s.Took != took || s.Open() != open {
			t.Errorf("step %d: %s, %q, took %q, open %v; want %s, %q, %q, %v", s.Call, s.State, s.Status, s.Took, s.Open(), state, status, took, open)
		}
	}
	check(pass, stepOK, "exit 0", "1.2s", false)
	check(fail, stepFailed, "exit 3", "45ms", true)
	check(write, stepOK, "ok", "2ms", false)
	check(running, stepRunning, "running", "", true)
	if pass.Target != "make test" || pass.Command != "make test" || !pass.Term || len(pass.Raw) != 3 {
		t.Errorf("passing step %+v", pass)
	}
	if want := `<span class="fg1">red</span> &lt;script&gt;alert(1)&lt;/script&gt;`; string(fail.Output) != want || fail.Error != "exit code 3" {
		t.Errorf("failing step output %q, error %q", fail.Output, fail.Error)
	}
	if pass.Value != "" || fail.Value != "" {
		t.Error("exec steps repeat their value")
	}
	if write.Target != "notes.txt" || write.Content != "hello\n" || write.Term || write.Value == "" {
		t.Errorf("write_file step %+v", write)
	}
	if want := `{"fg":3,"bg":-1,"a":0,"cr":true}`; running.TermState != want {
		t.Errorf("running step's terminal state %s, want %s", running.TermState, want)
	}
	if pass.TermState != "" {
		t.Error("a finished step carries a terminal state")
	}

	// Once the session ended, the call that ran has no result.
	items = buildTranscript(ciSession().evs, transcriptOptions{Final: true})
	if s := items[5].Step; s.State != stepLost || s.Status != "no result" || !s.Open() || s.TermState != "" {
		t.Errorf("step of an ended session: %+v", s)
	}
}

// TestBuildTranscriptInterleaved: an assistant message asks for two calls
// recorded together; each call's output and result land in its own step.
func TestBuildTranscriptInterleaved(t *testing.T) {
	t.Parallel()
	f := &fixture{now: 1_700_000_000_000}
	f.add(0, api.Event{Type: api.EventMessage, Role: api.RoleAssistant, Text: "Two things.",
		ToolCalls: []api.ToolCallRef{{Tool: api.ToolExec, CallSeq: 5}, {Tool: api.ToolReadFile, CallSeq: 6}}}).
		add(0, api.Event{Type: api.EventCall, CallSeq: 5, Tool: api.ToolExec, Args: args(api.ExecArgs{Argv: []string{"ls", "-l", "my dir"}})}).
		add(0, api.Event{Type: api.EventCall, CallSeq: 6, Tool: api.ToolReadFile, Args: args(api.ReadFileArgs{Path: "go.mod"})}).
		add(3, api.Event{Type: api.EventOutput, CallSeq: 5, Stream: "stdout", Text: "five\n"}).
		add(3, api.Event{Type: api.EventResult, CallSeq: 5, Tool: api.ToolExec, OK: ptr(true), ExitCode: ptr(0)}).
		add(3, api.Event{Type: api.EventResult, CallSeq: 6, Tool: api.ToolReadFile, OK: ptr(true), Value: args(api.ReadFileResult{Content: "module x\n"})}).
		add(0, api.Event{Type: api.EventMessage, Role: api.RoleAssistant, Text: "Done."})
	items := buildTranscript(f.evs, transcriptOptions{})
	if len(items) != 4 || items[1].Step == nil || items[2].Step == nil || items[3].Event == nil {
		t.Fatalf("items %+v", items)
	}
	five, six := items[1].Step, items[2].Step
	if five.Target != `ls -l 'my dir'` || string(five.Output) != "five\n" || five.Took != "6ms" {
		t.Errorf("step 5: %+v", five)
	}
	if six.Target != "go.mod" || six.Output != "" || six.Content != "module x\n" || six.Value != "" || six.Took != "9ms" {
		t.Errorf("step 6: %+v", six)
	}
}

func TestNoiseSummaries(t *testing.T) {
	t.Parallel()
	f := &fixture{}
	for _, st := range []string{api.MachineStepCreate, api.MachineStepStart, api.MachineStepExit, api.MachineStepTeardown} {
		f.add(1, api.Event{Type: api.EventMachine, Step: st, Machine: "m-1", Backend: "docker", ExitCode: map[bool]*int{true: ptr(0)}[st == api.MachineStepExit]})
	}
	items := buildTranscript(f.evs, transcriptOptions{})
	if want := "4 machine events: create, start, exit, teardown — last: machine teardown m-1 (docker)"; items[0].Noise.Summary != want {
		t.Errorf("summary %q, want %q", items[0].Noise.Summary, want)
	}
	if got := items[0].Noise.Lines[2].Text; got != "machine exit m-1 (docker) exit 0" {
		t.Errorf("exit line %q", got)
	}

	f = &fixture{}
	f.add(1, api.Event{Type: api.EventMachine, Step: api.MachineStepCreate, Machine: "m-2"}).
		add(1, api.Event{Type: api.EventMachine, Step: api.MachineStepFailed, Machine: "m-2", Reason: "no space left"}).
		add(1, api.Event{Type: api.EventRelease, AcceptorID: "orch-1", Reason: "Provisioning failed."})
	n := buildTranscript(f.evs, transcriptOptions{})[0].Noise
	if want := "3 events: machine create, machine failed, released — failed: machine failed m-2 — no space left"; !n.Failed || n.Summary != want {
		t.Errorf("failed fold %v %q, want %q", n.Failed, n.Summary, want)
	}

	f = &fixture{}
	f.add(1, api.Event{Type: api.EventRemoteDisconnected, Reason: "The remote's connection closed."})
	if got := buildTranscript(f.evs, transcriptOptions{})[0].Noise.Summary; got != "remote disconnected — The remote's connection closed." {
		t.Errorf("one-event fold %q", got)
	}

	// Twenty events of seven kinds name six of them.
	f = &fixture{}
	for i := range 20 {
		f.add(1, api.Event{Type: api.EventStatus, Status: []string{"a", "b", "c", "d", "e", "f", "g"}[i%7]})
	}
	if got := buildTranscript(f.evs, transcriptOptions{})[0].Noise.Summary; !strings.HasPrefix(got, "20 events: a, b, c, d, e, f, … — last: ") {
		t.Errorf("long fold %q", got)
	}
}

// TestOneLine checks how a step's header cuts a long or many-line target
// (api.CallTarget's).
func TestOneLine(t *testing.T) {
	t.Parallel()
	if line, full := oneLine("for i in 1 2 3\ndo echo $i\ndone"); line != "for i in 1 2 3 …" || full == "" {
		t.Errorf("oneLine of a script: %q, %q", line, full)
	}
	if line, full := oneLine(strings.Repeat("é", 200)); line != strings.Repeat("é", 160)+"…" || len(full) != 400 {
		t.Errorf("oneLine of a long line: %q", line)
	}
	if line, full := oneLine("short"); line != "short" || full != "" {
		t.Errorf("oneLine(short) = %q, %q", line, full)
	}
}

func TestTookText(t *testing.T) {
	t.Parallel()
	for ms, want := range map[int64]string{0: "0ms", 999: "999ms", 1000: "1.0s", 4290: "4.2s", 37_900: "37s", 125_000: "2m 5s", 3_780_000: "1h 3m"} {
		if got := tookText(ms); got != want {
			t.Errorf("tookText(%d) = %q, want %q", ms, got, want)
		}
	}
}

// sessionAPI serves one session and its events, as the REST API does.
func sessionAPI(s api.Session, events []api.Event) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/sessions/ses_1":
			_ = json.NewEncoder(w).Encode(s)
		case "/v1/sessions/ses_1/events":
			_ = json.NewEncoder(w).Encode(api.EventList{Items: events})
		default:
			io.WriteString(w, `{"items":[]}`)
		}
	})
}

// TestSessionPageReadsLikeACILog renders the session page: the failing and
// the running step are open, the passing one closed, provisioning is one
// folded line, output is escaped and coloured, every event has its raw JSON.
func TestSessionPageReadsLikeACILog(t *testing.T) {
	t.Parallel()
	evs := ciSession().evs
	s := api.Session{Metadata: api.SessionMetadata{SessionID: "ses_1"}, Spec: api.SessionSpec{Outpost: "o", Agent: api.Agent{Kind: api.AgentScript}},
		Status: api.SessionStatus{Status: api.StatusRunning}}
	h, err := New(Options{API: sessionAPI(s, evs)})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/ui/sessions/ses_1", nil)
	r.AddCookie(&http.Cookie{Name: CookieName, Value: "good"})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	body := w.Body.String()
	if w.Code != 200 {
		t.Fatalf("session page: %d %s", w.Code, body)
	}
	stepRE := regexp.MustCompile(`<li class="step s-(\w+)" id="call-(\d+)"[^>]*>\s*<details class="step"( open)?>`)
	var got []string
	for _, m := range stepRE.FindAllStringSubmatch(body, -1) {
		got = append(got, m[2]+" "+m[1]+m[3])
	}
	if want := "1 ok, 2 failed open, 3 ok, 4 running open"; strings.Join(got, ", ") != want {
		t.Errorf("steps: %s, want %s", strings.Join(got, ", "), want)
	}
	for _, want := range []string{
		`<code class="what">make test</code><span class="took" title="started 22:13:20 UTC">1.2s</span><span class="res">exit 0</span>`,
		`<pre class="term"><span class="cmd">$ make test` + "\n" + `</span><span class="fg2">ok</span>  pkg` + "\n</pre>",
		`<span class="fg1">red</span> &lt;script&gt;alert(1)&lt;/script&gt;</pre>`,
		`<p class="err">exit code 3</p>`,
		`<details class="noise"><summary>6 events: claimed, machine create, machine start, connected, running — last: Running — Running on orch-1.</summary>`,
		`<pre class="term" data-term="{&#34;fg&#34;:3,&#34;bg&#34;:-1,&#34;a&#34;:0,&#34;cr&#34;:true}"><span class="cmd">$ sleep 60`,
		`<pre class="content">hello` + "\n</pre>",
		`<li class="ev ev-message msg-user">`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if strings.Contains(body, "<script>alert") {
		t.Error("output reached the page as HTML")
	}
	if n := strings.Count(body, ` data-seq="`); n != len(evs) {
		t.Errorf("%d raw JSON blocks, want one per event (%d)", n, len(evs))
	}
	if !strings.Contains(body, `data-seq="12">{&#34;seq&#34;:12,`) || !strings.Contains(body, `&lt;script&gt;alert(1)&lt;/script&gt;&#34;`) {
		t.Error("the raw JSON of the failing step's output is missing or not escaped")
	}
}

// TestScriptStepsMatchTheReason: a script session's calls are labelled as
// its reason counts them (clones first, then "Step N of M"), and once it
// has ended the steps it never reached show as skipped, after the last
// call that ran — never when the page cannot see how far it got.
func TestScriptStepsMatchTheReason(t *testing.T) {
	t.Parallel()
	spec := api.SessionSpec{Repos: []api.Repo{{URL: "https://git.example/app.git", Name: "app"}},
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			{Tool: api.ToolExec, Args: args(api.ExecArgs{Command: "make build"})},
			{Tool: api.ToolExec, Args: args(api.ExecArgs{Command: "make test"})},
			{Tool: api.ToolExec, Args: args(api.ExecArgs{Command: "make deploy\nmake notify"})},
		}}}
	f := &fixture{now: 1_700_000_000_000}
	f.add(0, api.Event{Type: api.EventCall, CallSeq: 1, Tool: api.ToolGitClone, Args: args(api.GitCloneArgs{URL: "https://git.example/app.git", Name: "app"})}).
		add(5, api.Event{Type: api.EventResult, CallSeq: 1, Tool: api.ToolGitClone, OK: ptr(true)}).
		add(0, api.Event{Type: api.EventCall, CallSeq: 2, Tool: api.ToolExec, Args: args(api.ExecArgs{Command: "make build"})}).
		add(5, api.Event{Type: api.EventResult, CallSeq: 2, Tool: api.ToolExec, OK: ptr(true), ExitCode: ptr(0)}).
		add(0, api.Event{Type: api.EventCall, CallSeq: 3, Tool: api.ToolExec, Args: args(api.ExecArgs{Command: "make test"})}).
		add(5, api.Event{Type: api.EventResult, CallSeq: 3, Tool: api.ToolExec, OK: ptr(false), ExitCode: ptr(2), Error: "exit code 2"}).
		add(0, api.Event{Type: api.EventEnd, Status: api.StatusError, Reason: `Step 2 of 3 (exec "make test") failed: exit code 2. The script stopped there; step 3 did not run.`})
	plan := scriptPlan(spec)
	view := func(items []item) []string {
		var out []string
		for _, it := range items {
			if s := it.Step; s != nil {
				out = append(out, fmt.Sprintf("%d %s %s %s %q", s.Call, s.Label, s.State, s.Tool, s.Target))
			}
		}
		return out
	}
	ended := view(buildTranscript(f.evs, transcriptOptions{Final: true, End: true, Plan: plan}))
	want := []string{
		`1 Clone 1 of 1 ok git_clone "app ← https://git.example/app.git"`,
		`2 Step 1 of 3 ok exec "make build"`,
		`3 Step 2 of 3 failed exec "make test"`,
		`4 Step 3 of 3 skipped exec "make deploy …"`,
	}
	if strings.Join(ended, "\n") != strings.Join(want, "\n") {
		t.Errorf("ended script:\n%s\nwant\n%s", strings.Join(ended, "\n"), strings.Join(want, "\n"))
	}
	// While it runs, and on a page of earlier events, nothing is skipped.
	if got := view(buildTranscript(f.evs, transcriptOptions{Final: false, End: true, Plan: plan})); len(got) != 3 {
		t.Errorf("a running script shows %d steps, want the 3 that ran: %v", len(got), got)
	}
	if got := view(buildTranscript(f.evs, transcriptOptions{Final: true, End: false, Plan: plan})); len(got) != 3 {
		t.Errorf("a page before the end shows %d steps, want 3: %v", len(got), got)
	}
	// A last page that holds only the end cannot tell which steps ran.
	if got := view(buildTranscript(f.evs[len(f.evs)-1:], transcriptOptions{Final: true, End: true, Plan: plan})); len(got) != 0 {
		t.Errorf("a page with only the end shows steps %v", got)
	}
	// Other agents keep call numbers.
	llm := spec
	llm.Agent.Kind = api.AgentLLM
	if scriptPlan(llm) != nil {
		t.Error("an llm session has a plan")
	}
	for _, s := range view(buildTranscript(f.evs, transcriptOptions{Final: true, End: true})) {
		if strings.Contains(s, "Step") || strings.Contains(s, "skipped") {
			t.Errorf("without a plan: %s", s)
		}
	}
}
