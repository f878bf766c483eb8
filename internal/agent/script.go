package agent

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// stepOutcome is what the planned calls left for the session's final
// status: the failures that fail it once every step ran (stop_on_error
// false), and how many failures continue_on_error allowed.
type stepOutcome struct {
	failed    []stepFailure
	tolerated int
}

// stepFailure is a failed call and the step that planned it.
type stepFailure struct {
	step step
	call store.Call
}

// maxFailuresNamed bounds how many failed steps a reason lists.
const maxFailuresNamed = 5

// stoppedText is the reason of a session ended by the failure of call seq,
// which planned st; rest are the calls that will not run.
func stoppedText(st step, c store.Call, seq int64, rest []step) string {
	if st.script == 0 {
		return fmt.Sprintf("Cloning repo %d failed: %s", seq, c.Error)
	}
	total := st.script + len(rest)
	s := fmt.Sprintf("Step %d of %d (%s) failed: %s.", st.script, total, stepLabel(st.tool, st.args), errorText(c.Error))
	switch n := len(rest); n {
	case 0:
	case 1:
		s += fmt.Sprintf(" The script stopped there; step %d did not run.", total)
	case 2:
		s += fmt.Sprintf(" The script stopped there; steps %d and %d did not run.", total-1, total)
	default:
		s += fmt.Sprintf(" The script stopped there; steps %d to %d did not run.", st.script+1, total)
	}
	return s
}

// failedStepsText is the reason of a script that ran every step (stop_on_error
// false) and had failures.
func failedStepsText(failed []stepFailure, total int) string {
	parts := make([]string, 0, min(len(failed), maxFailuresNamed)+1)
	for i, f := range failed {
		if i == maxFailuresNamed {
			parts = append(parts, fmt.Sprintf("and %d more", len(failed)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("step %d (%s): %s", f.step.script, stepLabel(f.step.tool, f.step.args), errorText(f.call.Error)))
	}
	noun := "steps"
	if total == 1 {
		noun = "step"
	}
	return fmt.Sprintf("%d of %d %s failed: %s.", len(failed), total, noun, strings.Join(parts, "; "))
}

// finishedText is the reason of a script whose failures, if any, were all
// allowed by continue_on_error.
func finishedText(total, tolerated int) string {
	noun := "steps"
	if total == 1 {
		noun = "step"
	}
	s := fmt.Sprintf("The script finished: %d %s", total, noun)
	switch tolerated {
	case 0:
		return s + "."
	case 1:
		return s + "; 1 failed and had continue_on_error."
	}
	return fmt.Sprintf("%s; %d failed and had continue_on_error.", s, tolerated)
}

// stepLabel names a step for people: `exec "make test"`, `read_file go.mod`,
// the tool and what its call works on, as the web UI's step headers say it.
func stepLabel(tool string, args json.RawMessage) string {
	target := api.CallTarget(tool, args)
	switch {
	case target == "":
		return tool
	case tool == api.ToolExec:
		return fmt.Sprintf("exec %q", clip(target, 80))
	}
	return tool + " " + clip(target, 80)
}

// errorText is a call's error as part of a sentence.
func errorText(e string) string {
	e = strings.TrimSuffix(strings.TrimSpace(e), ".")
	if e == "" {
		return "the tool reported an error"
	}
	return clip(e, 300)
}

// clip cuts s to n runes, marking the cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
