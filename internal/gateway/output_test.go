package gateway

import "testing"

// TestSpillKeys: every part of a call's spilled output parses back to its
// number, and no key of another call, or of no part, does.
func TestSpillKeys(t *testing.T) {
	t.Parallel()
	for part := range 3 {
		if n, ok := SpillPart(SpillKey("s", 7, part), "s", 7); !ok || n != part {
			t.Errorf("part %d parsed as %d, %v", part, n, ok)
		}
	}
	for _, key := range []string{"s/70.log", "s/7.log.0", "s/7.log.x", "s/7.logs", "t/7.log", SpillKey("s", 8, 0)} {
		if n, ok := SpillPart(key, "s", 7); ok {
			t.Errorf("%s parsed as part %d of call 7", key, n)
		}
	}
}
