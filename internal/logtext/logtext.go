// Package logtext renders a session's transcript as plain text, the way
// people read a CI log: status changes with their reasons, "$ command" for
// exec calls, output as it streamed, results with exit codes. The CLI's
// logs and the web UI's log download both print it.
package logtext

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/approval"
	"github.com/outpost-sh/outpost/internal/netpolicy"
)

// Printer renders session events for people, one at a time, in order.
type Printer struct {
	w   io.Writer
	loc *time.Location
	// midLine is set when the last output did not end a line, so the next
	// note starts on a new one.
	midLine bool
	// tools remembers each call's tool, to render its result.
	tools map[int64]string
}

// NewPrinter returns a printer that writes to w, with times in loc.
func NewPrinter(w io.Writer, loc *time.Location) *Printer {
	return &Printer{w: w, loc: loc, tools: map[int64]string{}}
}

// Print renders one event.
func (p *Printer) Print(ev api.Event) error {
	switch ev.Type {
	case api.EventOutput:
		if ev.Text == "" {
			return nil
		}
		p.midLine = !strings.HasSuffix(ev.Text, "\n")
		_, err := io.WriteString(p.w, ev.Text)
		return err
	case api.EventCall:
		p.tools[ev.CallSeq] = ev.Tool
		return p.line(callLine(ev))
	case api.EventResult:
		return p.line(resultLine(ev, p.tools[ev.CallSeq]))
	case api.EventStatus:
		return p.note(ev, "status "+StatusText(ev.Status, ev.StatusDetail)+ReasonText(ev.Reason))
	case api.EventClaim:
		return p.note(ev, "claimed by "+orDash(ev.AcceptorID))
	case api.EventRelease:
		return p.note(ev, "released by "+orDash(ev.AcceptorID))
	case api.EventRemoteConnected:
		s := "remote connected"
		if c := ev.Capabilities; c != nil {
			s += fmt.Sprintf(": %s/%s on %s", c.OS, c.Arch, orDash(c.Hostname))
		}
		return p.note(ev, s)
	case api.EventRemoteDisconnected:
		return p.note(ev, "remote disconnected"+ReasonText(ev.Reason))
	case api.EventResume:
		return p.note(ev, "resumed"+ReasonText(ev.Reason))
	case api.EventRestore:
		// The repositories cloned again, or the workspace from its
		// snapshot: the reason says which.
		s := "restored"
		if ev.OK != nil && !*ev.OK {
			s = "not all restored"
		}
		return p.note(ev, s+ReasonText(ev.Reason))
	case api.EventMachine:
		s := "machine " + orDash(ev.Machine) + " " + ev.Step
		if ev.ExitCode != nil {
			s += fmt.Sprintf(" (exit code %d)", *ev.ExitCode)
		}
		return p.note(ev, s+ReasonText(ev.Reason))
	case api.EventFork:
		return p.note(ev, "forked"+ReasonText(ev.Reason))
	case api.EventModelRetry:
		return p.note(ev, "model call retried"+ReasonText(ev.Reason))
	case api.EventNetwork:
		return p.note(ev, "network "+netpolicy.EventText(ev))
	case api.EventNetworkRequest:
		if ev.NetworkRequest != nil {
			return p.note(ev, netpolicy.RequestText(*ev.NetworkRequest))
		}
	case api.EventApproval:
		if ev.Approval != nil {
			return p.note(ev, ApprovalLine(*ev.Approval))
		}
	case api.EventMessage:
		text := ev.Role + ": " + ev.Text
		for _, tc := range ev.ToolCalls {
			text += "\n  → " + tc.Tool + " " + tc.Arguments
		}
		return p.note(ev, text)
	case api.EventEnd:
		return p.note(ev, "session ended: "+StatusText(ev.Status, ev.StatusDetail)+ReasonText(ev.Reason))
	}
	return p.note(ev, ev.Type+ReasonText(ev.Reason))
}

