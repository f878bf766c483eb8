package web

import (
	"encoding/json"
	"fmt"
	"html"
	"html/template"
	"strings"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/netpolicy"
)

// This file turns a session's transcript events into what the session page
// shows, the way a CI log reads: each tool call is one step (its call,
// output, result and artifacts together, with a header saying what ran,
// how long it took and how it ended); runs of machine, claim and
// connection events fold into one line; messages and the rest stand
// alone. static/app.js builds the same from live events.

// item is one entry of the page's transcript: exactly one field is set.
type item struct {
	Step  *step
	Noise *noise
	Event *lone
}

// Step states, also class names (s-…) on the page.
const (
	stepRunning = "running"
	stepOK      = "ok"
	stepFailed  = "failed"
	stepLost    = "lost" // the session ended without the call's result
	// stepSkipped is a script's planned call that never ran: the script
	// stopped before it.
	stepSkipped = "skipped"
)

// step is one tool call.
type step struct {
	Call int64
	// Label names the call by its place in a script's plan ("Step 2 of
	// 3", "Clone 1 of 1"), as the session's reason does; "" shows #Call.
	Label  string
	Tool   string
	Target string // what the call works on, on one line: the command, path, repo or URL
	Full   string // Target uncut, when it was cut
	Start  int64  // time of the call event (ms); 0 when the page does not show it
	State  string
	Status string // "exit 3", "ok", "failed", "running", "no result"
	Took   string // from the call to its result

	Command   string        // exec: the command line, atop the output
	Args      string        // arguments worth showing beyond Target
	Content   string        // write_file's content, read_file's, browser_text's text
	Term      bool          // the step shows a terminal block
	Output    template.HTML // the terminal block's HTML
	TermState string        // the terminal's state while the call runs
	Error     string
	Diff      []diffLine
	Value     string // the result's value, when not shown otherwise
	Media     *media
	Artifacts []api.Artifact
	Raw       []rawEvent

	term   *terminal
	args   json.RawMessage
	result *api.Event
}

// Open says whether the step starts expanded: when it failed, still runs,
// or shows an image or a video.
func (s *step) Open() bool { return (s.State != stepOK && s.State != stepSkipped) || s.Media != nil }

// noise is a run of consecutive machine, claim, connection and status
// events.
type noise struct {
	Lines   []noiseLine
	Summary string
	Failed  bool
}

type noiseLine struct {
	Time   int64
	Type   string
	Kind   string // a word or two for the summary: "create", "claimed", "running"
	Text   string
	Failed bool
	Raw    rawEvent
}

// lone is an event shown on its own: a message, the session's end, a
// resume, a restore, and kinds this page does not know.
type lone struct {
	*api.Event
	Raw rawEvent
}

// rawEvent is an event's JSON, as the API gives it.
type rawEvent struct {
	Seq  int64
	JSON string
}

// noiseTypes are the events that fold into one line.
var noiseTypes = map[string]bool{
	api.EventMachine: true, api.EventClaim: true, api.EventRelease: true,
	api.EventRemoteConnected: true, api.EventRemoteDisconnected: true, api.EventStatus: true,
	api.EventNetwork: true,
}

// transcriptOptions say how a page of events is shown.
type transcriptOptions struct {
	// Final: the session has ended, so a call without a result has none.
	Final bool
	// NoMedia: the session's artifacts were deleted; show none inline.
	NoMedia bool
	// Plan is a script session's planned calls, by call number from 1:
	// its repos' clones, then its steps. Nil for other agents.
	Plan []plannedCall
	// End: the page holds the transcript's last event, so a script that
	// ended shows the steps it never reached.
	End bool
}

// plannedCall is one call a script session plans before it runs: call
// numbers are plan positions, so call n is Plan[n-1].
type plannedCall struct {
	Label  string `json:"label"`
	Tool   string `json:"tool"`
	Target string `json:"target"`
}

// scriptPlan returns the planned calls of a script session: one clone per
// repo, then the steps, labelled as the session's reason counts them.
func scriptPlan(spec api.SessionSpec) []plannedCall {
	if spec.Agent.Kind != api.AgentScript {
		return nil
	}
	plan := make([]plannedCall, 0, len(spec.Repos)+len(spec.Agent.Steps))
	for i, r := range spec.Repos {
		a, _ := json.Marshal(api.GitCloneArgs{URL: r.URL, Name: r.Name, Ref: r.Ref})
		plan = append(plan, plannedCall{Label: fmt.Sprintf("Clone %d of %d", i+1, len(spec.Repos)), Tool: api.ToolGitClone, Target: api.CallTarget(api.ToolGitClone, a)})
	}
	for i, st := range spec.Agent.Steps {
		target, _ := oneLine(api.CallTarget(st.Tool, st.Args))
		plan = append(plan, plannedCall{Label: fmt.Sprintf("Step %d of %d", i+1, len(spec.Agent.Steps)), Tool: st.Tool, Target: target})
	}
	return plan
}

