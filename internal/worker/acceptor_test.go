package worker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An orchestrator's new id says what it is; an id saved by an older
// version, whatever its first word, is kept so its claims stay its own.
func TestAcceptorIDOfAnotherKind(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	id, err := LoadAcceptorIDAs(dir, "orchestrator")
	if err != nil || !strings.HasPrefix(id, "orchestrator-") {
		t.Fatalf("new id %q, %v; want orchestrator-<host>-<random>", id, err)
	}
	if again, err := LoadAcceptorIDAs(dir, "orchestrator"); err != nil || again != id {
		t.Errorf("second load %q, %v; want %q", again, err, id)
	}

	old := t.TempDir()
	if err := os.WriteFile(filepath.Join(old, acceptorFile), []byte("worker-box-0123abcd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if kept, err := LoadAcceptorIDAs(old, "orchestrator"); err != nil || kept != "worker-box-0123abcd" {
		t.Errorf("saved id = %q, %v; want it kept", kept, err)
	}
}
