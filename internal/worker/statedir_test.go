package worker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// plantState is a test remote's script that leaves in its state dir what
// a real remote does — the journal, the git credential helper's file, a
// private HOME and /tmp, a browser profile — and says whether it found a
// journal an earlier remote of the session left.
const plantState = `cd "$OUTPOST_STATE_DIR" || exit 9
if [ -s journal/journal.log ]; then echo "journal=found"; else echo "journal=none"; fi
mkdir -p journal home tmp browser && echo '{"k":"started","seq":1}' >> journal/journal.log
echo "https://x:ghp_secret@github.com" > git-credentials
echo h > home/.bash_history; echo t > tmp/t; echo p > browser/Cookies
cd "$OLDPWD"
`

// TestStateDirDeletedWithSession: a session's state dir (journal, git
// credentials, HOME, /tmp) is deleted once the session ends or is
// suspended. One handed back unfinished keeps only its journal and
// remote.log; its next remote here finds the journal, and its end deletes
// the rest. A kept state dir goes when the queue shows its session on
// another machine or gone.
func TestStateDirDeletedWithSession(t *testing.T) {
	requireUnix(t)
	t.Parallel()
	fs, c := newFakeServer(t, HostPlatform())
	dataDir, dir := t.TempDir(), t.TempDir()
	var out syncBuffer
	opts := Options{Client: c, Outpost: "dev", DataDir: dataDir, Dir: dir, Logger: testLogger(t), Stdout: &out,
		GracePeriod: 10 * time.Millisecond, NoPrestart: true,
		RemoteCommand: []string{"sh", "-c", plantState + `[ -e "$OUTPOST_STATE_DIR/../../hold" ] || exit 0
` + holdScript + `exec sleep 60`}}
	stateDir := func(id string) string { return filepath.Join(dataDir, "sessions", id) }
	setStatus := func(status string) {
		fs.mu.Lock()
		fs.statusAfterExit = status
		fs.mu.Unlock()
	}
	gone := func(id, when string) {
		t.Helper()
		if _, err := os.Lstat(stateDir(id)); !os.IsNotExist(err) {
			t.Errorf("%s: the state dir of %s is still there (%q)", when, id, stateDirFiles(t, stateDir(id)))
		}
	}
	runOnce := func(id string) {
		t.Helper()
		ctx, _ := testContext(t)
		o := opts
		o.SessionID = id
		if err := Run(ctx, o); err != nil {
			t.Fatalf("Run %s = %v\n%s", id, err, out.String())
		}
	}

	// Ended, and suspended: nothing is left.
	fs.add(pendingEntry("sess-end"))
	runOnce("sess-end")
	gone("sess-end", "after the session ended")
	setStatus(api.QueueSessionSuspended)
	fs.add(pendingEntry("sess-sleep"))
	runOnce("sess-sleep")
	gone("sess-sleep", "after the session was suspended")

	// Handed back: the worker stops while the remote runs (as at a
	// restart), and the session goes back to the queue.
	setStatus(api.QueueSessionRunning)
	if err := os.WriteFile(filepath.Join(dataDir, "hold"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	fs.add(pendingEntry("sess-back"))
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	o := opts
	o.SessionID = "sess-back"
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	tctx, _ := testContext(t)
	waitfor.Until(tctx, t, "the remote to hold", func() bool { return strings.Contains(out.String(), "holding") })
	stop()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "goes back to the queue") {
		t.Fatalf("Run stopped = %v, want the session handed back", err)
	}
	if _, releases := fs.snapshot(); len(releases) != 3 {
		t.Fatalf("releases = %q, want sess-back's handed back", releases)
	}
	if got := stateDirFiles(t, stateDir("sess-back")); got != "journal/journal.log remote.log" {
		t.Errorf("a handed-back session's state dir holds %q, want the journal and remote.log only", got)
	}

	// It resumes here: its remote finds the journal, and once it ends
	// nothing is left.
	if err := os.Remove(filepath.Join(dataDir, "hold")); err != nil {
		t.Fatal(err)
	}
	setStatus(api.QueueSessionTerminated)
	before := strings.Count(out.String(), "journal=found")
	runOnce("sess-back")
	if strings.Count(out.String(), "journal=found") != before+1 {
		t.Errorf("the resumed session's remote did not find its journal:\n%s", out.String())
	}
	gone("sess-back", "after the resumed session ended")

	// Kept state dirs of sessions claimed elsewhere or gone are deleted at
	// the next start; one still waiting in the queue is cut to the journal.
	other := "worker-elsewhere"
	fs.add(&api.QueueEntry{Metadata: api.QueueMetadata{SessionID: "sess-moved", OutpostID: "op-1"},
		Status: api.QueueStatus{Phase: api.PhaseClaimed, AcceptorID: &other, SessionStatus: api.QueueSessionRunning}})
	waiting := pendingEntry("sess-waiting")
	fs.add(waiting)
	fs.mu.Lock()
	fs.asStored = map[string]bool{"sess-moved": true}
	fs.mu.Unlock()
	for _, id := range []string{"sess-moved", "sess-vanished", "sess-waiting"} {
		for _, f := range []string{"journal/journal.log", "git-credentials", "home/.netrc", remoteLogName} {
			p := filepath.Join(stateDir(id), f)
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	fs.add(pendingEntry("sess-next"))
	runOnce("sess-next")
	gone("sess-next", "after the session ended")
	gone("sess-moved", "after the worker saw the session claimed by another")
	gone("sess-vanished", "after the worker saw the session gone")
	if got := stateDirFiles(t, stateDir("sess-waiting")); got != "journal/journal.log remote.log" {
		t.Errorf("a waiting session's kept state dir holds %q, want the journal and remote.log only", got)
	}
}
