package agent

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// grant answers request seq of the session as the server does: the call's
// result and a network_request event in one transaction, published.
func (h *harness) grant(id string, seq int64, res api.NetworkAccessResult) {
	h.t.Helper()
	value, _ := json.Marshal(res)
	now := h.clock.Now()
	m, err := h.store.UpdateSession(h.t.Context(), id, func(s store.Session, e store.QueueEntry) (store.Mutation, error) {
		calls, err := h.store.Store.ListCalls(h.t.Context(), id)
		if err != nil {
			return store.Mutation{}, err
		}
		c := calls[seq-1]
		ok := true
		c.Done, c.OK, c.Value, c.DoneAt = true, true, value, &now
		return store.Mutation{Calls: []store.Call{c}, Events: []api.Event{
			{Type: api.EventNetworkRequest, CallSeq: seq, NetworkRequest: &api.NetworkRequest{ID: "1", State: api.NetworkRequestGranted}},
			{Type: api.EventResult, CallSeq: seq, Tool: c.Tool, OK: &ok, Value: value},
		}}, nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	h.feed.Publish(id, m)
}

// A model's network_access_request never reaches the remote: the call
// shows as a pending request, waits across a restart of the loop, and
// the answer written to the store is the tool's result the model reads.
// An invalid request fails at once.
func TestLLMNetworkRequestWaitsForAnswer(t *testing.T) {
	t.Parallel()
	model := newFakeOpenAI(t, use(
		[3]string{"a", api.ToolNetworkAccessRequest, `{"domains":["Pkg.Example.test"],"reason":"go mod download"}`},
		[3]string{"b", api.ToolNetworkAccessRequest, `{"domains":["10.0.0.1"],"reason":"raw"}`},
	), say("Downloaded."))
	p := newProvider(t, model)
	h := newHarness(t, p)
	h.session("ses_ask", api.SessionSpec{Prompt: "Build it.", Agent: api.Agent{Kind: api.AgentLLM}})

	var pending *api.NetworkRequest
	waitfor.True(t, "the pending request", func() bool {
		for _, ev := range h.events("ses_ask") {
			if ev.Type == api.EventNetworkRequest {
				pending = ev.NetworkRequest
			}
		}
		return pending != nil
	})
	if pending.ID != "1" || pending.State != api.NetworkRequestPending || len(pending.Domains) != 1 || pending.Domains[0] != "pkg.example.test" {
		t.Fatalf("pending request %+v", pending)
	}
	for _, ev := range h.events("ses_ask") {
		if ev.Type == api.EventNetworkRequest && ev.CallSeq == 2 {
			t.Fatalf("an invalid request was shown as pending: %+v", ev)
		}
		if ev.Type == api.EventResult && ev.CallSeq == 2 && (ev.OK == nil || *ev.OK || !strings.Contains(ev.Error, "IP address")) {
			t.Fatalf("result of the invalid request: %+v", ev)
		}
	}

	// The loop restarts while the request waits: it goes on waiting.
	h.stop()
	h.start(p)
	c := h.connect("ses_ask")
	h.grant("ses_ask", 1, api.NetworkAccessResult{RequestID: "1", Granted: true, Scope: api.NetworkGrantSession, Domains: []string{"pkg.example.test"}})
	if sess := h.waitEnd("ses_ask"); sess.StatusDetail != api.DetailFinished {
		t.Fatalf("session %s/%s: %s", sess.Status, sess.StatusDetail, sess.Reason)
	}
	select { // the session ended: any call was sent before
	case f := <-c.calls:
		t.Fatalf("the remote got a call: %+v", f)
	default:
	}
	reqs := p.requests()
	checkPathsAgree(t, h.events("ses_ask"), reqs)
	if len(reqs) != 2 {
		t.Fatalf("%d model calls, want 2", len(reqs))
	}
	var seen []string
	for _, m := range reqs[1].Messages {
		seen = append(seen, m.Text)
	}
	all := strings.Join(seen, "\n")
	if !strings.Contains(all, `"granted":true`) || !strings.Contains(all, "IP address") {
		t.Fatalf("the model's second request does not hold both results: %s", all)
	}
}
