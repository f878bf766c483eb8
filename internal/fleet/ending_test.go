package fleet

import (
	"errors"
	"testing"
)

// TestOutcomeEnding: an Outcome's flags come down to one ending, LeaveClaim
// ranking over Failed over Exited, whatever qualifies them.
func TestOutcomeEnding(t *testing.T) {
	t.Parallel()
	err := errors.New("why")
	for _, c := range []struct {
		name string
		out  Outcome
		want ending
	}{
		{"nothing set", Outcome{}, stopped},
		{"an error alone", Outcome{Err: err, Reason: "r", Stop: true}, stopped},
		{"exited", Outcome{Exited: true, Stop: true}, exited},
		{"failed", Outcome{Failed: true, Postpone: true, Err: err}, notStarted},
		{"failed after an exit", Outcome{Failed: true, Exited: true, Err: err}, notStarted},
		{"claim left", Outcome{LeaveClaim: true, Err: err}, handedOff},
		{"claim left after an exit", Outcome{LeaveClaim: true, Exited: true, Err: err}, handedOff},
		{"claim left over a failure", Outcome{LeaveClaim: true, Failed: true, Err: err}, handedOff},
	} {
		if got := c.out.ending(); got != c.want {
			t.Errorf("%s: ending = %d, want %d", c.name, got, c.want)
		}
	}
}
