package server

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/dist"
)

// fetch GETs (or HEADs) a path of the server without a token.
func (ts *testServer) fetch(method, path string) (int, http.Header, []byte) {
	ts.t.Helper()
	req, _ := http.NewRequest(method, ts.url+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func hexSHA(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// TestDistPublishesBuilds serves a dist dir with two builds next to the
// server's own executable, without a token.
func TestDistPublishesBuilds(t *testing.T) {
	t.Parallel()
	host := dist.HostSuffix()
	if host == "" {
		t.Skip("no platform suffix for this machine")
	}
	dir := t.TempDir()
	const a, b = "aaaa00000001", "bbbb00000002"
	files := map[string][]byte{
		dist.BinaryName(a, host): []byte("build a\x00\x01"),
		dist.BinaryName(b, host): []byte("build b"),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	checkA := hexSHA(files[dist.BinaryName(a, host)]) + "  devin-remote\n"
	os.WriteFile(filepath.Join(dir, dist.ChecksumName(a, host)), []byte(checkA), 0o644)
	os.WriteFile(filepath.Join(dir, dist.LatestName(host)), []byte(b), 0o644)
	ts := startServer(t, Options{DistDir: dir})

	code, hd, body := ts.fetch("GET", "/dist/"+dist.LatestName(host))
	if code != 200 || string(body) != b || hd.Get("Cache-Control") != "no-cache" || hd.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Errorf("latest = %d %q %v", code, body, hd)
	}
	for _, id := range []string{a, b} {
		want := files[dist.BinaryName(id, host)]
		code, hd, body := ts.fetch("GET", "/dist/"+dist.BinaryName(id, host))
		if code != 200 || string(body) != string(want) || hd.Get("Content-Type") != "application/octet-stream" ||
			!strings.Contains(hd.Get("Cache-Control"), "immutable") {
			t.Errorf("binary %s = %d %q %v", id, code, body, hd)
		}
		code, hd, body = ts.fetch("HEAD", "/dist/"+dist.BinaryName(id, host))
		if code != 200 || len(body) != 0 || hd.Get("Content-Length") != strconv.Itoa(len(want)) {
			t.Errorf("HEAD %s = %d %v", id, code, hd)
		}
		code, _, body = ts.fetch("GET", "/dist/"+dist.ChecksumName(id, host))
		if code != 200 || string(body) != hexSHA(want)+"  devin-remote\n" {
			t.Errorf("checksum %s = %d %q", id, code, body)
		}
	}

	// The server's own executable, under its own id.
	self, err := dist.SelfID()
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	exeBytes, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	code, _, body = ts.fetch("GET", "/dist/"+dist.BinaryName(self, host))
	if code != 200 || hexSHA(body) != hexSHA(exeBytes) {
		t.Errorf("own binary = %d, %d bytes (want %d)", code, len(body), len(exeBytes))
	}
	if code, _, body := ts.fetch("GET", "/dist/"+dist.ChecksumName(self, host)); code != 200 || string(body) != hexSHA(exeBytes)+"  devin-remote\n" {
		t.Errorf("own checksum = %d %q", code, body)
	}

	// Unknown names and every way out of the dir are 404 JSON errors (or
	// 400: a path with dot segments is refused before any route).
	os.WriteFile(filepath.Join(ts.srv.opts.DataDir, "marker"), []byte("DATA-DIR-MARKER"), 0o600)
	for _, p := range []string{
		"/dist/", "/dist/nope", "/dist/" + dist.BinaryName("cccc00000003", host), "/dist/" + dist.LatestName(dist.SuffixMacOSArm64),
		"/dist/..%2fadmin-token", "/dist/..%2F..%2Fetc%2Fpasswd", "/dist/%2e%2e%2fmarker", "/dist/sub/" + dist.LatestName(host),
		"/dist/devin-remote_aaaa00000001_..%2f..%2fadmin-token", "/dist/../admin-token", "/dist/outpost.db",
	} {
		code := ts.do("GET", p, "", nil, nil) // do checks the JSON envelope
		_, _, body := ts.fetch("GET", p)
		if (code != 404 && (code != 400 || !strings.Contains(strings.ToLower(p), "%2e") && !strings.Contains(p, ".."))) || strings.Contains(string(body), "DATA-DIR-MARKER") || strings.Contains(string(body), ts.admin) {
			t.Errorf("GET %s = %d %q, want 404 (400 for dot segments)", p, code, body)
		}
	}
}

// TestRemoteBinarySHAPins: the queue entry's spec.remote_binary_sha is the
// session's pin, else its outpost's, else null; bad pins are refused.
func TestRemoteBinarySHAPins(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("plain")
	var pinned api.Outpost
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "pinned", RemoteBinarySHA: "0123456789ab"}, &pinned)
	if pinned.Spec.RemoteBinarySHA == nil || *pinned.Spec.RemoteBinarySHA != "0123456789ab" {
		t.Errorf("outpost spec pin = %v", pinned.Spec.RemoteBinarySHA)
	}
	var got api.Outpost
	ts.mustDo(200, "GET", "/opbeta/outposts/pinned", ts.admin, nil, &got)
	if got.Spec.RemoteBinarySHA == nil || *got.Spec.RemoteBinarySHA != "0123456789ab" {
		t.Errorf("read outpost spec pin = %v", got.Spec.RemoteBinarySHA)
	}
	for _, bad := range []string{"v1.2.3", "ABCDEF", "abc", strings.Repeat("a", 41), "../../x"} {
		ts.mustDo(400, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "bad", RemoteBinarySHA: bad}, nil)
		ts.mustDo(400, "POST", "/v1/sessions", ts.admin, map[string]any{
			"outpost": "plain", "remote_binary_sha": bad, "agent": map[string]any{"kind": "script"},
		}, nil)
	}
	var outposts api.OutpostList
	ts.mustDo(200, "GET", "/v1/outposts", ts.admin, nil, &outposts)
	if len(outposts.Items) != 2 {
		t.Errorf("bad pins created outposts: %d", len(outposts.Items))
	}
	var sessions api.SessionList
	ts.mustDo(200, "GET", "/v1/sessions", ts.admin, nil, &sessions)
	if len(sessions.Items) != 0 {
		t.Errorf("bad pins created sessions: %d", len(sessions.Items))
	}

	create := func(outpost, pin string) api.Session {
		var s api.Session
		ts.mustDo(201, "POST", "/v1/sessions", ts.admin, map[string]any{
			"outpost": outpost, "remote_binary_sha": pin, "agent": map[string]any{"kind": "script"},
		}, &s)
		return s
	}
	machine := ts.token([]string{api.ScopeMachine}, "")
	for _, tc := range []struct {
		outpost, pin string
		want         *string
	}{
		{"plain", "", nil},
		{"plain", "fedcba987654", strPtr("fedcba987654")},
		{"pinned", "", strPtr("0123456789ab")},
		{"pinned", "abcdef", strPtr("abcdef")},
	} {
		s := create(tc.outpost, tc.pin)
		if (s.Spec.RemoteBinarySHA == nil) != (tc.pin == "") || tc.pin != "" && *s.Spec.RemoteBinarySHA != tc.pin {
			t.Errorf("session spec pin = %v, want %q", s.Spec.RemoteBinarySHA, tc.pin)
		}
		id := s.Metadata.SessionID
		var e api.QueueEntry
		ts.mustDo(200, "GET", "/opbeta/outposts/devins/"+id, machine, nil, &e)
		var claim api.QueueEntry
		ts.mustDo(200, "POST", "/v1/queue/"+id+"/claim", machine, api.ClaimRequest{AcceptorID: "w"}, &claim)
		var list api.QueueList
		ts.mustDo(200, "GET", "/v1/queue?phase=claimed&acceptor_id=w", machine, nil, &list)
		for what, spec := range map[string]api.QueueSpec{"get": e.Spec, "claim": claim.Spec, "list": list.Items[len(list.Items)-1].Spec} {
			if (spec.RemoteBinarySHA == nil) != (tc.want == nil) || tc.want != nil && *spec.RemoteBinarySHA != *tc.want {
				t.Errorf("%s/%q: %s spec.remote_binary_sha = %v, want %v", tc.outpost, tc.pin, what, spec.RemoteBinarySHA, tc.want)
			}
		}
		ts.mustDo(200, "POST", "/v1/queue/"+id+"/release", machine, api.ClaimRequest{AcceptorID: "w"}, nil)
	}
	// On the wire an unpinned entry says null, as the public contract has it.
	var raw map[string]map[string]any
	req, _ := http.NewRequest("GET", ts.url+"/v1/queue?outpost=plain&first=1", nil)
	req.Header.Set("Authorization", "Bearer "+machine)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page struct{ Items []json.RawMessage }
	json.NewDecoder(resp.Body).Decode(&page)
	if len(page.Items) == 0 || json.Unmarshal(page.Items[0], &raw) != nil {
		t.Fatalf("queue page %v", page)
	}
	if v, ok := raw["spec"]["remote_binary_sha"]; !ok || v != nil {
		t.Errorf("unpinned spec.remote_binary_sha = %v (present %v), want null", v, ok)
	}
}
