package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/blob"
	"github.com/outpost-sh/outpost/internal/blob/s3test"
	"github.com/outpost-sh/outpost/internal/datadir"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
)

// artifactDir is where the file blob store keeps a session's artifacts:
// the data dir layout older servers wrote and tests look into.
func (s *Server) artifactDir(sessionID string) string {
	return filepath.Join(s.opts.DataDir, datadir.Artifacts, sessionID)
}

// startBlobReplica starts a server as startServer does and returns it
// with a stop that ends it at once (a replica going away).
func startBlobReplica(t *testing.T, opts Options) (*testServer, func()) {
	t.Helper()
	if opts.DataDir == "" {
		opts.DataDir = t.TempDir()
	}
	opts.Listen = "127.0.0.1:0"
	opts.Stdout = io.Discard
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := New(ctx, opts)
	if err != nil {
		cancel()
		t.Fatalf("new server: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		}
	}
	t.Cleanup(stop)
	return &testServer{t: t, srv: srv, url: srv.URL(), admin: srv.AdminToken()}, stop
}

// startBlobPair starts two servers on one fresh database of pg with one
// secret key, both with opts: two replicas sharing the blob store. A's
// admin token is both's.
func startBlobPair(t *testing.T, pg *pgtest.Server, opts Options) (a *testServer, stopA func(), b *testServer) {
	t.Helper()
	opts.DatabaseURL = pg.Database(t)
	opts.SecretKey = make([]byte, 32)
	_, _ = rand.Read(opts.SecretKey)
	a, stopA = startBlobReplica(t, opts)
	b, _ = startBlobReplica(t, opts)
	b.admin = a.admin
	return a, stopA, b
}

func hexSum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// TestBlobsAcrossReplicas: two servers on one PostgreSQL database share
// their blobs — an artifact uploaded through A, the spilled output of a
// session run through A and a snapshot put through A are read through B,
// after A has gone.
func TestBlobsAcrossReplicas(t *testing.T) {
	t.Parallel()
	pg := pgtest.StartT(t, pgtest.Options{})
	for name, scenario := range blobScenarios {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a, stopA, b := startBlobPair(t, pg, Options{OutputCapBytes: spillCap})
			scenario(t, a, stopA, b)
		})
	}
}

// TestBlobsAcrossReplicasS3: the same with the blobs in a bucket of a real
// S3-compatible server (blob/s3test; skipped without one).
func TestBlobsAcrossReplicasS3(t *testing.T) {
	o := s3test.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", o.AccessKey) // no t.Parallel: the environment
	t.Setenv("AWS_SECRET_ACCESS_KEY", o.SecretKey)
	pg := pgtest.StartT(t, pgtest.Options{})
	for name, scenario := range blobScenarios {
		t.Run(name, func(t *testing.T) {
			url := fmt.Sprintf("s3://%s/%s?endpoint=%s&region=%s&insecure=true", o.Bucket, strings.ToLower(name), o.Endpoint, o.Region)
			a, stopA, b := startBlobPair(t, pg, Options{OutputCapBytes: spillCap, BlobStore: url})
			scenario(t, a, stopA, b)
		})
	}
}

// spillCap is the transcript's cap of call output in the scenarios.
const spillCap = 4096

// blobScenarios each use a blob through replica a, stop a, and read it
// through b.
var blobScenarios = map[string]func(t *testing.T, a *testServer, stopA func(), b *testServer){
	"Artifact":      artifactAcrossReplicas,
	"SpilledOutput": spillAcrossReplicas,
	"Snapshot":      snapshotAcrossReplicas,
}

