package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/netpolicy"
)

// transcriptPrinter renders session events for people: status changes with
// their reasons, "$ command" for exec calls, output as it streams, and
// results with exit codes.
type transcriptPrinter struct {
	w   io.Writer
	loc *time.Location
	// midLine is set when the last output did not end a line, so the next
	// note starts on a new one.
	midLine bool
	// tools remembers each call's tool, to render its result.
	tools map[int64]string
}

func newTranscriptPrinter(w io.Writer, loc *time.Location) *transcriptPrinter {
	return &transcriptPrinter{w: w, loc: loc, tools: map[int64]string{}}
}

// print renders one event.
func (p *transcriptPrinter) print(ev api.Event) error {
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
		return p.note(ev, "status "+statusText(ev.Status, ev.StatusDetail)+reasonText(ev.Reason))
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
		return p.note(ev, "remote disconnected"+reasonText(ev.Reason))
	case api.EventResume:
		return p.note(ev, "resumed"+reasonText(ev.Reason))
	case api.EventRestore:
		// The repositories cloned again, or the workspace from its
		// snapshot: the reason says which.
		s := "restored"
		if ev.OK != nil && !*ev.OK {
			s = "not all restored"
		}
		return p.note(ev, s+reasonText(ev.Reason))
	case api.EventMachine:
		s := "machine " + orDash(ev.Machine) + " " + ev.Step
		if ev.ExitCode != nil {
			s += fmt.Sprintf(" (exit code %d)", *ev.ExitCode)
		}
		return p.note(ev, s+reasonText(ev.Reason))
	case api.EventNetwork:
		return p.note(ev, "network "+netpolicy.EventText(ev))
	case api.EventNetworkRequest:
		if ev.NetworkRequest != nil {
			return p.note(ev, netpolicy.RequestText(*ev.NetworkRequest))
		}
	case api.EventApproval:
		if ev.Approval != nil {
			return p.note(ev, approvalLine(*ev.Approval))
		}
	case api.EventMessage:
		text := ev.Role + ": " + ev.Text
		for _, tc := range ev.ToolCalls {
			text += "\n  → " + tc.Tool + " " + tc.Arguments
		}
		return p.note(ev, text)
	case api.EventEnd:
		return p.note(ev, "session ended: "+statusText(ev.Status, ev.StatusDetail)+reasonText(ev.Reason))
	}
	return p.note(ev, ev.Type+reasonText(ev.Reason))
}

// note writes a timestamped line about the session.
func (p *transcriptPrinter) note(ev api.Event, s string) error {
	t := time.UnixMilli(ev.Time).In(p.loc).Format("15:04:05")
	return p.line("[" + t + "] " + s)
}

func (p *transcriptPrinter) line(s string) error {
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
				cmd = shellJoin(a.Argv)
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

func statusText(status, detail string) string {
	if detail == "" {
		return orDash(status)
	}
	return orDash(status) + " (" + detail + ")"
}

func reasonText(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + reason
}

// shellJoin quotes argv for display the way a POSIX shell would read it.
func shellJoin(argv []string) string {
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
