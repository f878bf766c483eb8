package remote

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// fakeArtifactServer drains a call's outbox like the gateway would and
// answers each finished upload the way the control plane does.
type fakeArtifactServer struct {
	s        *session
	out      *outbox
	reject   atomic.Pointer[string] // when set, every upload is refused with it
	received chan receivedArtifact
}

type receivedArtifact struct {
	begin, end *api.ArtifactFrame
	seq        int64
	data       []byte
	aborted    bool
}

func newFakeArtifactServer(t *testing.T, tc *testCall) *fakeArtifactServer {
	t.Helper()
	tc.out.setConnected(true)
	return &fakeArtifactServer{s: tc.s, out: tc.out, received: make(chan receivedArtifact, 8)}
}

// run serves until ctx ends.
func (f *fakeArtifactServer) run(ctx context.Context) {
	cur := map[int64]*receivedArtifact{}
	for {
		it, ok := f.out.pop()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-f.out.notify:
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		a := it.artifact
		if a == nil {
			continue
		}
		if a.frame == nil {
			if r := cur[a.id]; r != nil {
				r.data = append(r.data, a.chunk...)
			}
			continue
		}
		af := a.frame.Artifact
		switch af.Phase {
		case api.ArtifactBegin:
			cur[af.ID] = &receivedArtifact{begin: af, seq: a.frame.Seq}
		case api.ArtifactAbort:
			r := cur[af.ID]
			if r == nil { // its begin was still in the outbox and dropped
				r = &receivedArtifact{seq: a.frame.Seq}
			}
			r.aborted = true
			f.received <- *r
		case api.ArtifactEnd:
			r := cur[af.ID]
			r.end = af
			sum := sha256.Sum256(r.data)
			ack := api.Frame{Type: api.FrameArtifactAck, Artifact: &api.ArtifactFrame{ID: af.ID, Name: af.Name,
				ContentType: r.begin.ContentType, Size: int64(len(r.data)), SHA256: hex.EncodeToString(sum[:])}}
			if rej := f.reject.Load(); rej != nil {
				ack = api.Frame{Type: api.FrameArtifactAck, Artifact: &api.ArtifactFrame{ID: af.ID}, Error: *rej}
			}
			f.received <- *r
			f.s.handleArtifactAck(ack)
		}
	}
}

