package server

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/retention"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// plantArtifact stores an artifact of a session the way an upload does:
// the file and its metadata.
func plantArtifact(t *testing.T, ts *testServer, id, name, contentType string, data []byte) {
	t.Helper()
	dir := ts.srv.artifactDir(id)
	if err := os.MkdirAll(filepath.Join(dir, ".meta"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(api.Artifact{Name: name, Size: int64(len(data)), ContentType: contentType, CreatedAt: ts.srv.now().UTC()})
	if err := os.WriteFile(filepath.Join(dir, ".meta", name+".json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// artifactCode is the status of a download.
func artifactCode(t *testing.T, ts *testServer, id, name string) (int, api.ErrorResponse) {
	t.Helper()
	resp := get(t, ts.url+"/v1/sessions/"+id+"/artifacts/"+name, ts.admin)
	defer resp.Body.Close()
	var e api.ErrorResponse
	if resp.StatusCode >= 400 {
		raw, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatalf("download %s/%s: %d %s", id, name, resp.StatusCode, raw)
		}
	}
	return resp.StatusCode, e
}

func artifactNames(t *testing.T, ts *testServer, id string) []string {
	t.Helper()
	var l api.ArtifactList
	ts.mustDo(200, "GET", "/v1/sessions/"+id+"/artifacts", ts.admin, nil, &l)
	names := []string{}
	for _, a := range l.Items {
		names = append(names, a.Name)
	}
	return names
}

// TestArtifactRetention moves the server's clock past the retention: the
// artifacts of a session that ended longer ago are deleted (files, list,
// 410 on download, no inline media on the web page), those of a session
// that ended recently and of one that has not ended are kept.
func TestArtifactRetention(t *testing.T) {
	t.Parallel()
	const retention = 30 * 24 * time.Hour
	clock := &testClock{t: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	ts := startServer(t, Options{Now: clock.Now, ArtifactRetention: retention})
	ts.outpost("ret")

	old := ts.session("ret").Metadata.SessionID
	recent := ts.session("ret").Metadata.SessionID
	running := ts.session("ret").Metadata.SessionID
	ts.claimFor(running, "m1")
	png := []byte("\x89PNG fake image bytes")
	for _, id := range []string{old, recent, running} {
		plantArtifact(t, ts, id, "shot.png", "image/png", png)
		plantArtifact(t, ts, id, "log.txt", "text/plain", []byte("hello\n"))
	}
	// The transcript of old shows shot.png inline on the web page.
	ev := []api.Event{{Type: api.EventResult, Time: clock.Now().UnixMilli(), CallSeq: 1, Tool: api.ToolUploadArtifact, OK: new(true),
		Value: json.RawMessage(`{"name":"shot.png","content_type":"image/png","size":21}`)}}
	if err := ts.srv.store.AppendEvents(t.Context(), old, ev); err != nil {
		t.Fatal(err)
	}
	page := func(id string) string {
		req, _ := http.NewRequest("GET", ts.url+"/ui/sessions/"+id, nil)
		req.AddCookie(&http.Cookie{Name: "outpost_token", Value: ts.admin})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("session page: %d %s", resp.StatusCode, b)
		}
		return string(b)
	}
	ts.mustDo(200, "POST", "/v1/sessions/"+old+"/terminate", ts.admin, `{}`, nil)
	if p := page(old); !strings.Contains(p, `<img src="/ui/sessions/`+old+`/artifacts/shot.png"`) {
		t.Fatalf("session page before retention shows no image:\n%s", p)
	}

	clock.add(20 * 24 * time.Hour)
	ts.mustDo(200, "POST", "/v1/sessions/"+recent+"/terminate", ts.admin, `{}`, nil)

	// Nothing has ended 30 days ago yet.
	if st, err := ts.srv.retention.Sweep(t.Context()); err != nil || st.Artifacts != 0 || st.Sessions != 0 {
		t.Fatalf("sweep at day 20: %+v, %v", st, err)
	}

	clock.add(11 * 24 * time.Hour) // old ended 31 days ago, recent 11
	st, err := ts.srv.retention.Sweep(t.Context())
	if err != nil || st.Artifacts != 2 || st.Sessions != 1 || st.Bytes < int64(len(png)+6) {
		t.Fatalf("sweep at day 31: %+v, %v", st, err)
	}
	if _, err := os.Stat(ts.srv.artifactDir(old)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("artifact directory of %s: %v, want it gone", old, err)
	}
	if names := artifactNames(t, ts, old); len(names) != 0 {
		t.Errorf("artifacts of %s after retention: %v", old, names)
	}
	code, e := artifactCode(t, ts, old, "shot.png")
	if code != http.StatusGone || e.Error.Code != api.CodeGone ||
		!strings.Contains(e.Error.Message, "deleted by the retention policy on 2026-02-01 12:00 UTC") {
		t.Errorf("download of a pruned artifact: %d %+v", code, e)
	}
	var s api.Session
	ts.mustDo(200, "GET", "/v1/sessions/"+old, ts.admin, nil, &s)
	if s.Status.ArtifactsPrunedAt == nil || *s.Status.ArtifactsPrunedAt != clock.Now().Unix() {
		t.Errorf("artifacts_pruned_at of %s = %v", old, s.Status.ArtifactsPrunedAt)
	}
	// The transcript keeps its history; the page shows no broken image.
	p := page(old)
	if strings.Contains(p, "/artifacts/shot.png") || !strings.Contains(p, "Artifacts were deleted by the retention policy on 2026-02-01") {
		t.Errorf("session page after retention:\n%s", p)
	}

	for _, id := range []string{recent, running} {
		if names := artifactNames(t, ts, id); strings.Join(names, ",") != "log.txt,shot.png" {
			t.Errorf("artifacts of %s: %v", id, names)
		}
		if code, e := artifactCode(t, ts, id, "shot.png"); code != 200 {
			t.Errorf("download from %s: %d %+v", id, code, e)
		}
		s = api.Session{}
		ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &s)
		if s.Status.ArtifactsPrunedAt != nil {
			t.Errorf("%s marked pruned", id)
		}
	}
	// A missing artifact of a session that kept its artifacts is a 404.
	if code, _ := artifactCode(t, ts, recent, "nope.png"); code != 404 {
		t.Errorf("missing artifact of a kept session: %d, want 404", code)
	}

	// A second sweep has nothing left to do.
	if st, err := ts.srv.retention.Sweep(t.Context()); err != nil || st.Artifacts != 0 || st.Sessions != 0 {
		t.Errorf("second sweep: %+v, %v", st, err)
	}

	// Long after, recent goes too; the session that never ended stays,
	// whatever its age.
	clock.add(365 * 24 * time.Hour)
	if st, err := ts.srv.retention.Sweep(t.Context()); err != nil || st.Artifacts != 2 || st.Sessions != 1 {
		t.Errorf("sweep a year later: %+v, %v", st, err)
	}
	if code, _ := artifactCode(t, ts, recent, "log.txt"); code != http.StatusGone {
		t.Errorf("download from %s a year later: %d, want 410", recent, code)
	}
	ts.mustDo(200, "GET", "/v1/sessions/"+running, ts.admin, nil, &s)
	if api.IsFinal(s.Status.Status) {
		t.Fatalf("session %s ended: %+v", running, s.Status)
	}
	if code, _ := artifactCode(t, ts, running, "log.txt"); code != 200 {
		t.Errorf("download from the session that has not ended: %d", code)
	}

	resp := get(t, ts.url+"/metrics", ts.admin)
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"outpost_artifacts_pruned_total 4\n", "outpost_artifacts_pruned_bytes_total "} {
		if !strings.Contains(withoutReplicaLabel(string(m)), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestArtifactRetentionZeroKeeps: retention 0 keeps every artifact.
func TestArtifactRetentionZeroKeeps(t *testing.T) {
	t.Parallel()
	clock := &testClock{t: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	ts := startServer(t, Options{Now: clock.Now, ArtifactSweepInterval: 10 * time.Millisecond})
	ts.outpost("keep")
	id := ts.session("keep").Metadata.SessionID
	plantArtifact(t, ts, id, "a.txt", "text/plain", []byte("a"))
	ts.mustDo(200, "POST", "/v1/sessions/"+id+"/terminate", ts.admin, `{}`, nil)
	clock.add(10 * 365 * 24 * time.Hour)
	time.Sleep(50 * time.Millisecond) // the background sweep would have run
	if st, err := ts.srv.retention.Sweep(t.Context()); err != nil || st != (retention.Stats{}) {
		t.Fatalf("sweep with retention 0: %+v, %v", st, err)
	}
	if names := artifactNames(t, ts, id); len(names) != 1 {
		t.Errorf("artifacts with retention 0: %v", names)
	}
}

// TestArtifactRetentionBackground: the background sweep runs on its own.
func TestArtifactRetentionBackground(t *testing.T) {
	t.Parallel()
	clock := &testClock{t: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	ts := startServer(t, Options{Now: clock.Now, ArtifactRetention: time.Hour, ArtifactSweepInterval: 20 * time.Millisecond})
	ts.outpost("bg")
	id := ts.session("bg").Metadata.SessionID
	plantArtifact(t, ts, id, "a.txt", "text/plain", []byte("a"))
	ts.mustDo(200, "POST", "/v1/sessions/"+id+"/terminate", ts.admin, `{}`, nil)
	clock.add(2 * time.Hour)
	waitfor.True(t, "the background sweep to delete the artifacts", func() bool {
		_, err := os.Stat(ts.srv.artifactDir(id))
		return errors.Is(err, fs.ErrNotExist)
	})
	waitfor.True(t, "the session to be marked", func() bool {
		code, _ := artifactCode(t, ts, id, "a.txt")
		return code == http.StatusGone
	})
}

func TestArtifactRetentionNegative(t *testing.T) {
	t.Parallel()
	_, err := New(t.Context(), Options{DataDir: t.TempDir(), ArtifactRetention: -time.Hour, Listen: "127.0.0.1:0"})
	if err == nil || !strings.Contains(err.Error(), "negative") {
		t.Fatalf("New with a negative retention: %v", err)
	}
}