// buildTranscript groups a page of events, in order, into items.
func buildTranscript(events []api.Event, opts transcriptOptions) []item {
	var items []item
	steps := map[int64]*step{}
	var buf []byte
	for i := range events {
		ev := &events[i]
		buf = buf[:0]
		if shotOf(ev) != nil {
			buf, _ = api.AppendEventJSON(buf, withoutImage(ev))
		} else {
			buf, _ = api.AppendEventJSON(buf, ev)
		}
		raw := rawEvent{ev.Seq, string(buf)}
		switch {
		case isStepEvent(ev):
			st := steps[ev.CallSeq]
			if st == nil {
				st = &step{Call: ev.CallSeq}
				if n := ev.CallSeq; n >= 1 && n <= int64(len(opts.Plan)) {
					st.Label = opts.Plan[n-1].Label
				}
				steps[ev.CallSeq] = st
				items = append(items, item{Step: st})
			}
			st.add(ev, opts)
			st.Raw = append(st.Raw, raw)
		case noiseTypes[ev.Type]:
			var n *noise
			if k := len(items); k > 0 && items[k-1].Noise != nil {
				n = items[k-1].Noise
			} else {
				n = &noise{}
				items = append(items, item{Noise: n})
			}
			n.Lines = append(n.Lines, noiseLineOf(ev, raw))
		default:
			items = append(items, item{Event: &lone{ev, raw}})
		}
	}
	for _, it := range items {
		switch {
		case it.Step != nil:
			it.Step.finish(opts.Final)
		case it.Noise != nil:
			it.Noise.summarize()
		}
	}
	return append(items, skippedSteps(events, steps, opts)...)
}

// skippedSteps returns the planned calls of an ended script that never
// ran, after the last one that did, when the page shows the transcript's
// end and at least one call (or the whole transcript): a page that starts
// after the last call cannot tell how far the script got.
func skippedSteps(events []api.Event, steps map[int64]*step, opts transcriptOptions) []item {
	if !opts.Final || !opts.End || len(opts.Plan) == 0 {
		return nil
	}
	var last int64
	for n := range steps {
		last = max(last, n)
	}
	if last == 0 && (len(events) == 0 || events[0].Seq > 1) {
		return nil
	}
	var out []item
	for n := last + 1; n <= int64(len(opts.Plan)); n++ {
		p := opts.Plan[n-1]
		out = append(out, item{Step: &step{Call: n, Label: p.Label, Tool: p.Tool, Target: p.Target,
			State: stepSkipped, Status: "skipped"}})
	}
	return out
}

// isStepEvent says whether an event belongs to a tool call's step.
func isStepEvent(ev *api.Event) bool {
	switch ev.Type {
	case api.EventCall, api.EventResult:
		return true
	case api.EventOutput, api.EventArtifact:
		return ev.CallSeq > 0
	}
	return false
}

// add takes one event of the step's call.
func (s *step) add(ev *api.Event, opts transcriptOptions) {
	if ev.Tool != "" && s.Tool == "" {
		s.Tool = ev.Tool
	}
	switch ev.Type {
	case api.EventCall:
		s.Tool, s.Start, s.args = ev.Tool, ev.Time, ev.Args
		s.Target = api.CallTarget(ev.Tool, ev.Args)
		if ev.Tool == api.ToolExec {
			s.Command = s.Target
			s.Term = true
		}
	case api.EventOutput:
		if s.term == nil {
			s.term = newTerminal()
		}
		s.term.write(ev.Text, ev.Stream == "stderr")
		s.Term = true
	case api.EventResult:
		s.result = ev
		if img := shotOf(ev); img != nil {
			// The image is the event's own, not an artifact: it stays
			// when the retention policy deletes artifacts.
			s.Media = shotMedia(ev, img)
		} else if !opts.NoMedia {
			s.Media = mediaOf(ev.SessionID, ev.Tool, ev.Value)
		}
	case api.EventArtifact:
		if ev.Artifact != nil {
			s.Artifacts = append(s.Artifacts, *ev.Artifact)
		}
	}
}

