package server

import (
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestArtifactNamedAfterSecret: an artifact whose name holds a secret's
// value is refused, so the value shows nowhere — not in the artifact event,
// the artifact list, the transcript or the web UI's session page — while
// an artifact with another name is kept.
func TestArtifactNamedAfterSecret(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("art")
	const secret = "hunter2-artifact-secret"
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"art","secrets":{"API_KEY":"`+secret+`"},"agent":{"kind":"script","steps":[
		{"tool":"exec","args":{"command":"echo hello > out.txt"}},
		{"tool":"upload_artifact","args":{"path":"out.txt","name":"fine.txt"}},
		{"tool":"upload_artifact","args":{"path":"out.txt","name":"`+secret+`.txt"}}]}}`, &s)
	id := s.Metadata.SessionID
	runRemote(t, ts, id, t.TempDir())
	waitEnded(t, ts, id)

	var l api.ArtifactList
	ts.mustDo(200, "GET", "/v1/sessions/"+id+"/artifacts", ts.admin, nil, &l)
	if len(l.Items) != 1 || l.Items[0].Name != "fine.txt" {
		t.Fatalf("artifacts %+v, want fine.txt only", l.Items)
	}
	var events api.EventList
	ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events", ts.admin, nil, &events)
	refused := false
	for _, e := range events.Items {
		if e.Type == api.EventResult && e.CallSeq == 3 && strings.Contains(e.Error, "holds the value of one of this session's secrets") {
			refused = true
		}
	}
	if !refused {
		t.Errorf("no result says why the upload was refused: %+v", events.Items)
	}
	for _, path := range []string{"/v1/sessions/" + id + "/events", "/v1/sessions/" + id + "/artifacts"} {
		if _, body := rawGet(t, ts, path, false); strings.Contains(body, secret) {
			t.Errorf("%s shows the secret: %s", path, body)
		}
	}
	if status, page := rawGet(t, ts, "/ui/sessions/"+id, true); status != 200 || strings.Contains(page, secret) || !strings.Contains(page, "fine.txt") {
		t.Errorf("session page: %d, shows the secret or lacks fine.txt: %s", status, page)
	}
}