func startFakeArtifactServer(t *testing.T, tc *testCall) *fakeArtifactServer {
	f := newFakeArtifactServer(t, tc)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

func (f *fakeArtifactServer) next(t *testing.T) receivedArtifact {
	t.Helper()
	select {
	case r := <-f.received:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no upload reached the server")
		return receivedArtifact{}
	}
}

func TestUploadArtifact(t *testing.T) {
	t.Parallel()
	work := t.TempDir()
	data := make([]byte, 3*artifactChunkSize+12345)
	rand.Read(data)
	if err := os.WriteFile(filepath.Join(work, "report.txt"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	tc := newTestCall(t, work, nil)
	srv := startFakeArtifactServer(t, tc)
	var ref api.ArtifactRef
	if err := tc.run(t, context.Background(), api.ToolUploadArtifact, api.UploadArtifactArgs{Path: "report.txt"}, &ref); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if ref.Name != "report.txt" || ref.Size != int64(len(data)) || ref.SHA256 != hex.EncodeToString(sum[:]) || !strings.HasPrefix(ref.ContentType, "text/plain") {
		t.Fatalf("ref %+v", ref)
	}
	got := srv.next(t)
	if !bytes.Equal(got.data, data) || got.seq != 1 || got.end.Size != int64(len(data)) {
		t.Fatalf("server got %d bytes (seq %d), want %d", len(got.data), got.seq, len(data))
	}

	// A name is given; the content type is sniffed without an extension.
	if err := os.WriteFile(filepath.Join(work, "page"), []byte("<html><body>hi</body></html>"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := tc.run(t, context.Background(), api.ToolUploadArtifact, api.UploadArtifactArgs{Path: filepath.Join(work, "page"), Name: "index"}, &ref); err != nil {
		t.Fatal(err)
	}
	if ref.Name != "index" || !strings.HasPrefix(ref.ContentType, "text/html") {
		t.Fatalf("ref %+v", ref)
	}
	srv.next(t)
}

func TestUploadArtifactRefusals(t *testing.T) {
	t.Parallel()
	work := t.TempDir()
	for name, content := range map[string]string{"ok.txt": "x", ".hidden": "x", "leak.txt": strings.Repeat("a", artifactChunkSize-3) + "hunter2-secret"} {
		if err := os.WriteFile(filepath.Join(work, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	big, err := os.Create(filepath.Join(work, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := big.Truncate(api.MaxArtifactBytes + 1); err != nil {
		t.Fatal(err)
	}
	big.Close()
	tc := newTestCall(t, work, map[string]string{"API_KEY": "hunter2-secret"})
	srv := startFakeArtifactServer(t, tc)
	ctx := context.Background()
	for _, c := range []struct {
		args api.UploadArtifactArgs
		want string
	}{
		{api.UploadArtifactArgs{Path: "ok.txt", Name: "../x"}, "not valid"},
		{api.UploadArtifactArgs{Path: "ok.txt", Name: "a/b"}, "not valid"},
		{api.UploadArtifactArgs{Path: ".hidden"}, "pass a name"},
		{api.UploadArtifactArgs{Path: "missing.txt"}, "no such file"},
		{api.UploadArtifactArgs{Path: "."}, "is a directory"},
		{api.UploadArtifactArgs{Path: "big.bin"}, "over the artifact limit of 100 MiB"},
		{api.UploadArtifactArgs{}, "path is required"},
	} {
		err := tc.run(t, ctx, api.ToolUploadArtifact, c.args, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.args, err, c.want)
		}
	}
	// A secret split across two chunks is found; the server discards the
	// upload.
	err = tc.run(t, ctx, api.ToolUploadArtifact, api.UploadArtifactArgs{Path: "leak.txt"}, nil)
	if err == nil || !strings.Contains(err.Error(), "secret API_KEY") {
		t.Fatalf("secret upload: %v", err)
	}
	if got := srv.next(t); !got.aborted {
		t.Fatalf("the server was not told to discard the upload: %+v", got)
	}
	// The server's refusal reaches the tool.
	rej := "too many artifacts"
	srv.reject.Store(&rej)
	err = tc.run(t, ctx, api.ToolUploadArtifact, api.UploadArtifactArgs{Path: "ok.txt"}, nil)
	if err == nil || !strings.Contains(err.Error(), "too many artifacts") {
		t.Fatalf("refused upload: %v", err)
	}
}

func TestUploadArtifactDisconnected(t *testing.T) {
	t.Parallel()
	tc := newTestCall(t, t.TempDir(), nil)
	// Not connected: refused at once.
	_, err := tc.c.uploadArtifact(context.Background(), "a.bin", "", strings.NewReader("x"))
	if err == nil || !strings.Contains(err.Error(), "not connected") {
		t.Fatalf("disconnected upload: %v", err)
	}
	// Connected but the connection drops before the ack: the upload fails
	// and its frames leave the outbox.
	tc.out.setConnected(true)
	errc := make(chan error, 1)
	go func() {
		_, err := tc.c.uploadArtifact(context.Background(), "a.bin", "", strings.NewReader("hello"))
		errc <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tc.out.mu.Lock()
		n := len(tc.out.items)
		tc.out.mu.Unlock()
		if n == 3 { // begin, chunk, end
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("outbox holds %d items, want 3", n)
		}
		select {
		case <-tc.out.notify:
		case <-time.After(10 * time.Millisecond):
		}
	}
	tc.out.setConnected(false)
	tc.s.abortUploads()
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "connection was lost") {
			t.Fatalf("upload over a lost connection: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("upload did not fail after the connection was lost")
	}
	if it, ok := tc.out.pop(); ok {
		t.Fatalf("outbox still holds %+v", it)
	}
}
