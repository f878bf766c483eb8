package remote

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestServeRestoresReposBeforeCalls welcomes a remote with repositories to
// restore and sends a call at once: the call waits until the clones are
// done and finds the repository; a clone that fails is reported and does
// not stop the remote; a repository already in the workspace is kept.
func TestServeRestoresReposBeforeCalls(t *testing.T) {
	bare, work := newOrigin(t)
	v1 := gitT(t, work, "rev-parse", "HEAD")
	ws := t.TempDir()
	// "kept" is already a repository on this machine, with local work.
	kept := filepath.Join(ws, "repos", "kept")
	if err := os.MkdirAll(filepath.Dir(kept), 0o755); err != nil {
		t.Fatal(err)
	}
	gitT(t, ws, "clone", bare, kept)
	if err := os.WriteFile(filepath.Join(kept, "local.txt"), []byte("uncommitted"), 0o644); err != nil {
		t.Fatal(err)
	}

	g := newTestGateway(t)
	errc, _ := startServe(t, g, t.TempDir(), ws)
	gc := g.accept(t)
	gc.next(t, api.FrameHello)
	gc.send(t, api.Frame{Type: api.FrameWelcome, Secrets: map[string]string{"GIT_TOKEN": "tok-secret-1"}, Restore: []api.GitCloneArgs{
		{URL: bare, Name: "app", Ref: "feature"},
		{URL: filepath.Join(t.TempDir(), "missing.git"), Name: "gone"},
		{URL: bare, Name: "kept"},
	}})
	gc.send(t, execCall(1, "cat repos/app/README; git -C repos/app rev-parse --abbrev-ref HEAD"))
	gc.send(t, execCall(2, "cat repos/gone/README"))

	restored := gc.next(t, api.FrameRestored)
	if len(restored.Restored) != 3 {
		t.Fatalf("restored = %+v", restored.Restored)
	}
	app, gone, keep := restored.Restored[0], restored.Restored[1], restored.Restored[2]
	if app.Name != "app" || app.Ref != "feature" || app.Head != v1 || app.Error != "" || app.Kept {
		t.Errorf("app outcome = %+v", app)
	}
	if gone.Name != "gone" || gone.Error == "" || !strings.Contains(gone.Error, "git clone") {
		t.Errorf("gone outcome = %+v", gone)
	}
	if keep.Name != "kept" || !keep.Kept || keep.Error != "" {
		t.Errorf("kept outcome = %+v", keep)
	}
	if b, err := os.ReadFile(filepath.Join(kept, "local.txt")); err != nil || string(b) != "uncommitted" {
		t.Errorf("the kept repository was touched: %q, %v", b, err)
	}

	results := map[int64]api.Frame{}
	for range 2 {
		f := gc.next(t, api.FrameResult)
		results[f.Seq] = f
	}
	if r := results[1]; !r.OK {
		t.Fatalf("call after the restore failed: %+v", r)
	}
	if out := gc.output(1, api.StreamStdout); out != "v1feature\n" {
		t.Errorf("call 1 output = %q, want the restored repo on its branch", out)
	}
	var er api.ExecResult
	if r := results[2]; r.OK || json.Unmarshal(r.Value, &er) != nil || er.ExitCode == 0 {
		t.Errorf("call in the repository that could not be restored = %+v", r)
	}

	// A second welcome (a reconnect) does not restore again.
	gc.send(t, api.Frame{Type: api.FrameAck, Seq: 1})
	gc.send(t, api.Frame{Type: api.FrameAck, Seq: 2})
	gc.send(t, api.Frame{Type: api.FrameWelcome, Restore: []api.GitCloneArgs{{URL: bare, Name: "again"}}})
	gc.send(t, execCall(3, "test ! -e repos/again"))
	if r := gc.next(t, api.FrameResult); r.Seq != 3 || !r.OK {
		t.Fatalf("after a second welcome: %+v", r)
	}
	gc.send(t, api.Frame{Type: api.FrameEnd})
	if err := waitErr(t, errc); err != nil {
		t.Fatalf("Serve = %v", err)
	}
}

// TestServeWelcomeWithoutRestore sends nothing about restores.
func TestServeWelcomeWithoutRestore(t *testing.T) {
	g := newTestGateway(t)
	errc, _ := startServe(t, g, t.TempDir(), t.TempDir())
	gc := g.accept(t)
	gc.handshake(t, nil, nil)
	gc.send(t, execCall(1, "true"))
	if f := gc.next(t, api.FrameResult); !f.OK {
		t.Fatalf("result = %+v", f)
	}
	gc.send(t, api.Frame{Type: api.FrameEnd})
	if err := waitErr(t, errc); err != nil {
		t.Fatalf("Serve = %v", err)
	}
}
