package server

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// callOutputOf is what the transcript holds of call seq's output: the
// bytes it kept, the note on spilled output and the note on dropped
// output.
type callOutputOf struct {
	kept    int
	spilled string
	dropped *api.Event
}

func transcriptOutput(t *testing.T, ts *testServer, id string, seq int64) callOutputOf {
	t.Helper()
	var evs api.EventList
	ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events?limit=1000", ts.admin, nil, &evs)
	var out callOutputOf
	for _, e := range evs.Items {
		if e.Type != api.EventOutput || e.CallSeq != seq {
			continue
		}
		switch {
		case e.DroppedBytes > 0:
			out.dropped = &e
		case e.Spilled:
			out.spilled = e.Text
		default:
			out.kept += len(e.Text)
		}
	}
	return out
}

// spilledSize is the length of GET …/output/{seq}, or its status.
func spilledSize(t *testing.T, ts *testServer, id string, seq string) (int, int) {
	t.Helper()
	resp := get(t, ts.url+"/v1/sessions/"+id+"/output/"+seq, ts.admin)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, len(b)
}

// TestOutputCapsBoundSpill runs calls that write more than the per-call
// cap of output, and more than the session's cap together: what the
// server keeps stops at each cap, the transcript says how much was
// dropped, and the retention sweep deletes the spilled output with the
// session's artifacts.
func TestOutputCapsBoundSpill(t *testing.T) {
	t.Parallel()
	const (
		transcriptCap = 4 << 10
		callCap       = 16 << 10
		sessionCap    = 20 << 10
	)
	clock := &testClock{t: time.Now()}
	ts := startServer(t, Options{Now: clock.Now, OutputCapBytes: transcriptCap, MaxCallOutputBytes: callCap,
		MaxSessionOutputBytes: sessionCap, ArtifactRetention: time.Hour})
	ts.outpost("out")
	var s api.Session
	// Each of the first two calls writes three times the call's cap.
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"out","agent":{"kind":"script","steps":[
		{"tool":"exec","args":{"command":"head -c 49152 /dev/zero | tr '\\0' a"}},
		{"tool":"exec","args":{"command":"head -c 49152 /dev/zero | tr '\\0' b"}},
		{"tool":"exec","args":{"command":"head -c 10240 /dev/zero | tr '\\0' c"}}]}}`, &s)
	id := s.Metadata.SessionID
	runRemote(t, ts, id, t.TempDir())
	if end := waitEnded(t, ts, id); end.Status.Status != api.StatusExit {
		t.Fatalf("session ended %+v", end.Status)
	}

	for _, tc := range []struct {
		seq              int64
		spilled, dropped int
		cap              string
	}{
		// The call's cap: 4 KiB on the transcript, 12 KiB spilled.
		{1, callCap - transcriptCap, 49152 - callCap, "--max-call-output-bytes"},
		// The session's cap leaves 20 KiB - 12 KiB to spill.
		{2, sessionCap - (callCap - transcriptCap), 49152 - transcriptCap - (sessionCap - (callCap - transcriptCap)), "--max-session-output-bytes"},
		// Nothing left to spill: the transcript's part only.
		{3, 0, 10240 - transcriptCap, "--max-session-output-bytes"},
	} {
		out := transcriptOutput(t, ts, id, tc.seq)
		if out.kept != transcriptCap {
			t.Errorf("call %d: the transcript kept %d bytes, want %d", tc.seq, out.kept, transcriptCap)
		}
		if out.dropped == nil || out.dropped.DroppedBytes != int64(tc.dropped) ||
			!strings.Contains(out.dropped.Text, "output truncated") || !strings.Contains(out.dropped.Text, tc.cap) {
			t.Errorf("call %d: the note on dropped output is %+v, want %d bytes dropped by %s", tc.seq, out.dropped, tc.dropped, tc.cap)
		}
		code, n := spilledSize(t, ts, id, strconv.FormatInt(tc.seq, 10))
		switch {
		case tc.spilled == 0 && code != http.StatusNotFound:
			t.Errorf("call %d: spilled output answered %d, want 404", tc.seq, code)
		case tc.spilled > 0 && (code != 200 || n != tc.spilled):
			t.Errorf("call %d: spilled output %d, %d bytes, want %d bytes", tc.seq, code, n, tc.spilled)
		}
	}
	infos, err := ts.srv.outputBlobs.List(t.Context(), id+"/")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, in := range infos {
		total += in.Size
	}
	if total != sessionCap {
		t.Errorf("the session's spilled output takes %d bytes, want the cap %d", total, sessionCap)
	}

	// The retention sweep deletes it with the artifacts.
	clock.add(2 * time.Hour)
	st, err := ts.srv.retention.Sweep(t.Context())
	if err != nil || st.Sessions != 1 || st.Output != sessionCap {
		t.Fatalf("retention sweep: %+v, %v", st, err)
	}
	if infos, err := ts.srv.outputBlobs.List(t.Context(), id+"/"); err != nil || len(infos) != 0 {
		t.Fatalf("spilled output after the sweep: %v, %v", infos, err)
	}
	if code, _ := spilledSize(t, ts, id, "1"); code != http.StatusGone {
		t.Errorf("spilled output after the sweep: %d, want 410", code)
	}
}
