// Package doctor checks that a machine is ready to serve Outpost sessions:
// the programs tools use (git, a browser, ffmpeg, Xvfb, sudo, container
// engines), the bubblewrap sandbox sessions run in, the workspace's free
// disk, and the server — that it answers, that its TLS certificate
// verifies, that the token is valid with the scopes a worker needs, and
// that the clocks agree.
//
// It decides, it does not detect: machine facts come from internal/machine
// and the worker's sandbox probe, so `outpost doctor` and a starting
// worker (which prints a one-line summary) judge the same findings the
// same way.
package doctor

import (
	"fmt"
	"io"
	"strings"
)

// Status is the outcome of one check.
type Status string

// The outcomes. Only Fail makes a report fail; an optional check is never
// worse than Warn.
const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "fail"
	// Skip is a check not made: it does not apply here, or an earlier
	// check it depends on failed.
	Skip Status = "skip"
)

// Check is the result of one check.
type Check struct {
	// Name is short and stable: git, chrome, ffmpeg, xvfb, sudo, bwrap,
	// containers, workspace, server, tls, clock, token, outpost.
	Name   string `json:"name"`
	Status Status `json:"status"`
	// Required checks are those a worker cannot do its job without; the
	// others (optional tools) only warn.
	Required bool `json:"required"`
	// Detail says what was found, in a sentence or less.
	Detail string `json:"detail"`
	// Fix says in one sentence what to do; empty when Status is OK.
	Fix string `json:"fix,omitempty"`
}

// Passed reports whether no check failed.
func Passed(checks []Check) bool {
	for _, c := range checks {
		if c.Status == Fail {
			return false
		}
	}
	return true
}

// Style is how Print marks each check's status.
type Style int

// The styles.
const (
	// Words marks checks "ok", "warn", "FAIL" and "skip": for logs and
	// pipes.
	Words Style = iota
	// Symbols marks them ✓, !, ✗ and -: for a terminal.
	Symbols
)

func (s Style) mark(st Status) string {
	if s == Symbols {
		switch st {
		case OK:
			return "✓"
		case Warn:
			return "!"
		case Fail:
			return "✗"
		}
		return "-"
	}
	switch st {
	case Fail:
		return "FAIL"
	case "":
		return "?"
	}
	return string(st)
}

// Print writes one line per check — its mark, name and detail — with the
// fix indented on the next line when there is one; then, when no check
// failed, a line saying so and counting the warnings. (When one failed,
// the caller says so, in its error.)
func Print(w io.Writer, checks []Check, style Style) error {
	width := 0
	for _, c := range checks {
		width = max(width, len(c.Name))
	}
	markWidth := 1
	if style == Words {
		markWidth = 4
	}
	var b strings.Builder
	warned := 0
	for _, c := range checks {
		fmt.Fprintf(&b, "%-*s  %-*s  %s\n", markWidth, style.mark(c.Status), width, c.Name, c.Detail)
		if c.Fix != "" && (c.Status == Fail || c.Status == Warn) {
			fmt.Fprintf(&b, "%*s  fix: %s\n", markWidth+2+width, "", c.Fix)
		}
		if c.Status == Warn {
			warned++
		}
	}
	switch {
	case !Passed(checks):
	case warned > 0:
		fmt.Fprintf(&b, "\nEvery required check passed; %s.\n", plural(warned, "warning", "warnings"))
	default:
		b.WriteString("\nEvery check passed.\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Summary is checks in short for a log line: name, status, name,
// status, … as slog attributes (git=ok chrome=warn …).
func Summary(checks []Check) []any {
	attrs := make([]any, 0, 2*len(checks))
	for _, c := range checks {
		attrs = append(attrs, c.Name, string(c.Status))
	}
	return attrs
}

// Failures lists the failed checks as "name: detail (fix)".
func Failures(checks []Check) []string {
	var out []string
	for _, c := range checks {
		if c.Status == Fail {
			out = append(out, c.Name+": "+c.Detail+" ("+c.Fix+")")
		}
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
