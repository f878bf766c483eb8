package server

import (
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// Provisioning steps reach the transcript and the status only from the
// claim's holder, and a release may say why.
func TestMachineEventsAndReleaseReason(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("dev")
	ts.outpost("other")
	s := ts.session("dev")
	id := s.Metadata.SessionID
	machine := ts.token([]string{api.ScopeMachine}, "")
	otherOutpost := ts.token([]string{api.ScopeMachine}, "other")
	reader := ts.token([]string{api.ScopeSessionsRead}, "")
	path := "/v1/queue/" + id + "/events"
	step := api.MachineEventRequest{AcceptorID: "orch", Step: api.MachineStepCreate, Machine: "outpost-" + id, Backend: "docker", Message: "Creating machine"}

	// Nobody holds the claim yet: refused, nothing written.
	ts.mustDo(409, "POST", path, machine, step, nil)
	ts.mustDo(200, "POST", "/v1/queue/"+id+"/claim", machine, api.ClaimRequest{AcceptorID: "orch"}, nil)

	bad := []struct {
		name  string
		token string
		body  any
		code  int
	}{
		{"another acceptor", machine, api.MachineEventRequest{AcceptorID: "thief", Step: api.MachineStepCreate}, 409},
		{"unknown step", machine, api.MachineEventRequest{AcceptorID: "orch", Step: "explode"}, 400},
		{"no acceptor", machine, api.MachineEventRequest{Step: api.MachineStepCreate}, 400},
		{"long message", machine, api.MachineEventRequest{AcceptorID: "orch", Step: api.MachineStepCreate, Message: strings.Repeat("x", 2001)}, 400},
		{"unknown field", machine, map[string]any{"acceptor_id": "orch", "step": "create", "colour": "red"}, 400},
		{"read scope", reader, step, 403},
		{"other outpost", otherOutpost, step, 404},
		{"no token", "", step, 401},
	}
	for _, b := range bad {
		if code := ts.do("POST", path, b.token, b.body, nil); code != b.code {
			t.Errorf("%s: status %d, want %d", b.name, code, b.code)
		}
	}
	ts.mustDo(404, "POST", "/v1/queue/ses_nosuchsession/events", machine, step, nil)

	var ev api.Event
	ts.mustDo(201, "POST", path, machine, step, &ev)
	if ev.Type != api.EventMachine || ev.Seq == 0 || ev.Step != api.MachineStepCreate || ev.Backend != "docker" {
		t.Fatalf("recorded event %+v", ev)
	}
	var got api.Session
	ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &got)
	if !strings.Contains(got.Status.Reason, "Creating machine") {
		t.Fatalf("status reason %q does not name the step", got.Status.Reason)
	}

	code := 3
	ts.mustDo(201, "POST", path, machine, api.MachineEventRequest{AcceptorID: "orch", Step: api.MachineStepFailed, Message: "image outpost:x not found", ExitCode: &code}, nil)
	ts.mustDo(400, "POST", "/v1/queue/"+id+"/release", machine, api.ClaimRequest{AcceptorID: "orch", Reason: strings.Repeat("y", 1001)}, nil)
	ts.mustDo(200, "POST", "/v1/queue/"+id+"/release", machine, api.ClaimRequest{AcceptorID: "orch", Reason: "provisioning failed: image outpost:x not found"}, nil)
	ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &got)
	if got.Status.Status != api.StatusNew || !strings.Contains(got.Status.Reason, "Released by orch: provisioning failed: image outpost:x not found.") {
		t.Fatalf("after release: %+v", got.Status)
	}
	// After the release the old holder cannot report any more.
	ts.mustDo(409, "POST", path, machine, step, nil)

	var list api.EventList
	ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events", ts.admin, nil, &list)
	var steps []string
	var exit *int
	for _, e := range list.Items {
		if e.Type == api.EventMachine {
			steps = append(steps, e.Step)
			if e.ExitCode != nil {
				exit = e.ExitCode
			}
		}
	}
	if strings.Join(steps, ",") != "create,failed" || exit == nil || *exit != 3 {
		t.Fatalf("machine steps on the transcript %v (exit %v), want create,failed with exit 3", steps, exit)
	}
}

// ?tail=N answers the newest N events in order, whatever the transcript's
// length, and refuses what it cannot mean.
func TestEventsTail(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("dev")
	id := ts.session("dev").Metadata.SessionID
	evs := make([]api.Event, 30)
	for i := range evs {
		evs[i] = api.Event{Type: api.EventOutput, Text: "line"}
	}
	if err := ts.srv.store.AppendEvents(t.Context(), id, evs); err != nil {
		t.Fatal(err)
	}
	var all, tail api.EventList
	ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events?limit=1000", ts.admin, nil, &all)
	ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events?tail=10", ts.admin, nil, &tail)
	n := len(all.Items)
	if n < 30 || len(tail.Items) != 10 || tail.Items[0].Seq != all.Items[n-10].Seq || tail.Next != all.Items[n-1].Seq || tail.HasNextPage {
		t.Fatalf("tail of %d events: %d items from seq %d, next %d", n, len(tail.Items), tail.Items[0].Seq, tail.Next)
	}
	ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events?tail=1000", ts.admin, nil, &tail)
	if len(tail.Items) != n {
		t.Fatalf("tail=1000 of %d events gave %d", n, len(tail.Items))
	}
	for _, q := range []string{"tail=0", "tail=1001", "tail=x", "tail=5&after=3", "tail=5&limit=2"} {
		ts.mustDo(400, "GET", "/v1/sessions/"+id+"/events?"+q, ts.admin, nil, nil)
	}
}
