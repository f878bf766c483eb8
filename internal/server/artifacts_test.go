package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/remote"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// runRemote serves session id with the real remote, in process, until the
// session ends.
func runRemote(t *testing.T, ts *testServer, id, work string) {
	t.Helper()
	claim := ts.claimFor(id, "m1")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- remote.Serve(ctx, remote.Options{
			GatewayURL:   ts.srv.gatewayURL,
			ConnectToken: claim.Status.ConnectToken,
			SessionID:    id,
			StateDir:     t.TempDir(),
			WorkDir:      work,
			Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
			Capabilities: &api.Capabilities{OS: "test", Tools: api.ToolNames()},
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("remote: %v", err)
		}
	})
}

func waitEnded(t *testing.T, ts *testServer, id string) api.Session {
	t.Helper()
	var s api.Session
	waitfor.True(t, "the session to end", func() bool {
		ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &s)
		return api.IsFinal(s.Status.Status)
	})
	return s
}

func TestArtifactsRoundTrip(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("art")
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"art","agent":{"kind":"script","steps":[
		{"tool":"exec","args":{"command":"mkdir -p out && head -c 700000 /dev/urandom > out/data.bin && echo '{\"a\":1}' > out/r.json"}},
		{"tool":"upload_artifact","args":{"path":"out/data.bin"}},
		{"tool":"upload_artifact","args":{"path":"out/r.json","name":"result.json"}}]}}`, &s)
	id := s.Metadata.SessionID
	work := t.TempDir()
	runRemote(t, ts, id, work)
	if end := waitEnded(t, ts, id); end.Status.Status != api.StatusExit {
		t.Fatalf("session ended %+v", end.Status)
	}
	want, err := os.ReadFile(filepath.Join(work, "out", "data.bin"))
	if err != nil {
		t.Fatal(err)
	}
	var l api.ArtifactList
	ts.mustDo(200, "GET", "/v1/sessions/"+id+"/artifacts", ts.admin, nil, &l)
	if len(l.Items) != 2 || l.Items[0].Name != "data.bin" || l.Items[1].Name != "result.json" {
		t.Fatalf("artifacts %+v", l.Items)
	}
	sum := sha256.Sum256(want)
	if a := l.Items[0]; a.Size != int64(len(want)) || a.SHA256 != hex.EncodeToString(sum[:]) || a.CallSeq != 2 || a.CreatedAt.IsZero() {
		t.Fatalf("data.bin %+v", a)
	}
	if ct := l.Items[1].ContentType; ct != "application/json" {
		t.Fatalf("result.json content type %q", ct)
	}

	// A reader token may download; the bytes and type are kept.
	reader := ts.token([]string{api.ScopeSessionsRead}, "")
	resp := get(t, ts.url+"/v1/sessions/"+id+"/artifacts/data.bin", reader)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != string(want) {
		t.Fatalf("download: %d, %d bytes", resp.StatusCode, len(body))
	}
	resp = get(t, ts.url+"/v1/sessions/"+id+"/artifacts/result.json", reader)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != "application/json" || strings.TrimSpace(string(body)) != `{"a":1}` {
		t.Fatalf("result.json: %q %q", resp.Header.Get("Content-Type"), body)
	}
	// A range past the end is refused in the JSON envelope, like every error.
	req, _ := http.NewRequest("GET", ts.url+"/v1/sessions/"+id+"/artifacts/data.bin", nil)
	req.Header.Set("Authorization", "Bearer "+reader)
	req.Header.Set("Range", "bytes=99999999-")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var env api.ErrorResponse
	if resp.StatusCode != http.StatusRequestedRangeNotSatisfiable || json.Unmarshal(body, &env) != nil ||
		env.Error.Message == "" || env.Detail != env.Error.Message || resp.Header.Get("Content-Disposition") != "" {
		t.Fatalf("range past the end: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	for name, want := range map[string]int{"nope": 404, ".meta": 404, "..%2Fx": 400, "%2E%2E": 400} {
		// Names that make the path non-canonical are refused before any
		// route (withRequestChecks).
		if code := ts.do("GET", "/v1/sessions/"+id+"/artifacts/"+name, reader, nil, nil); code != want {
			t.Errorf("artifact %s: %d, want %d", name, code, want)
		}
	}
	if code := ts.do("GET", "/v1/sessions/ses_nope/artifacts", reader, nil, nil); code != 404 {
		t.Errorf("artifacts of an unknown session: %d", code)
	}
	if code := ts.do("GET", "/v1/sessions/"+id+"/artifacts", "", nil, nil); code != 401 {
		t.Errorf("artifacts without a token: %d", code)
	}

	// The transcript records each artifact after its call's output.
	var evs api.EventList
	ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events", ts.admin, nil, &evs)
	var arts []api.Event
	for _, e := range evs.Items {
		if e.Type == api.EventArtifact {
			arts = append(arts, e)
		}
	}
	if len(arts) != 2 || arts[0].Artifact == nil || arts[0].Artifact.Name != "data.bin" || arts[0].CallSeq != 2 {
		b, _ := json.Marshal(arts)
		t.Fatalf("artifact events %s", b)
	}
}

func TestArtifactsSessionLimit(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("lim")
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"lim","agent":{"kind":"script","steps":[
		{"tool":"exec","args":{"command":"echo hi > small.txt"}},
		{"tool":"upload_artifact","args":{"path":"small.txt"}}]}}`, &s)
	id := s.Metadata.SessionID
	// The session already holds artifacts up to its limit.
	meta := filepath.Join(ts.srv.artifactDir(id), ".meta")
	if err := os.MkdirAll(meta, 0o700); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(api.Artifact{Name: "huge.bin", Size: api.MaxSessionArtifactBytes - 1, ContentType: "application/octet-stream"})
	if err := os.WriteFile(filepath.Join(meta, "huge.bin.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	runRemote(t, ts, id, t.TempDir())
	waitEnded(t, ts, id)
	var evs api.EventList
	ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events", ts.admin, nil, &evs)
	found := false
	for _, e := range evs.Items {
		if e.Type == api.EventResult && e.CallSeq == 2 {
			found = strings.Contains(e.Error, "limit of 1024 MiB")
			if !found {
				t.Fatalf("result %+v", e)
			}
		}
	}
	if !found {
		t.Fatal("no result of the upload")
	}
	entries, _ := os.ReadDir(ts.srv.artifactDir(id))
	for _, e := range entries {
		if e.Name() != ".meta" {
			t.Errorf("left behind %s", e.Name())
		}
	}
}

func get(t *testing.T, url, token string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
