package fleet

import (
	"errors"
	"testing"
)

// TestOutcomeConstructors: each constructor gives its one ending, and the
// qualifiers change nothing but themselves.
func TestOutcomeConstructors(t *testing.T) {
	t.Parallel()
	err := errors.New("why")
	for _, c := range []struct {
		name string
		out  Outcome
		want Outcome
	}{
		{"zero", Outcome{}, Outcome{Ending: EndStopped}},
		{"stopped", Stopped(err).WithReason("r").StopAfter(), Outcome{Ending: EndStopped, Err: err, Reason: "r", Stop: true}},
		{"exited", Exited(err).StopAfter(), Outcome{Ending: EndExited, Err: err, Stop: true}},
		{"not started", NotStarted(err).Postponed(), Outcome{Ending: EndNotStarted, Err: err, Postpone: true}},
		{"handed off", HandedOff(err), Outcome{Ending: EndHandedOff, Err: err}},
	} {
		if c.out != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, c.out, c.want)
		}
	}
	if got := EndHandedOff.String(); got != "handed off" {
		t.Errorf("EndHandedOff.String() = %q", got)
	}
}
