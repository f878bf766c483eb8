package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// answerCalls plays a remote that answers each exec call with its output
// (two chunks) and exit code 0, until the connection ends.
func answerCalls(r *fakeRemote) {
	for {
		f, err := r.recv()
		if err != nil {
			return
		}
		if f.Type != api.FrameCall {
			continue
		}
		for _, chunk := range []string{"out of ", "call " + f.Tool + "\n"} {
			b := api.OutputFrame{Seq: f.Seq, Stream: "stdout", Data: []byte(chunk)}.AppendBinary(nil)
			if r.ws.Write(context.Background(), websocket.MessageBinary, b) != nil {
				return
			}
		}
		b, _ := json.Marshal(api.Frame{Type: api.FrameResult, V: int(api.CurrentProtocolVersion), Seq: f.Seq, OK: true, Value: json.RawMessage(`{"exit_code":0}`)})
		if r.ws.Write(context.Background(), websocket.MessageText, b) != nil {
			return
		}
	}
}

// TestExternalCallsWhileRunning: an outside agent's calls to a session
// whose runner runs on this server are authorized by the session's
// outpost without a read of the session, as before: a token of another
// outpost finds no session, a reader may not call, a session that ended
// refuses; and each answer carries the call's output, which reaches the
// transcript before the result.
func TestExternalCallsWhileRunning(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("home")
	ts.outpost("away")
	id, connect := externalSessionC(t, ts, "home")
	r, _ := dialGateway(t, ts.srv.gatewayURL, id, connect)
	r.send(api.Frame{Type: api.FrameHello, SessionID: id, Capabilities: &api.Capabilities{OS: "linux"}})
	r.expect(api.FrameWelcome)
	go answerCalls(r)
	path := "/v1/sessions/" + id + "/tools/exec"
	var res api.ToolResult
	waitfor.True(t, "the runner taking calls", func() bool {
		code := ts.do("POST", path, ts.admin, map[string]any{"command": "true"}, &res)
		if code != http.StatusOK && code != http.StatusServiceUnavailable {
			t.Fatalf("tool call: %d", code)
		}
		return code == http.StatusOK
	})
	if _, ok := ts.srv.agents.ExternalOutpost(id); !ok {
		t.Fatal("the runner does not say it takes the session's calls")
	}
	writer := ts.token([]string{api.ScopeSessionsWrite}, "home")
	ts.mustDo(200, "POST", path, writer, map[string]any{"command": "true"}, &res)
	if !res.OK || res.Output != "out of call exec\nexit status 0" {
		t.Fatalf("answer %+v, want the call's output", res)
	}
	for name, c := range map[string]struct {
		token string
		want  int
	}{
		"a writer of another outpost": {ts.token([]string{api.ScopeSessionsWrite}, "away"), 404},
		"a reader of its outpost":     {ts.token([]string{api.ScopeSessionsRead}, "home"), 403},
		"no token":                    {"", 401},
	} {
		if code := ts.do("POST", path, c.token, map[string]any{"command": "true"}, nil); code != c.want {
			t.Errorf("%s: %d, want %d", name, code, c.want)
		}
	}

	var evs api.EventList
	ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events?limit=1000", ts.admin, nil, &evs)
	var order []string
	for _, ev := range evs.Items {
		if ev.CallSeq == res.Seq {
			order = append(order, ev.Type)
		}
	}
	if got := strings.Join(order, ","); got != "call,output,result" {
		t.Errorf("call %d on the transcript: %s, want call,output,result", res.Seq, got)
	}

	ts.mustDo(200, "POST", "/v1/sessions/"+id+"/terminate", ts.admin, api.TerminateRequest{Reason: "done"}, nil)
	if code, msg := ts.errorWith("POST", path, ts.admin, map[string]any{"command": "true"}); code != http.StatusConflict || !strings.Contains(msg, "ended") {
		t.Errorf("a call after the end: %d %q, want 409 saying it ended", code, msg)
	}
}