// finish works out the step's state and what its body shows.
func (s *step) finish(final bool) {
	s.Target, s.Full = oneLine(s.Target)
	if s.term != nil {
		out := s.term.html()
		if s.Command == "" {
			out = preText(out)
		}
		s.Output = template.HTML(out) //nolint:gosec // the terminal escapes all text
	}
	r := s.result
	switch {
	case r == nil && final:
		s.State, s.Status = stepLost, "no result"
	case r == nil:
		s.State, s.Status = stepRunning, "running"
		if s.term != nil {
			s.TermState = s.term.state()
		}
	default:
		ok := r.OK != nil && *r.OK
		s.State, s.Status = stepOK, "ok"
		if !ok {
			s.State, s.Status = stepFailed, "failed"
		}
		if r.ExitCode != nil {
			s.Status = fmt.Sprintf("exit %d", *r.ExitCode)
			if *r.ExitCode != 0 {
				s.State = stepFailed
			}
		}
		if s.Start > 0 && r.Time >= s.Start {
			s.Took = tookText(r.Time - s.Start)
		}
		s.Error = r.Error
	}
	s.Args, s.Content = stepArgs(s.Tool, s.args)
	if s.Tool == api.ToolApplyPatch {
		s.Diff = patchDiff(s.args)
	}
	if r == nil {
		return
	}
	// exec's value repeats its exit code, apply_patch's the files of its
	// patch, a screenshot's or recording's its file.
	if r.Tool == api.ToolExec || r.Tool == api.ToolApplyPatch || s.Media != nil {
		return
	}
	if d := diffLines(r.Value); d != nil {
		s.Diff = d
	} else if text, ok := valueText(r.Tool, r.Value); ok {
		s.Content = text
	} else {
		s.Value = prettyJSON(r.Value)
	}
}

// noiseLineOf describes a machine, claim, connection or status event.
func noiseLineOf(ev *api.Event, raw rawEvent) noiseLine {
	l := noiseLine{Time: ev.Time, Type: ev.Type, Raw: raw}
	switch ev.Type {
	case api.EventMachine:
		l.Kind = ev.Step
		l.Text = "machine " + ev.Step
		if ev.Machine != "" {
			l.Text += " " + ev.Machine
		}
		if ev.Backend != "" {
			l.Text += " (" + ev.Backend + ")"
		}
		if ev.ExitCode != nil {
			l.Text += fmt.Sprintf(" exit %d", *ev.ExitCode)
		}
		l.Failed = ev.Step == api.MachineStepFailed
	case api.EventNetwork:
		l.Kind = ev.Decision
		l.Text = "network " + netpolicy.EventText(*ev)
		l.Failed = ev.Decision == api.DecisionDeny
	case api.EventClaim:
		l.Kind = "claimed"
		l.Text = "claimed by " + ev.AcceptorID
	case api.EventRelease:
		l.Kind = "released"
		l.Text = "released by " + ev.AcceptorID
	case api.EventRemoteConnected:
		l.Kind = "connected"
		l.Text = "remote connected"
		if c := ev.Capabilities; c != nil && c.OS != "" {
			l.Text += " (" + c.OS + "/" + c.Arch + ")"
		}
	case api.EventRemoteDisconnected:
		l.Kind = "disconnected"
		l.Text = "remote disconnected"
	case api.EventStatus:
		l.Kind = ev.Status
		l.Text = plainStatus(ev.Status, ev.StatusDetail)
		l.Failed = ev.Status == api.StatusError
	}
	if ev.Reason != "" {
		l.Text += " — " + ev.Reason
	}
	return l
}

// noiseKinds is how many kinds a summary names.
const noiseKinds = 6

// summarize writes the one line a run of noise events folds into: "12
// machine events: create, start, … — last: …".
func (n *noise) summarize() {
	last := n.Lines[len(n.Lines)-1]
	var failed *noiseLine
	machines := true
	for i := range n.Lines {
		if n.Lines[i].Failed && failed == nil {
			failed = &n.Lines[i]
		}
		machines = machines && n.Lines[i].Type == api.EventMachine
	}
	n.Failed = failed != nil
	if len(n.Lines) == 1 {
		n.Summary = last.Text
		return
	}
	var kinds []string
	seen := map[string]bool{}
	for _, l := range n.Lines {
		k := l.Kind
		if l.Type == api.EventMachine && !machines {
			k = "machine " + k
		}
		if !seen[k] {
			seen[k] = true
			kinds = append(kinds, k)
		}
	}
	if len(kinds) > noiseKinds {
		kinds = append(kinds[:noiseKinds], "…")
	}
	what := "events"
	if machines {
		what = "machine events"
	}
	end := "last: " + last.Text
	if failed != nil {
		end = "failed: " + failed.Text
	}
	n.Summary = fmt.Sprintf("%d %s: %s — %s", len(n.Lines), what, strings.Join(kinds, ", "), end)
}

// rawHTML is an event's JSON for a raw block.
func rawHTML(r rawEvent) template.HTML {
	return template.HTML(html.EscapeString(r.JSON)) //nolint:gosec // escaped
}
