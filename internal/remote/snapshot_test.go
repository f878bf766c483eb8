package remote

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/snapshot"
)

// snapshotStore is the fake gateway's snapshot endpoint: it keeps the one
// archive PUT to it and serves it on GET.
type snapshotStore struct {
	t *testing.T

	mu      sync.Mutex // guards the following
	archive []byte
	puts    int
	gets    int
	refuse  int // HTTP status to answer a PUT with; 0 stores it
}

func (st *snapshotStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+testToken || r.Header.Get(api.HeaderSessionID) != testSession {
		http.Error(w, "bad credentials", http.StatusUnauthorized)
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	switch r.Method {
	case http.MethodPut:
		st.puts++
		if st.refuse != 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(st.refuse)
			_ = json.NewEncoder(w).Encode(api.ErrorResponse{Error: api.ErrorBody{Code: "too_large", Message: "the snapshot exceeds this outpost's limit of 1 KiB"}})
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		st.archive = b
		w.WriteHeader(http.StatusNoContent)
	case http.MethodGet:
		st.gets++
		if st.archive == nil {
			http.Error(w, "no snapshot", http.StatusNotFound)
			return
		}
		_, _ = w.Write(st.archive)
	default:
		http.Error(w, "method", http.StatusMethodNotAllowed)
	}
}

func (st *snapshotStore) stored() ([]byte, int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.archive, st.puts
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestServeSuspendUploadsSnapshot: on suspend the remote uploads an archive
// of its workspace (without its state dir inside it) whose checksum and
// size are those of its suspended frame, refuses calls from then on, and
// exits 0 on end.
func TestServeSuspendUploadsSnapshot(t *testing.T) {
	store := &snapshotStore{t: t}
	g := newSnapshotGateway(t, store)
	work := t.TempDir()
	state := filepath.Join(work, ".outpost", "state")
	write(t, filepath.Join(work, "repos", "app", "main.go"), "package main\n")
	errc, _ := startServe(t, g, state, work)
	gc := g.accept(t)
	gc.handshake(t, nil, nil)
	gc.send(t, execCall(1, "echo made by a call > notes.txt"))
	if res := gc.next(t, api.FrameResult); !res.OK {
		t.Fatalf("result = %+v", res)
	}
	gc.send(t, api.Frame{Type: api.FrameAck, Seq: 1})

	gc.send(t, api.Frame{Type: api.FrameSuspend})
	f := gc.next(t, api.FrameSuspended)
	archive, puts := store.stored()
	if f.Snapshot == nil || f.Snapshot.Error != "" || puts != 1 {
		t.Fatalf("suspended = %+v (snapshot %+v), %d uploads", f, f.Snapshot, puts)
	}
	info := *f.Snapshot
	if info.Size != int64(len(archive)) || info.SHA256 != sha(archive) || info.Files != 2 {
		t.Fatalf("suspended says %+v; the upload has %d bytes with SHA-256 %s", info, len(archive), sha(archive))
	}

	// The archive is the workspace.
	dst := t.TempDir()
	if _, err := snapshot.Restore(context.Background(), bytes.NewReader(archive), dst, info, snapshot.Options{}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "notes.txt")); err != nil || string(b) != "made by a call\n" {
		t.Errorf("notes.txt = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dst, ".outpost", "state")); err == nil {
		t.Error("the remote's state dir is in the snapshot")
	}

	// Suspended: a call is refused; a repeated suspend gets the same answer.
	gc.send(t, execCall(2, "echo ran > ran.txt"))
	if res := gc.next(t, api.FrameResult); res.Seq != 2 || res.OK || res.Error != suspendingError {
		t.Errorf("call after suspend = %+v", res)
	}
	gc.send(t, api.Frame{Type: api.FrameSuspend})
	if again := gc.next(t, api.FrameSuspended); again.Snapshot == nil || again.Snapshot.SHA256 != info.SHA256 {
		t.Errorf("second suspended = %+v", again.Snapshot)
	}
	if _, puts := store.stored(); puts != 1 {
		t.Errorf("%d uploads, want 1", puts)
	}
	if _, err := os.Stat(filepath.Join(work, "ran.txt")); err == nil {
		t.Error("the call after suspend ran")
	}
	gc.send(t, api.Frame{Type: api.FrameEnd, Reason: "suspended"})
	if err := waitErr(t, errc); err != nil {
		t.Fatalf("Serve = %v, want nil after end", err)
	}
}

// TestServeSuspendRefusedKeepsServing: when the gateway refuses the upload
// (over its limit), suspended carries its message and the session goes on.
func TestServeSuspendRefusedKeepsServing(t *testing.T) {
	store := &snapshotStore{t: t, refuse: http.StatusRequestEntityTooLarge}
	g := newSnapshotGateway(t, store)
	work := t.TempDir()
	// Incompressible and larger than the socket buffers: the gateway
	// answers before it read the body.
	random := make([]byte, 16<<20)
	rand.NewChaCha8([32]byte{7}).Read(random)
	write(t, filepath.Join(work, "big.bin"), string(random))
	errc, _ := startServe(t, g, t.TempDir(), work)
	gc := g.accept(t)
	gc.handshake(t, nil, nil)
	gc.send(t, api.Frame{Type: api.FrameSuspend})
	f := gc.next(t, api.FrameSuspended)
	if f.Snapshot == nil || !strings.Contains(f.Snapshot.Error, "413") || !strings.Contains(f.Snapshot.Error, "limit of 1 KiB") {
		t.Fatalf("suspended = %+v, want the gateway's refusal", f.Snapshot)
	}
	gc.send(t, execCall(1, "echo still here"))
	if res := gc.next(t, api.FrameResult); !res.OK {
		t.Fatalf("call after a failed suspend = %+v", res)
	}
	gc.send(t, api.Frame{Type: api.FrameAck, Seq: 1})
	gc.send(t, api.Frame{Type: api.FrameEnd})
	if err := waitErr(t, errc); err != nil {
		t.Fatal(err)
	}
}

// TestServeRestoresSnapshotBeforeCalls: a welcome naming a snapshot makes
// the remote download and restore it before the first call runs, replacing
// what the workspace held but its state dir; the repositories of
// welcome.Restore that the snapshot brought back are kept, not cloned.
func TestServeRestoresSnapshotBeforeCalls(t *testing.T) {
	src := t.TempDir()
	write(t, filepath.Join(src, "notes.txt"), "from the snapshot\n")
	gitT(t, src, "init", "-q", "repos/app")
	write(t, filepath.Join(src, "repos", "app", "wip.go"), "uncommitted\n")
	var buf bytes.Buffer
	info, err := snapshot.Write(context.Background(), &buf, src, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store := &snapshotStore{t: t, archive: buf.Bytes()}
	g := newSnapshotGateway(t, store)

	work := t.TempDir()
	state := filepath.Join(work, ".state")
	write(t, filepath.Join(work, "stale.txt"), "from before")
	errc, _ := startServe(t, g, state, work)
	gc := g.accept(t)
	gc.next(t, api.FrameHello)
	gc.send(t, api.Frame{Type: api.FrameWelcome, Snapshot: &info,
		Restore: []api.GitCloneArgs{{URL: filepath.Join(t.TempDir(), "missing.git"), Name: "app"}}})
	gc.send(t, execCall(1, "cat notes.txt repos/app/wip.go; ls"))

	restored := gc.next(t, api.FrameRestored)
	got := restored.SnapshotRestored
	if got == nil || got.Error != "" || got.SHA256 != info.SHA256 || got.Size != info.Size || got.Files != info.Files {
		t.Fatalf("snapshot_restored = %+v, want %+v", got, info)
	}
	if restored.Restored != nil {
		t.Errorf("restored repos = %+v, want none: the snapshot brought app back", restored.Restored)
	}
	res := gc.next(t, api.FrameResult)
	if !res.OK {
		t.Fatalf("call = %+v", res)
	}
	out := gc.output(1, api.StreamStdout)
	if !strings.Contains(out, "from the snapshot\nuncommitted\n") || strings.Contains(out, "stale.txt") {
		t.Errorf("the call saw %q", out)
	}
	if entries, err := os.ReadDir(state); err != nil || len(entries) == 0 {
		t.Errorf("the restore removed the remote's state dir or emptied it: %v", err)
	}
	gc.send(t, api.Frame{Type: api.FrameAck, Seq: 1})
	gc.send(t, api.Frame{Type: api.FrameEnd})
	if err := waitErr(t, errc); err != nil {
		t.Fatal(err)
	}
}

// TestServeSnapshotRestoreFails: a snapshot that does not match its
// checksum is reported in snapshot_restored and the session goes on with
// the workspace as it was.
func TestServeSnapshotRestoreFails(t *testing.T) {
	src := t.TempDir()
	write(t, filepath.Join(src, "notes.txt"), "from the snapshot\n")
	var buf bytes.Buffer
	info, err := snapshot.Write(context.Background(), &buf, src, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	info.SHA256 = strings.Repeat("ab", 32)
	g := newSnapshotGateway(t, &snapshotStore{t: t, archive: buf.Bytes()})
	work := t.TempDir()
	write(t, filepath.Join(work, "mine.txt"), "kept\n")
	errc, _ := startServe(t, g, t.TempDir(), work)
	gc := g.accept(t)
	gc.next(t, api.FrameHello)
	gc.send(t, api.Frame{Type: api.FrameWelcome, Snapshot: &info})
	gc.send(t, execCall(1, "cat mine.txt"))
	restored := gc.next(t, api.FrameRestored)
	if got := restored.SnapshotRestored; got == nil || !strings.Contains(got.Error, "checksum") || got.SHA256 != info.SHA256 {
		t.Fatalf("snapshot_restored = %+v, want a checksum error", got)
	}
	if res := gc.next(t, api.FrameResult); !res.OK || gc.output(1, api.StreamStdout) != "kept\n" {
		t.Fatalf("call = %+v, output %q", res, gc.output(1, api.StreamStdout))
	}
	gc.send(t, api.Frame{Type: api.FrameAck, Seq: 1})
	gc.send(t, api.Frame{Type: api.FrameEnd})
	if err := waitErr(t, errc); err != nil {
		t.Fatal(err)
	}
}

func TestSnapshotURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"ws://127.0.0.1:7420/v1/gateway":          "http://127.0.0.1:7420/v1/gateway/snapshot",
		"wss://gw.example/v1/gateway":             "https://gw.example/v1/gateway/snapshot",
		"wss://gw.example/outpost/v1/gateway?x=1": "https://gw.example/outpost/v1/gateway/snapshot",
		"wss://gw.example/custom":                 "https://gw.example/v1/gateway/snapshot",
	} {
		got, err := snapshotURL(in)
		if err != nil || got != want {
			t.Errorf("snapshotURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := snapshotURL("http://x/v1/gateway"); err == nil {
		t.Error("snapshotURL accepted an http URL")
	}
}

// TestServeSuspendWaitsForARunningCall: a call running when suspend comes
// finishes first, and what it wrote last is in the snapshot.
func TestServeSuspendWaitsForARunningCall(t *testing.T) {
	store := &snapshotStore{t: t}
	g := newSnapshotGateway(t, store)
	work := t.TempDir()
	errc, _ := startServe(t, g, t.TempDir(), work)
	gc := g.accept(t)
	gc.handshake(t, nil, nil)
	gc.send(t, execCall(1, `echo started; while [ ! -f release ]; do sleep 0.02; done; echo last words > late.txt`))
	gc.waitOutput(t, 1, api.StreamStdout, "started")
	gc.send(t, api.Frame{Type: api.FrameSuspend})
	gc.send(t, execCall(2, "echo too late > refused.txt")) // refused: the suspend has begun
	if res := gc.next(t, api.FrameResult); res.Seq != 2 || res.Error != suspendingError {
		t.Fatalf("call during suspend = %+v", res)
	}
	write(t, filepath.Join(work, "release"), "")
	if res := gc.next(t, api.FrameResult); res.Seq != 1 || !res.OK {
		t.Fatalf("running call = %+v", res)
	}
	f := gc.next(t, api.FrameSuspended)
	if f.Snapshot == nil || f.Snapshot.Error != "" {
		t.Fatalf("suspended = %+v", f.Snapshot)
	}
	archive, _ := store.stored()
	dst := t.TempDir()
	if _, err := snapshot.Restore(context.Background(), bytes.NewReader(archive), dst, *f.Snapshot, snapshot.Options{}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "late.txt")); err != nil || string(b) != "last words\n" {
		t.Errorf("late.txt in the snapshot = %q, %v: the snapshot did not wait for the call", b, err)
	}
	if _, err := os.Stat(filepath.Join(dst, "refused.txt")); err == nil {
		t.Error("the call refused during the suspend ran")
	}
	gc.send(t, api.Frame{Type: api.FrameEnd})
	if err := waitErr(t, errc); err != nil {
		t.Fatal(err)
	}
}

// TestServeResumeInPlace: a remote that starts on the workspace and state
// dir of the remote that suspended the session (a volume kept across the
// suspend) keeps the workspace when asked to restore that very snapshot,
// downloading nothing; the record is gone once it started, so the next
// start downloads again, and a record of another snapshot is not trusted.
func TestServeResumeInPlace(t *testing.T) {
	store := &snapshotStore{t: t}
	g := newSnapshotGateway(t, store)
	work := t.TempDir()
	state := filepath.Join(t.TempDir(), "state")
	write(t, filepath.Join(work, "notes.txt"), "before the suspend\n")

	errc, _ := startServe(t, g, state, work)
	gc := g.accept(t)
	gc.handshake(t, nil, nil)
	gc.send(t, api.Frame{Type: api.FrameSuspend})
	f := gc.next(t, api.FrameSuspended)
	if f.Snapshot == nil || f.Snapshot.Error != "" {
		t.Fatalf("suspended = %+v", f.Snapshot)
	}
	info := *f.Snapshot
	gc.send(t, api.Frame{Type: api.FrameEnd, Reason: "suspended"})
	if err := waitErr(t, errc); err != nil {
		t.Fatal(err)
	}

	seq := int64(0) // the journal in the state dir remembers earlier calls
	resume := func(want api.SnapshotInfo) api.SnapshotInfo {
		t.Helper()
		seq++
		errc, _ := startServe(t, g, state, work)
		gc := g.accept(t)
		gc.next(t, api.FrameHello)
		gc.send(t, api.Frame{Type: api.FrameWelcome, Snapshot: &want})
		gc.send(t, execCall(seq, "echo changed > notes.txt"))
		restored := gc.next(t, api.FrameRestored)
		if res := gc.next(t, api.FrameResult); !res.OK {
			t.Fatalf("call = %+v", res)
		}
		gc.send(t, api.Frame{Type: api.FrameAck, Seq: seq})
		gc.send(t, api.Frame{Type: api.FrameEnd})
		if err := waitErr(t, errc); err != nil {
			t.Fatal(err)
		}
		if restored.SnapshotRestored == nil {
			t.Fatal("no snapshot_restored")
		}
		return *restored.SnapshotRestored
	}

	got := resume(info)
	if !got.InPlace || got.Error != "" || got.SHA256 != info.SHA256 || got.Files != info.Files {
		t.Fatalf("restore = %+v, want in place", got)
	}
	if store.gets != 0 {
		t.Errorf("%d downloads, want none", store.gets)
	}
	if _, err := os.Stat(filepath.Join(work, inPlaceFile)); !os.IsNotExist(err) {
		t.Errorf("the record outlived the start: %v", err)
	}

	// The workspace changed since (the call wrote notes.txt): the same
	// snapshot is downloaded and restored now.
	got = resume(info)
	if got.InPlace || got.Error != "" || store.gets != 1 {
		t.Fatalf("restore = %+v after %d downloads, want one download", got, store.gets)
	}
	if b, _ := os.ReadFile(filepath.Join(work, "notes.txt")); string(b) != "changed\n" {
		t.Errorf("notes.txt = %q, want the call's after the restore", b)
	}

	// A record of another snapshot is not trusted.
	write(t, filepath.Join(work, inPlaceFile), strings.Repeat("0", 64)+"\n")
	if got = resume(info); got.InPlace || store.gets != 2 {
		t.Errorf("restore = %+v after %d downloads, want a download", got, store.gets)
	}
}

// TestServeResumeClearedWorkspace: a long-lived worker clears its
// workspace between sessions but keeps the session's state dir; when the
// same worker takes the suspended session back, the record of the
// snapshot went with the workspace, and the snapshot is downloaded and
// restored (not trusted to be in place).
func TestServeResumeClearedWorkspace(t *testing.T) {
	store := &snapshotStore{t: t}
	g := newSnapshotGateway(t, store)
	work := t.TempDir()
	state := filepath.Join(t.TempDir(), "state")
	write(t, filepath.Join(work, "notes.txt"), "before the suspend\n")
	errc, _ := startServe(t, g, state, work)
	gc := g.accept(t)
	gc.handshake(t, nil, nil)
	gc.send(t, api.Frame{Type: api.FrameSuspend})
	f := gc.next(t, api.FrameSuspended)
	if f.Snapshot == nil || f.Snapshot.Error != "" {
		t.Fatalf("suspended = %+v", f.Snapshot)
	}
	gc.send(t, api.Frame{Type: api.FrameEnd, Reason: "suspended"})
	if err := waitErr(t, errc); err != nil {
		t.Fatal(err)
	}
	// The worker's hygiene between sessions.
	entries, err := os.ReadDir(work)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(work, e.Name())); err != nil {
			t.Fatal(err)
		}
	}

	errc, _ = startServe(t, g, state, work)
	gc = g.accept(t)
	gc.next(t, api.FrameHello)
	gc.send(t, api.Frame{Type: api.FrameWelcome, Snapshot: f.Snapshot})
	gc.send(t, execCall(1, "cat notes.txt"))
	restored := gc.next(t, api.FrameRestored)
	if r := restored.SnapshotRestored; r == nil || r.InPlace || r.Error != "" || store.gets != 1 {
		t.Fatalf("restore = %+v after %d downloads, want one download", r, store.gets)
	}
	if res := gc.next(t, api.FrameResult); !res.OK || !strings.Contains(gc.output(1, api.StreamStdout), "before the suspend") {
		t.Errorf("call = %+v, output %q", res, gc.output(1, api.StreamStdout))
	}
	gc.send(t, api.Frame{Type: api.FrameAck, Seq: 1})
	gc.send(t, api.Frame{Type: api.FrameEnd})
	if err := waitErr(t, errc); err != nil {
		t.Fatal(err)
	}
}

// TestServeNoSnapshotAfterFailedRestore: a restore that fails half-way (an
// archive cut in the middle) leaves the workspace as it was, and the remote
// then takes no snapshot of it — neither for a checkpoint nor for a suspend,
// nor once started again on the same state dir — since the server would
// store it over the session's good snapshot; the session goes on.
func TestServeNoSnapshotAfterFailedRestore(t *testing.T) {
	src := t.TempDir()
	write(t, filepath.Join(src, "a.txt"), "from the snapshot\n")
	random := make([]byte, 1<<20)
	rand.NewChaCha8([32]byte{9}).Read(random)
	write(t, filepath.Join(src, "b.bin"), string(random))
	var buf bytes.Buffer
	info, err := snapshot.Write(context.Background(), &buf, src, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store := &snapshotStore{t: t, archive: buf.Bytes()[:buf.Len()/2]}
	g := newSnapshotGateway(t, store)
	work, state := t.TempDir(), t.TempDir()
	write(t, filepath.Join(work, "mine.txt"), "kept\n")

	errc, _ := startServe(t, g, state, work)
	gc := g.accept(t)
	gc.next(t, api.FrameHello)
	gc.send(t, api.Frame{Type: api.FrameWelcome, Snapshot: &info})
	gc.send(t, execCall(1, "cat mine.txt; ls -A"))
	if got := gc.next(t, api.FrameRestored).SnapshotRestored; got == nil || got.Error == "" {
		t.Fatalf("snapshot_restored = %+v, want an error", got)
	}
	if res := gc.next(t, api.FrameResult); !res.OK || gc.output(1, api.StreamStdout) != "kept\nmine.txt\n" {
		t.Fatalf("call = %+v, output %q: the workspace is not as it was", res, gc.output(1, api.StreamStdout))
	}
	gc.send(t, api.Frame{Type: api.FrameAck, Seq: 1})

	refused := func(gc *gwConn, typ, answer string) {
		t.Helper()
		gc.send(t, api.Frame{Type: typ})
		f := gc.next(t, answer)
		if f.Snapshot == nil || !strings.Contains(f.Snapshot.Error, "no snapshot was taken") {
			t.Fatalf("%s = %+v, want a refusal", answer, f.Snapshot)
		}
		if _, puts := store.stored(); puts != 0 {
			t.Fatalf("%d uploads after a failed restore, want none", puts)
		}
	}
	refused(gc, api.FrameCheckpoint, api.FrameCheckpointed)
	refused(gc, api.FrameSuspend, api.FrameSuspended)
	gc.send(t, execCall(2, "echo still here"))
	if res := gc.next(t, api.FrameResult); !res.OK {
		t.Fatalf("call after the refused suspend = %+v", res)
	}
	gc.send(t, api.Frame{Type: api.FrameAck, Seq: 2})
	gc.send(t, api.Frame{Type: api.FrameEnd})
	if err := waitErr(t, errc); err != nil {
		t.Fatal(err)
	}

	// A remote started again on the same state dir (a reconnect of the
	// claim: no snapshot in its welcome) refuses too.
	errc, _ = startServe(t, g, state, work)
	gc = g.accept(t)
	gc.handshake(t, nil, nil)
	refused(gc, api.FrameSuspend, api.FrameSuspended)
	gc.send(t, api.Frame{Type: api.FrameEnd})
	if err := waitErr(t, errc); err != nil {
		t.Fatal(err)
	}
}