// artifactAcrossReplicas: an artifact uploaded through a is listed and
// downloaded (whole and a range) through b, and deleted through b.
func artifactAcrossReplicas(t *testing.T, a *testServer, stopA func(), b *testServer) {
	a.outpost("art")
	work := t.TempDir()
	big := make([]byte, 3<<20+17) // several chunks
	_, _ = rand.Read(big)
	if err := os.WriteFile(filepath.Join(work, "big.bin"), big, 0o600); err != nil {
		t.Fatal(err)
	}
	var s api.Session
	a.mustDo(201, "POST", "/v1/sessions", a.admin, `{"outpost":"art","agent":{"kind":"script","steps":[
		{"tool":"upload_artifact","args":{"path":"big.bin"}}]}}`, &s)
	id := s.Metadata.SessionID
	runRemote(t, a, id, work)
	if end := waitEnded(t, a, id); end.Status.Status != api.StatusExit {
		t.Fatalf("session ended %+v", end.Status)
	}
	stopA()
	var list api.ArtifactList
	b.mustDo(200, "GET", "/v1/sessions/"+id+"/artifacts", b.admin, nil, &list)
	if len(list.Items) != 1 || list.Items[0].Name != "big.bin" || list.Items[0].Size != int64(len(big)) || list.Items[0].SHA256 != hexSum(big) {
		t.Fatalf("artifacts through B: %+v", list.Items)
	}
	resp := get(t, b.url+"/v1/sessions/"+id+"/artifacts/big.bin", b.admin)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(got, big) {
		t.Fatalf("download through B: %d, %d bytes (want %d)", resp.StatusCode, len(got), len(big))
	}
	// A range, as a resumed download asks.
	req, _ := http.NewRequest("GET", b.url+"/v1/sessions/"+id+"/artifacts/big.bin", nil)
	req.Header.Set("Authorization", "Bearer "+b.admin)
	req.Header.Set("Range", "bytes=1048570-1048589")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(got, big[1048570:1048590]) {
		t.Fatalf("range through B: %d %q", resp.StatusCode, got)
	}
	// Nothing in either data dir: the bytes are in the database.
	for _, ts := range []*testServer{a, b} {
		if _, err := os.Stat(ts.srv.artifactDir(id)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the artifact is in a data dir: %v", err)
		}
	}
	// Retention through B deletes them for everyone.
	if n, _, err := b.srv.retention.DeleteArtifacts(t.Context(), id); err != nil || n != 1 {
		t.Fatalf("delete artifacts through B = %d, %v", n, err)
	}
	resp = get(t, b.url+"/v1/sessions/"+id+"/artifacts/big.bin", b.admin)
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("download after the delete: %d", resp.StatusCode)
	}
}

// spillAcrossReplicas: the output a call spilled through a is read
// through b, and with the transcript's part makes the call's output.
func spillAcrossReplicas(t *testing.T, a *testServer, stopA func(), b *testServer) {
	a.outpost("out")
	var s api.Session
	a.mustDo(201, "POST", "/v1/sessions", a.admin, `{"outpost":"out","agent":{"kind":"script","steps":[
		{"tool":"exec","args":{"command":"seq 1 300000"}}]}}`, &s)
	id := s.Metadata.SessionID
	runRemote(t, a, id, t.TempDir())
	if end := waitEnded(t, a, id); end.Status.Status != api.StatusExit {
		t.Fatalf("session ended %+v", end.Status)
	}
	stopA()
	var want strings.Builder
	for i := 1; i <= 300000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	var evs api.EventList
	b.mustDo(200, "GET", "/v1/sessions/"+id+"/events?limit=1000", b.admin, nil, &evs)
	var kept strings.Builder
	note := ""
	for _, e := range evs.Items {
		if e.Type == api.EventOutput && e.CallSeq == 1 {
			if e.Spilled {
				note = e.Text
			} else {
				kept.WriteString(e.Text)
			}
		}
	}
	if kept.Len() != spillCap || !strings.Contains(note, "GET /v1/sessions/"+id+"/output/1") {
		t.Fatalf("transcript kept %d bytes; note %q", kept.Len(), note)
	}
	resp := get(t, b.url+"/v1/sessions/"+id+"/output/1", b.admin)
	spilled, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("spilled output through B: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if kept.String()+string(spilled) != want.String() {
		t.Fatalf("transcript (%d bytes) + spilled output (%d bytes) are not the call's output (%d bytes)", kept.Len(), len(spilled), want.Len())
	}
	resp = get(t, b.url+"/v1/sessions/"+id+"/output/2", b.admin)
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("spilled output of a call without any: %d", resp.StatusCode)
	}
}

