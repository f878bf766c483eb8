package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// TestHostileRemoteOutputRedacted: something that holds a session's
// connect token and speaks the gateway protocol in the remote's place
// (session code that read the token and stopped its remote) sends the
// session's secret unredacted, split across output frames, and in a
// result. The server redacts it from the transcript all the same.
func TestHostileRemoteOutputRedacted(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-value-0123456789"
	ts := startServer(t, Options{})
	ts.outpost("hostile")
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, api.CreateSessionRequest{Outpost: "hostile",
		Secrets: map[string]string{"API_TOKEN": secret},
		Agent:   api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"true"}`)}}}}, &s)
	id := s.Metadata.SessionID
	claim := ts.claimFor(id, "hostile-machine")
	r, _ := dialGateway(t, ts.srv.gatewayURL, id, claim.Status.ConnectToken)
	r.send(api.Frame{Type: api.FrameHello, SessionID: id, Capabilities: &api.Capabilities{OS: "linux"}})
	r.expect(api.FrameWelcome)
	call := r.expect(api.FrameCall)
	for _, chunk := range []string{"leak: " + secret[:7], secret[7:] + " and again " + secret + "\n", "tail " + secret[:5]} {
		b := api.OutputFrame{Seq: call.Seq, Stream: "stdout", Data: []byte(chunk)}.AppendBinary(nil)
		if err := r.ws.Write(context.Background(), websocket.MessageBinary, b); err != nil {
			t.Fatal(err)
		}
	}
	r.send(api.Frame{Type: api.FrameResult, Seq: call.Seq, OK: true,
		Value: json.RawMessage(`{"exit_code":0,"output":"` + secret + `"}`)})
	r.expect(api.FrameAck)

	var evs api.EventList
	waitfor.True(t, "the result on the transcript", func() bool {
		ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events", ts.admin, nil, &evs)
		for _, ev := range evs.Items {
			if ev.Type == api.EventResult && ev.CallSeq == call.Seq {
				return true
			}
		}
		return false
	})
	raw, _ := json.Marshal(evs)
	if strings.Contains(string(raw), secret) {
		t.Fatalf("the transcript holds the secret:\n%s", raw)
	}
	var out strings.Builder
	for _, ev := range evs.Items {
		if ev.Type == api.EventOutput {
			out.WriteString(ev.Text)
		}
	}
	if want := "leak: [REDACTED:API_TOKEN] and again [REDACTED:API_TOKEN]\ntail " + secret[:5]; out.String() != want {
		t.Errorf("output on the transcript %q, want %q", out.String(), want)
	}
	if !strings.Contains(string(raw), "[REDACTED:API_TOKEN]") {
		t.Errorf("the result is not redacted:\n%s", raw)
	}
}

// TestHostileRemoteReportsRedacted: what stands in for a session's remote
// (session code that took its connect token) puts the session's secret in
// the reports it sends besides output and results — the machine its hello
// describes, how it restored the repositories and the workspace snapshot —
// which the server writes on the transcript. It finds them redacted there
// too.
func TestHostileRemoteReportsRedacted(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-report-0123456789"
	ts := startServer(t, Options{})
	ts.outpost("hostile")
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, api.CreateSessionRequest{Outpost: "hostile",
		Secrets: map[string]string{"API_TOKEN": secret},
		Agent:   api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"true"}`)}}}}, &s)
	id := s.Metadata.SessionID
	claim := ts.claimFor(id, "hostile-machine")
	r, _ := dialGateway(t, ts.srv.gatewayURL, id, claim.Status.ConnectToken)
	r.send(api.Frame{Type: api.FrameHello, SessionID: id, Capabilities: &api.Capabilities{OS: "linux", Hostname: "host-" + secret}})
	r.expect(api.FrameWelcome)
	call := r.expect(api.FrameCall)
	r.send(api.Frame{Type: api.FrameRestored,
		Restored:         []api.RestoredRepo{{Name: "app", URL: "https://example.com/app.git", Error: "clone failed: " + secret}},
		SnapshotRestored: &api.SnapshotInfo{SHA256: "00", Error: "restore failed: " + secret}})
	r.send(api.Frame{Type: api.FrameResult, Seq: call.Seq, OK: true, Value: json.RawMessage(`{"exit_code":0}`)})
	r.expect(api.FrameAck)

	var evs api.EventList
	waitfor.True(t, "both restore reports on the transcript", func() bool {
		ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events", ts.admin, nil, &evs)
		n := 0
		for _, ev := range evs.Items {
			if ev.Type == api.EventRestore {
				n++
			}
		}
		return n == 2
	})
	raw, _ := json.Marshal(evs)
	if strings.Contains(string(raw), secret) {
		t.Fatalf("the transcript holds the secret:\n%s", raw)
	}
	if !strings.Contains(string(raw), "[REDACTED:API_TOKEN]") {
		t.Errorf("the reports are not on the transcript, redacted:\n%s", raw)
	}
}
