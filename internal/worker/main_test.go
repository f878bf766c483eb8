package worker

import (
	"os"
	"testing"
)

// testHelperEnv makes the test binary run a helper (testHelpers) instead
// of the tests: a process of another user that a test needs.
const testHelperEnv = "OUTPOST_WORKER_TEST_HELPER"

// testHelpers are the helpers by name; each gets the binary's arguments
// and returns its exit code.
var testHelpers = map[string]func(args []string) int{}

func TestMain(m *testing.M) {
	if name := os.Getenv(testHelperEnv); name != "" {
		h, ok := testHelpers[name]
		if !ok {
			os.Exit(2)
		}
		os.Exit(h(os.Args[1:]))
	}
	os.Exit(m.Run())
}
