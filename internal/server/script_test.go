package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// TestScriptStepFailure runs scripts against a fake remote whose answers
// fail chosen calls: by default the first failed step ends the session in
// error and later steps never run; stop_on_error false runs every step and
// still ends in error; continue_on_error lets a step fail and the session
// finish.
func TestScriptStepFailure(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("steps")
	exec := func(cmd string, extra string) string {
		return fmt.Sprintf(`{"tool":"exec","args":{"command":%q}%s}`, cmd, extra)
	}
	for _, tc := range []struct {
		name       string
		agent      string
		fail       map[int64]bool // calls answered with a failure
		calls      int64          // calls the server sends
		status     string
		detail     string
		reasonHas  []string
		reasonLack []string
	}{
		{
			name:   "default stops at the first failure",
			agent:  `{"kind":"script","steps":[` + exec("echo one", "") + `,` + exec("make test", "") + `,` + exec("echo three", "") + `]}`,
			fail:   map[int64]bool{2: true},
			calls:  2,
			status: api.StatusError, detail: api.DetailError,
			reasonHas: []string{`Step 2 of 3 (exec "make test") failed: exit code 1.`, "step 3 did not run"},
		},
		{
			name:   "explicit stop_on_error true",
			agent:  `{"kind":"script","stop_on_error":true,"steps":[` + exec("false", "") + `,` + exec("echo b", "") + `,` + exec("echo c", "") + `]}`,
			fail:   map[int64]bool{1: true},
			calls:  1,
			status: api.StatusError, detail: api.DetailError,
			reasonHas: []string{`Step 1 of 3 (exec "false") failed: exit code 1.`, "steps 2 and 3 did not run"},
		},
		{
			name:   "stop_on_error false runs every step and fails",
			agent:  `{"kind":"script","stop_on_error":false,"steps":[` + exec("false", "") + `,` + exec("echo b", "") + `,` + exec("exit 1", "") + `]}`,
			fail:   map[int64]bool{1: true, 3: true},
			calls:  3,
			status: api.StatusError, detail: api.DetailError,
			reasonHas: []string{`2 of 3 steps failed: step 1 (exec "false"): exit code 1; step 3 (exec "exit 1"): exit code 1.`},
		},
		{
			name:   "continue_on_error tolerates a step",
			agent:  `{"kind":"script","steps":[` + exec("lint", `,"continue_on_error":true`) + `,` + exec("echo b", "") + `]}`,
			fail:   map[int64]bool{1: true},
			calls:  2,
			status: api.StatusExit, detail: api.DetailFinished,
			reasonHas: []string{"The script finished: 2 steps; 1 failed and had continue_on_error."},
		},
		{
			name:   "all steps pass",
			agent:  `{"kind":"script","steps":[` + exec("echo a", "") + `]}`,
			calls:  1,
			status: api.StatusExit, detail: api.DetailFinished,
			reasonHas: []string{"The script finished: 1 step."}, reasonLack: []string{"failed"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s api.Session
			ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"steps","agent":`+tc.agent+`}`, &s)
			id := s.Metadata.SessionID
			claim := ts.claimFor(id, "m-"+id)
			r, _ := dialGateway(t, ts.srv.gatewayURL, id, claim.Status.ConnectToken)
			r.send(api.Frame{Type: api.FrameHello, SessionID: id})
			r.expect(api.FrameWelcome)
			for seq := int64(1); seq <= tc.calls; seq++ {
				call := r.expect(api.FrameCall)
				if call.Seq != seq {
					t.Fatalf("call %+v, want seq %d", call, seq)
				}
				res := api.Frame{Type: api.FrameResult, Seq: seq, OK: true, Value: json.RawMessage(`{"exit_code":0}`)}
				if tc.fail[seq] {
					res.OK, res.Error, res.Value = false, "exit code 1", json.RawMessage(`{"exit_code":1}`)
				}
				r.send(res)
				r.expect(api.FrameAck)
			}
			if f := r.expect(api.FrameEnd); !strings.Contains(f.Reason, tc.reasonHas[0]) {
				t.Errorf("end frame reason %q", f.Reason)
			}
			var got api.Session
			deadline := time.Now().Add(10 * time.Second)
			for ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &got); !api.IsFinal(got.Status.Status); ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &got) {
				if time.Now().After(deadline) {
					t.Fatalf("session did not end: %+v", got.Status)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if got.Status.Status != tc.status || got.Status.StatusDetail != tc.detail {
				t.Errorf("status %s/%s, want %s/%s: %s", got.Status.Status, got.Status.StatusDetail, tc.status, tc.detail, got.Status.Reason)
			}
			for _, want := range tc.reasonHas {
				if !strings.Contains(got.Status.Reason, want) {
					t.Errorf("reason %q lacks %q", got.Status.Reason, want)
				}
			}
			for _, bad := range tc.reasonLack {
				if strings.Contains(got.Status.Reason, bad) {
					t.Errorf("reason %q has %q", got.Status.Reason, bad)
				}
			}
			var evs api.EventList
			ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events", ts.admin, nil, &evs)
			var last int64
			for _, ev := range evs.Items {
				if ev.Type == api.EventCall {
					last = max(last, ev.CallSeq)
				}
			}
			if last != tc.calls {
				t.Errorf("calls recorded up to %d, want %d", last, tc.calls)
			}
		})
	}
}
