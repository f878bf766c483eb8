package procguard

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
)

// NotDumpable makes the process not dumpable; it runs in a child process
// so the test binary stays as it was.
func TestNotDumpable(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("prctl is Linux only")
	}
	if os.Getenv("OUTPOST_TEST_PROTECT") == "1" {
		if !Dumpable() {
			os.Exit(3) // dumpable before the call
		}
		if err := NotDumpable(); err != nil || Dumpable() {
			os.Exit(4)
		}
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNotDumpable$")
	cmd.Env = append(os.Environ(), "OUTPOST_TEST_PROTECT=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}