// note writes a timestamped line about the session.
func (p *Printer) note(ev api.Event, s string) error {
	t := time.UnixMilli(ev.Time).In(p.loc).Format("15:04:05")
	return p.line("[" + t + "] " + s)
}

// Line writes s on a line of its own, after output that did not end its
// line.
func (p *Printer) Line(s string) error { return p.line(s) }

func (p *Printer) line(s string) error {
	if p.midLine {
		s = "\n" + s
		p.midLine = false
	}
	_, err := fmt.Fprintln(p.w, s)
	return err
}

func callLine(ev api.Event) string {
	if ev.Tool == api.ToolExec {
		var a api.ExecArgs
		if json.Unmarshal(ev.Args, &a) == nil {
			cmd := a.Command
			if cmd == "" {
				cmd = ShellJoin(a.Argv)
			}
			if a.Cwd != "" {
				return fmt.Sprintf("$ %s    (in %s)", cmd, a.Cwd)
			}
			return "$ " + cmd
		}
	}
	args := strings.TrimSpace(string(ev.Args))
	if args == "" || args == "null" || args == "{}" {
		return "> " + ev.Tool
	}
	return "> " + ev.Tool + " " + truncate(args, 200)
}

func resultLine(ev api.Event, tool string) string {
	if ev.Tool != "" {
		tool = ev.Tool
	}
	code := ev.ExitCode
	var r api.ExecResult
	if tool == api.ToolExec && len(ev.Value) > 0 && json.Unmarshal(ev.Value, &r) == nil && code == nil {
		code = &r.ExitCode
	} else if code != nil && len(ev.Value) > 0 {
		_ = json.Unmarshal(ev.Value, &r) // only for TimedOut
	}
	switch {
	case code != nil && r.TimedOut:
		return fmt.Sprintf("[exit %d, timed out]", *code)
	case code != nil:
		return fmt.Sprintf("[exit %d]", *code)
	case ev.OK != nil && !*ev.OK:
		return "[error] " + orDash(ev.Error)
	}
	ok := "[ok]"
	if s := api.ResultSummary(tool, ev.Value); s != "" {
		ok += " " + s
	}
	var edit api.EditFileResult
	if tool == api.ToolEditFile && json.Unmarshal(ev.Value, &edit) == nil && edit.Diff != "" {
		return strings.TrimSuffix(edit.Diff, "\n") + "\n" + ok
	}
	return ok
}

// StatusText is a session's status with its detail: "error (failed)".
func StatusText(status, detail string) string {
	if detail == "" {
		return orDash(status)
	}
	return orDash(status) + " (" + detail + ")"
}

// ReasonText is ": reason", or "" when there is none.
func ReasonText(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + reason
}

// ShellJoin quotes argv for display the way a POSIX shell would read it.
func ShellJoin(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && !strings.ContainsAny(a, " \t\n'\"\\$`!*?[]{}()<>|&;#~") {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// ApprovalLine is a transcript line of an approval event: "approval of
// call 3 (exec) pending: rule outpost[0] — pushes to main", "approval of
// call 3 (exec) approved by tok_…: release day".
func ApprovalLine(a api.Approval) string {
	s := fmt.Sprintf("approval of call %d (%s) %s", a.CallSeq, a.Tool, strings.ReplaceAll(a.State, "_", " "))
	switch {
	case a.State == api.ApprovalPending:
		s += ": rule " + a.Rule
		if a.RuleReason != "" {
			s += " — " + a.RuleReason
		}
		if a.Deadline > 0 {
			s += fmt.Sprintf(" (%s at %s)", a.OnTimeout, time.UnixMilli(a.Deadline).UTC().Format("15:04:05Z"))
		}
		return s
	case a.By == approval.ByRule:
		s += " by rule " + a.Rule
	case a.By == approval.ByTimeout:
		s += ", then " + a.OnTimeout
		return s
	default:
		s += " by " + a.By
	}
	if a.Reason != "" {
		s += ": " + a.Reason
	}
	return s
}
