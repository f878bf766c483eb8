package fleet

import (
	"path/filepath"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestIdentityKnowsItsPredecessor: each process that locks a data dir
// learns the instance of the one that held it before (the lock proves that
// one gone) and leaves its own for the next; a shared identity, which has
// no instance, neither reads nor writes one; and predecessor takes the
// previous instance for a dead one even where its pid still answers.
func TestIdentityKnowsItsPredecessor(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "worker")
	open := func(shared bool) *Identity {
		t.Helper()
		o := IdentityOptions{Dir: dir, DirName: "worker data dir", Kind: api.WorkerKindWorker, Shared: shared}
		if shared {
			o.AcceptorID = "orchestrator-x"
		}
		id, err := OpenIdentity(o)
		if err != nil {
			t.Fatal(err)
		}
		id.Close()
		return id
	}
	first := open(false)
	if first.Previous != "" || first.Instance == "" {
		t.Fatalf("first identity: previous %q, instance %q", first.Previous, first.Instance)
	}
	second := open(false)
	if second.Previous != first.Instance || second.Instance == first.Instance {
		t.Fatalf("second identity: previous %q, instance %q; want previous %q", second.Previous, second.Instance, first.Instance)
	}
	if shared := open(true); shared.Previous != "" || shared.Instance != "" {
		t.Fatalf("shared identity: previous %q, instance %q", shared.Previous, shared.Instance)
	}
	if third := open(false); third.Previous != second.Instance {
		t.Fatalf("after a shared identity: previous %q, want %q", third.Previous, second.Instance)
	}
	// Pid 1 answers kill(pid, 0) on every machine: the instance decides.
	if !predecessor(second, &api.Worker{WorkerInfo: api.WorkerInfo{Instance: first.Instance, PID: 1}}) {
		t.Error("the previous instance of the data dir is not taken for the predecessor while its pid runs")
	}
	if predecessor(second, &api.Worker{WorkerInfo: api.WorkerInfo{Instance: "someone-else", PID: 1}}) {
		t.Error("another live instance is taken for the predecessor")
	}
}
