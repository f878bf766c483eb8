package server

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/machine"
)

// h200Machine is a machine with the two H200s of a captured nvidia-smi.
func h200Machine(t *testing.T) *api.Capabilities {
	t.Helper()
	b, err := os.ReadFile("../machine/testdata/gpus/nvidia-smi-query-h200x2.csv")
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := machine.ParseNvidiaSMI(string(b))
	if err != nil || len(gpus) != 2 {
		t.Fatalf("gpus %v, %v", gpus, err)
	}
	return &api.Capabilities{OS: "linux", Arch: "amd64", CPUs: 32, MemoryBytes: 256 << 30, GPUs: gpus}
}

// TestPlacement has two workers connected, one with two H200s and one
// without GPUs: a session that needs two GPUs goes only to the first, one
// that needs four waits and says why, and bad requirements are refused.
func TestPlacement(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("gpu")
	tok := ts.token([]string{api.ScopeMachine}, "gpu")
	big := &api.ClaimMachine{Capabilities: h200Machine(t), Labels: map[string]string{"gpu": "h200"}}
	small := &api.ClaimMachine{Capabilities: &api.Capabilities{OS: "linux", Arch: "amd64", CPUs: 2, MemoryBytes: 8 << 30}}
	for id, m := range map[string]*api.ClaimMachine{"big": big, "small": small} {
		ts.mustDo(200, "PUT", "/v1/outposts/gpu/workers/"+id, tok, api.WorkerInfo{Kind: api.WorkerKindWorker, Hostname: id,
			Capabilities: m.Capabilities, Labels: m.Labels, MaxSessions: 1}, nil)
	}
	var list api.WorkerList
	ts.mustDo(200, "GET", "/v1/outposts/gpu/workers", tok, nil, &list)
	if list.Total != 2 || list.Items[0].Labels["gpu"] != "h200" || len(list.Items[0].Capabilities.GPUs) != 2 {
		t.Fatalf("workers = %+v", list.Items)
	}

	create := func(req *api.Requirements, prio int) string {
		body := map[string]any{"outpost": "gpu", "title": "t", "priority": prio,
			"agent": map[string]any{"kind": "script", "steps": []any{map[string]any{"tool": "exec", "args": map[string]any{"command": "true"}}}}}
		if req != nil {
			body["requirements"] = req
		}
		var s api.Session
		ts.mustDo(201, "POST", "/v1/sessions", ts.admin, body, &s)
		return s.Metadata.SessionID
	}
	two := create(&api.Requirements{GPUs: 2, GPUModel: "*H200*", Labels: map[string]string{"gpu": "h200"}}, 9)
	four := create(&api.Requirements{GPUs: 4}, 8)
	plain := create(nil, 0)

	var got api.Session
	ts.mustDo(200, "GET", "/v1/sessions/"+two, ts.admin, nil, &got)
	if r := got.Spec.Requirements; r == nil || r.GPUs != 2 || r.GPUModel != "*H200*" || r.Labels["gpu"] != "h200" {
		t.Fatalf("requirements read back as %+v", got.Spec.Requirements)
	}

	next := func(acceptor string, m *api.ClaimMachine) (int, string) {
		t.Helper()
		var e api.QueueEntry
		code := ts.do("POST", "/v1/outposts/gpu/queue:claim", tok, api.ClaimNextRequest{AcceptorID: acceptor, Machine: m}, &e)
		return code, e.Metadata.SessionID
	}
	// A claim by id of a worker whose machine does not fit: 409, naming it.
	code, body := jsonCall(t, ts, "POST", "/v1/queue/"+two+"/claim", tok, api.ClaimRequest{AcceptorID: "small"})
	if code != 409 || !strings.Contains(body, "needs a machine with label gpu=h200") || !strings.Contains(body, "it has no label gpu") {
		t.Fatalf("claim by id of an unfit worker: %d %s", code, body)
	}
	// One whose machine fits takes it.
	one := create(&api.Requirements{GPUs: 1}, 0)
	var claimed api.QueueEntry
	ts.mustDo(200, "POST", "/v1/queue/"+one+"/claim", tok, api.ClaimRequest{AcceptorID: "big"}, &claimed)
	if a := claimed.Status.AcceptorID; a == nil || *a != "big" || claimed.Status.ConnectToken == "" {
		t.Fatalf("claim by id of a fitting worker: %+v", claimed.Status)
	}
	if code, id := next("small", small); code != 200 || id != plain {
		t.Fatalf("small worker's claim: %d %s, want the session without requirements %s", code, id, plain)
	}
	if code, id := next("other", nil); code != 204 {
		t.Fatalf("claim of a claimer that describes no machine: %d %s, want 204", code, id)
	}
	if code, id := next("big", big); code != 200 || id != two {
		t.Fatalf("big worker's claim: %d %s, want %s", code, id, two)
	}
	if code, id := next("big2", big); code != 204 {
		t.Fatalf("another big claim: %d %s, want 204 (gpus: 4 fits no one)", code, id)
	}

	// An outpost's requirements are the default of its sessions.
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, map[string]any{"name": "h200", "platform": "linux",
		"requirements": map[string]any{"gpus": 2, "gpu_model": "*H200*"}}, nil)
	var o api.Outpost
	ts.mustDo(200, "GET", "/v1/outposts/h200", ts.admin, nil, &o)
	if r := o.Spec.Requirements; r == nil || r.GPUs != 2 || r.GPUModel != "*H200*" {
		t.Fatalf("outpost requirements read back as %+v", o.Spec.Requirements)
	}
	hTok := ts.token([]string{api.ScopeMachine}, "h200")
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, map[string]any{"outpost": "h200", "title": "t",
		"agent": map[string]any{"kind": "script", "steps": []any{map[string]any{"tool": "exec", "args": map[string]any{"command": "true"}}}}}, nil)
	if code := ts.do("POST", "/v1/outposts/h200/queue:claim", hTok, api.ClaimNextRequest{AcceptorID: "small", Machine: small}, nil); code != 204 {
		t.Fatalf("claim of the outpost's session by a small machine: %d, want 204", code)
	}
	if code := ts.do("POST", "/v1/outposts/h200/queue:claim", hTok, api.ClaimNextRequest{AcceptorID: "big", Machine: big}, nil); code != 200 {
		t.Fatalf("claim of the outpost's session by a big machine: %d, want 200", code)
	}

	ts.mustDo(200, "GET", "/v1/sessions/"+four, ts.admin, nil, &got)
	if got.Status.Status != api.StatusNew || got.Status.Reason != "Waiting for a machine with gpus ≥ 4; 2 workers connected, none fits." {
		t.Fatalf("session needing 4 GPUs: %s, %q", got.Status.Status, got.Status.Reason)
	}

	if m := grepLines(ts.rawGet("/metrics"), `outpost_sessions_unplaceable{outpost="gpu",`); !strings.HasSuffix(m, "} 1") {
		t.Errorf("metrics lack one unplaceable session on gpu:\n%s", grepLines(m, "unplaceable"))
	}

	bad := map[string]any{"outpost": "gpu", "title": "t", "requirements": map[string]any{"gpu_model": "[H200"},
		"agent": map[string]any{"kind": "script", "steps": []any{map[string]any{"tool": "exec", "args": map[string]any{"command": "true"}}}}}
	code, body = jsonCall(t, ts, "POST", "/v1/sessions", ts.admin, bad)
	if code != 400 || !strings.Contains(body, "gpu_model") {
		t.Fatalf("a bad pattern: %d %s", code, body)
	}
	code, body = jsonCall(t, ts, "PUT", "/v1/outposts/gpu/workers/lab", tok, api.WorkerInfo{Kind: api.WorkerKindWorker, Labels: map[string]string{"bad key": "x"}})
	if code != 400 || !strings.Contains(body, "label") {
		t.Fatalf("a bad label in a heartbeat: %d %s", code, body)
	}
}

// jsonCall sends body as JSON and returns the status and the answer's text.
func jsonCall(t *testing.T, ts *testServer, method, path, token string, body any) (int, string) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, out := ts.raw(method, path, token, "application/json", string(b))
	return resp.StatusCode, string(out)
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
