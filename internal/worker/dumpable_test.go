package worker

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
)

// ProtectSecrets makes the process not dumpable; it runs in a child process
// so the test binary stays as it was.
func TestProtectSecrets(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("prctl is Linux only")
	}
	if os.Getenv("OUTPOST_TEST_PROTECT") == "1" {
		if !dumpable() {
			os.Exit(3) // dumpable before the call
		}
		if err := ProtectSecrets(); err != nil || dumpable() {
			os.Exit(4)
		}
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestProtectSecrets$")
	cmd.Env = append(os.Environ(), "OUTPOST_TEST_PROTECT=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}