// snapshotAcrossReplicas: a snapshot put through a is counted and served
// through b to the remote of the session's next claim.
func snapshotAcrossReplicas(t *testing.T, a *testServer, stopA func(), b *testServer) {
	a.outpost("sus")
	archive := make([]byte, 2<<20+5)
	_, _ = rand.Read(archive)
	id := suspendLive(t, a, "sus", archive)
	stopA()
	if v, _ := sample(t, b, "outpost_snapshot_bytes", `outpost="sus"`); v != float64(len(archive)) {
		t.Errorf("outpost_snapshot_bytes through B = %v, want %d", v, len(archive))
	}
	b.mustDo(200, "POST", "/v1/queue/"+id+"/release", b.admin, api.ClaimRequest{AcceptorID: "m1", Reason: "the machine went away"}, nil)
	b.mustDo(200, "POST", "/v1/sessions/"+id+"/resume", b.admin, nil, nil)
	claim := b.claimFor(id, "m2")
	code, body := b.snapshotRequest("GET", id, claim.Status.ConnectToken, nil)
	if code != 200 || !bytes.Equal(body, archive) {
		t.Fatalf("GET snapshot through B: %d, %d bytes (want %d)", code, len(body), len(archive))
	}
}

// TestBlobStoreMovesDataDirIntoPostgres: a server on PostgreSQL whose data
// dir still holds blobs of the file store moves them into the database at
// start, so what it served before it serves still, through any replica.
func TestBlobStoreMovesDataDirIntoPostgres(t *testing.T) {
	t.Parallel()
	pg := pgtest.StartT(t, pgtest.Options{})
	opts := Options{DatabaseURL: pg.Database(t), SecretKey: make([]byte, 32), DataDir: t.TempDir()}
	files := blob.FS{Dir: opts.DataDir}
	for key, v := range map[string]string{
		"artifacts/ses_x/a.txt": "artifact", "artifacts/ses_x/.meta/a.txt.json": "{}",
		"output/ses_x/3.log": "spilled", "snapshots/ses_x-1": "archive",
	} {
		if _, _, err := files.Put(t.Context(), key, strings.NewReader(v), 100); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := files.Put(t.Context(), "unrelated/x", strings.NewReader("stays"), 100); err != nil {
		t.Fatal(err)
	}
	a, _ := startBlobReplica(t, opts)
	for _, prefix := range blobPrefixes {
		if left, _ := files.List(t.Context(), prefix); len(left) != 0 {
			t.Fatalf("the data dir holds %+v after the move", left)
		}
	}
	if left, _ := files.List(t.Context(), "unrelated/"); len(left) != 1 {
		t.Fatalf("the move took unrelated/x: %+v", left)
	}
	r, _, err := a.srv.outputBlobs.Get(t.Context(), "ses_x/3.log")
	if err != nil {
		t.Fatalf("the spilled output was not moved: %v", err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	if string(b) != "spilled" {
		t.Fatalf("moved spilled output %q", b)
	}
	// A server told to keep files keeps them there.
	opts.DataDir, opts.BlobStore = t.TempDir(), BlobStoreFS
	c, _ := startBlobReplica(t, opts)
	if _, _, err := c.srv.blobs.Put(t.Context(), "k", strings.NewReader("v"), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(opts.DataDir, "snapshots", "k")); err != nil {
		t.Fatalf("--blob-store fs did not write the data dir: %v", err)
	}
	// And the embedded database cannot keep blobs.
	if _, err := New(t.Context(), Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", BlobStore: BlobStorePostgres, Stdout: io.Discard,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}); err == nil || !strings.Contains(err.Error(), "--blob-store fs") {
		t.Fatalf("postgres blobs with SQLite: %v", err)
	}
}
