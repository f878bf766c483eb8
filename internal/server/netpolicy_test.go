package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

var outpostPolicy = api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{
	{Hostname: "*.Example.test"}, {IPv4: "10.1.0.0/16", Ports: []int{443, 80}}, {IPv6: "fd00::/8"}}}

// normalized is outpostPolicy as the server stores and shows it.
const normalized = `{"enabled":true,"allow":[{"hostname":"*.example.test"},{"ipv4":"10.1.0.0/16","ports":[80,443]},{"ipv6":"fd00::/8"}]}`

func policyJSON(t *testing.T, p *api.NetworkPolicy) string {
	t.Helper()
	if p == nil {
		return "null"
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func scriptSession(outpost string, policy any) map[string]any {
	s := map[string]any{
		"outpost": outpost, "title": "t",
		"agent": map[string]any{"kind": "script", "steps": []any{map[string]any{"tool": "exec", "args": map[string]any{"command": "true"}}}},
	}
	if policy != nil {
		s["network_policy"] = policy
	}
	return s
}

// An outpost's policy is stored normalized, is its sessions' effective
// policy on their queue entries and session objects, and a session may
// narrow it but widen it only with network.admin.
func TestNetworkPolicyOutpostAndSession(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	var o api.Outpost
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "net", NetworkPolicy: &outpostPolicy}, &o)
	if got := policyJSON(t, o.Spec.NetworkPolicy); got != normalized {
		t.Fatalf("outpost policy %s, want %s", got, normalized)
	}
	ts.mustDo(200, "GET", "/v1/outposts/net", ts.admin, nil, &o)
	if got := policyJSON(t, o.Spec.NetworkPolicy); got != normalized {
		t.Fatalf("outpost policy read back %s, want %s", got, normalized)
	}
	ts.outpost("open")

	writer := ts.token([]string{api.ScopeSessionsWrite}, "")
	netAdmin := ts.token([]string{api.ScopeSessionsWrite, api.ScopeNetworkAdmin}, "")
	machine := ts.token([]string{api.ScopeMachine}, "")

	// A session that follows the outpost's policy.
	var follow api.Session
	ts.mustDo(201, "POST", "/v1/sessions", writer, scriptSession("net", nil), &follow)
	if got := policyJSON(t, follow.Spec.NetworkPolicy); got != normalized || follow.Spec.NetworkPolicyOwn {
		t.Fatalf("created session's policy %s (own %v), want the outpost's %s", got, follow.Spec.NetworkPolicyOwn, normalized)
	}
	var entry api.QueueEntry
	ts.mustDo(200, "GET", "/v1/queue/"+follow.Metadata.SessionID, machine, nil, &entry)
	if got := policyJSON(t, entry.Spec.NetworkPolicy); got != normalized {
		t.Fatalf("queue entry spec.network_policy %s, want %s", got, normalized)
	}
	// The same in a list, and through the public fleet API's prefixes.
	var fleet api.QueueList
	ts.mustDo(200, "GET", "/opbeta/outposts/devins?outpost="+o.Metadata.OutpostID, machine, nil, &fleet)
	if len(fleet.Items) != 1 || policyJSON(t, fleet.Items[0].Spec.NetworkPolicy) != normalized {
		t.Fatalf("listed entries %+v", fleet.Items)
	}
	var viaFleet api.Outpost
	ts.mustDo(200, "PATCH", "/opbeta/outposts/outposts/"+o.Metadata.OutpostID, ts.admin, api.UpdateOutpostRequest{NetworkPolicy: &outpostPolicy}, &viaFleet)
	if policyJSON(t, viaFleet.Spec.NetworkPolicy) != normalized {
		t.Fatalf("PATCH through the fleet prefix answered %s", policyJSON(t, viaFleet.Spec.NetworkPolicy))
	}
	var sessions api.SessionList
	ts.mustDo(200, "GET", "/v1/sessions?outpost=net", ts.admin, nil, &sessions)
	if len(sessions.Items) != 1 || policyJSON(t, sessions.Items[0].Spec.NetworkPolicy) != normalized {
		t.Fatalf("listed sessions %+v", sessions.Items)
	}
	// A token limited to another outpost cannot change the session.
	ts.outpost("elsewhere")
	limited := ts.token([]string{api.ScopeSessionsWrite, api.ScopeNetworkAdmin}, "elsewhere")
	ts.mustDo(404, "PATCH", "/v1/sessions/"+follow.Metadata.SessionID, limited, map[string]any{"network_policy": nil}, nil)
	// network.admin alone may ask who it is, and nothing else.
	onlyNet := ts.token([]string{api.ScopeNetworkAdmin}, "")
	ts.mustDo(200, "GET", "/v1/whoami", onlyNet, nil, nil)
	ts.mustDo(403, "PATCH", "/v1/sessions/"+follow.Metadata.SessionID, onlyNet, map[string]any{"network_policy": nil}, nil)

	// Narrowing: accepted from a sessions.write token.
	narrow := api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "api.example.test", Ports: []int{443}}, {IPv4: "10.1.2.0/24", Ports: []int{443}}}}
	var narrowed api.Session
	ts.mustDo(201, "POST", "/v1/sessions", writer, scriptSession("net", narrow), &narrowed)
	if got, want := policyJSON(t, narrowed.Spec.NetworkPolicy), policyJSON(t, &narrow); got != want || !narrowed.Spec.NetworkPolicyOwn {
		t.Fatalf("narrowed session's policy %s, want %s", got, want)
	}
	var narrowedEntry api.QueueEntry
	ts.mustDo(200, "GET", "/v1/queue/"+narrowed.Metadata.SessionID, machine, nil, &narrowedEntry)
	if got, want := policyJSON(t, narrowedEntry.Spec.NetworkPolicy), policyJSON(t, &narrow); got != want {
		t.Fatalf("narrowed entry's policy %s, want %s", got, want)
	}

	// Widening: refused with the reason, and nothing created.
	var before api.SessionList
	ts.mustDo(200, "GET", "/v1/sessions", ts.admin, nil, &before)
	for _, wide := range []api.NetworkPolicy{
		{Enabled: true, Allow: []api.NetworkPolicyRule{{IPv4: "10.0.0.0/8"}}},
		{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "example.test"}}},
		{Enabled: true, Allow: []api.NetworkPolicyRule{{IPv4: "10.1.0.1", Ports: []int{22}}}},
		{Enabled: false},
	} {
		code, msg := ts.failure("POST", "/v1/sessions", writer, scriptSession("net", wide))
		if code != 403 || !strings.Contains(msg, "network.admin") || !strings.Contains(msg, "widen") {
			t.Errorf("widening %s: %d %q", policyJSON(t, &wide), code, msg)
		}
	}
	code, msg := ts.failure("POST", "/v1/sessions", writer, scriptSession("net", api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{IPv4: "10.0.0.0/8"}}}))
	if !strings.Contains(msg, "allow[0] (ipv4 10.0.0.0/8)") {
		t.Errorf("the refusal does not name the widening rule: %d %q", code, msg)
	}
	var after api.SessionList
	ts.mustDo(200, "GET", "/v1/sessions", ts.admin, nil, &after)
	if after.Total != before.Total {
		t.Fatalf("refused sessions were created: %d sessions, was %d", after.Total, before.Total)
	}
	// ... and accepted with network.admin, or admin.
	var wide api.Session
	ts.mustDo(201, "POST", "/v1/sessions", netAdmin, scriptSession("net", api.NetworkPolicy{}), &wide)
	if wide.Spec.NetworkPolicy != nil || !wide.Spec.NetworkPolicyOwn {
		t.Fatalf("an unrestricted own policy shows %s (own %v)", policyJSON(t, wide.Spec.NetworkPolicy), wide.Spec.NetworkPolicyOwn)
	}
	var wideEntry api.QueueEntry // fresh: decoding into a used one keeps what the JSON omits
	ts.mustDo(200, "GET", "/v1/queue/"+wide.Metadata.SessionID, machine, nil, &wideEntry)
	if wideEntry.Spec.NetworkPolicy != nil {
		t.Fatalf("unrestricted entry shows %s", policyJSON(t, wideEntry.Spec.NetworkPolicy))
	}
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, scriptSession("net", api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{IPv4: "0.0.0.0/0"}}}), nil)
	// On an outpost without a policy anything goes.
	ts.mustDo(201, "POST", "/v1/sessions", writer, scriptSession("open", api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{IPv4: "0.0.0.0/0"}}}), nil)
	var plain api.Session
	ts.mustDo(201, "POST", "/v1/sessions", writer, scriptSession("open", nil), &plain)
	if plain.Spec.NetworkPolicy != nil {
		t.Fatalf("a session of an open outpost shows %s", policyJSON(t, plain.Spec.NetworkPolicy))
	}
	raw := ts.rawGet("/v1/queue/" + plain.Metadata.SessionID)
	if strings.Contains(raw, "network_policy") {
		t.Fatalf("an unrestricted entry spells network_policy: %s", raw)
	}
}

// failure sends a request expected to fail and returns its status and
// error message.
func (ts *testServer) failure(method, path, token string, body any) (int, string) {
	ts.t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		ts.t.Fatal(err)
	}
	code, _, out := ts.fetchWith(method, path, token, raw)
	var e api.ErrorResponse
	_ = json.Unmarshal(out, &e)
	return code, e.Error.Message
}

func (ts *testServer) rawGet(path string) string {
	ts.t.Helper()
	code, _, out := ts.fetchWith("GET", path, ts.admin, nil)
	if code != 200 {
		ts.t.Fatalf("GET %s: %d %s", path, code, out)
	}
	return string(out)
}

// Invalid policies answer 400 with the validation's sentence and change
// nothing.
func TestNetworkPolicyInvalid(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "net", NetworkPolicy: &outpostPolicy}, nil)
	s := ts.session("net")
	id := s.Metadata.SessionID
	for _, tc := range []struct {
		method, path string
		body         string
		want         string
	}{
		{"POST", "/v1/outposts", `{"name":"bad","network_policy":{"enabled":true,"allow":[{"hostname":"10.0.0.1"}]}}`, "allow[0]: hostname \"10.0.0.1\" is an IP address"},
		{"POST", "/v1/outposts", `{"name":"bad","network_policy":{"enabled":true,"allow":[{"ipv4":"10.0.0.0/8","ipv6":"::/0"}]}}`, "exactly one"},
		{"PATCH", "/v1/outposts/net", `{"network_policy":{"enabled":true,"allow":[{"ipv4":"fd00::/8"}]}}`, "is not IPv4"},
		{"PATCH", "/v1/outposts/net", `{"network_policy":{"enabled":"yes"}}`, "wrong type"},
		{"POST", "/v1/sessions", `{"outpost":"net","title":"x","agent":{"kind":"script","steps":[]},"network_policy":{"enabled":true,"allow":[{"hostname":"*"}]}}`, "names no domain"},
		{"PATCH", "/v1/sessions/" + id, `{"network_policy":{"enabled":true,"allow":[{"hostname":"a.example.test","ports":[70000]}]}}`, "port 70000"},
		{"PATCH", "/v1/sessions/" + id, `{"network_policy":{"allow":"everything"}}`, "not a network policy"},
		{"PATCH", "/v1/sessions/" + id, `{}`, "network_policy is required"},
		{"PATCH", "/v1/sessions/" + id, `{"network_policy":null,"colour":"red"}`, "unknown field"},
		{"PATCH", "/v1/sessions/" + id, `{"network_policy":`, "could not be read"},
	} {
		code, _, out := ts.fetchWith(tc.method, tc.path, ts.admin, []byte(tc.body))
		var e api.ErrorResponse
		_ = json.Unmarshal(out, &e)
		if code != 400 || !strings.Contains(e.Error.Message, tc.want) {
			t.Errorf("%s %s %s: %d %q, want 400 saying %q", tc.method, tc.path, tc.body, code, e.Error.Message, tc.want)
		}
	}
	var list api.OutpostList
	ts.mustDo(200, "GET", "/v1/outposts", ts.admin, nil, &list)
	if len(list.Items) != 1 || policyJSON(t, list.Items[0].Spec.NetworkPolicy) != normalized {
		t.Fatalf("outposts after the refusals: %+v", list.Items)
	}
	var got api.Session
	ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &got)
	if policyJSON(t, got.Spec.NetworkPolicy) != normalized || got.Spec.NetworkPolicyOwn {
		t.Fatalf("session policy after the refusals %s", policyJSON(t, got.Spec.NetworkPolicy))
	}
}

// A change of a session's effective policy, by PATCH of the session or of
// its outpost, reaches the queue's watchers as a MODIFIED event carrying
// the new policy; sessions with their own policy ignore the outpost's.
func TestNetworkPolicyLiveChangeWatched(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "net", NetworkPolicy: &outpostPolicy}, nil)
	machine := ts.token([]string{api.ScopeMachine}, "")
	writer := ts.token([]string{api.ScopeSessionsWrite}, "")
	reader := ts.token([]string{api.ScopeSessionsRead}, "")
	id := ts.session("net").Metadata.SessionID
	ownID := ts.session("net").Metadata.SessionID
	own := api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "b.example.test"}}}
	ts.mustDo(200, "PATCH", "/v1/sessions/"+ownID, writer, api.UpdateSessionRequest{NetworkPolicy: &own}, nil)
	var claimed api.QueueEntry
	ts.mustDo(200, "POST", "/v1/queue/"+id+"/claim", machine, api.ClaimRequest{AcceptorID: "w1"}, &claimed)
	if policyJSON(t, claimed.Spec.NetworkPolicy) != normalized {
		t.Fatalf("the claim answered policy %s, want %s", policyJSON(t, claimed.Spec.NetworkPolicy), normalized)
	}

	var l api.QueueList
	ts.mustDo(200, "GET", "/v1/queue?outpost=net", machine, nil, &l)
	lw := openWatch(t, ts, machine, "/v1/queue?watch=true&outpost=net&cursor="+l.Cursor)

	// The claimed session's own policy narrows the outpost's.
	narrow := api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "a.example.test", Ports: []int{443}}}}
	ts.mustDo(403, "PATCH", "/v1/sessions/"+id, reader, api.UpdateSessionRequest{NetworkPolicy: &narrow}, nil)
	var patched api.Session
	ts.mustDo(200, "PATCH", "/v1/sessions/"+id, writer, api.UpdateSessionRequest{NetworkPolicy: &narrow}, &patched)
	if policyJSON(t, patched.Spec.NetworkPolicy) != policyJSON(t, &narrow) || !patched.Spec.NetworkPolicyOwn {
		t.Fatalf("PATCH answered policy %s", policyJSON(t, patched.Spec.NetworkPolicy))
	}
	ev := lw.next(t)
	if ev.Type != api.WatchModified || ev.Object.Metadata.SessionID != id || policyJSON(t, ev.Object.Spec.NetworkPolicy) != policyJSON(t, &narrow) ||
		ev.Object.Status.Phase != api.PhaseClaimed || ev.Object.Status.AcceptorID == nil || *ev.Object.Status.AcceptorID != "w1" {
		t.Fatalf("watch event %+v, want MODIFIED of %s with the narrowed policy, still claimed by w1", ev, id)
	}
	// Widening it is refused and sends nothing.
	ts.mustDo(403, "PATCH", "/v1/sessions/"+id, writer, api.UpdateSessionRequest{NetworkPolicy: &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "*.test"}}}}, nil)

	// Back to the outpost's with null.
	var followed api.Session
	ts.mustDo(200, "PATCH", "/v1/sessions/"+id, writer, map[string]any{"network_policy": nil}, &followed)
	if policyJSON(t, followed.Spec.NetworkPolicy) != normalized || followed.Spec.NetworkPolicyOwn {
		t.Fatalf("after null: %s", policyJSON(t, followed.Spec.NetworkPolicy))
	}
	if ev := lw.next(t); ev.Object.Metadata.SessionID != id || policyJSON(t, ev.Object.Spec.NetworkPolicy) != normalized {
		t.Fatalf("watch event %+v, want %s back on the outpost's policy", ev, id)
	}

	// The outpost's change reaches the session that follows it, and not
	// the one with its own.
	next := api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "*.example.test", Ports: []int{443}}}}
	var o api.Outpost
	ts.mustDo(200, "PATCH", "/v1/outposts/net", ts.admin, api.UpdateOutpostRequest{NetworkPolicy: &next}, &o)
	if policyJSON(t, o.Spec.NetworkPolicy) != policyJSON(t, &next) {
		t.Fatalf("outpost after PATCH %s", policyJSON(t, o.Spec.NetworkPolicy))
	}
	ev = lw.next(t)
	if ev.Object.Metadata.SessionID != id || policyJSON(t, ev.Object.Spec.NetworkPolicy) != policyJSON(t, &next) {
		t.Fatalf("watch event %+v, want %s with the outpost's new policy", ev, id)
	}
	// Lifting the outpost's policy leaves the session unrestricted.
	ts.mustDo(200, "PATCH", "/v1/outposts/net", ts.admin, api.UpdateOutpostRequest{NetworkPolicy: &api.NetworkPolicy{}}, nil)
	ev = lw.next(t)
	if ev.Object.Metadata.SessionID != id || ev.Object.Spec.NetworkPolicy != nil {
		t.Fatalf("watch event %+v, want %s unrestricted", ev, id)
	}
	// A policy the session with its own would widen is refused, unless
	// the token holds network.admin (admin does).
	orch := ts.token([]string{api.ScopeOrchestrator}, "")
	tight := api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "a.example.test"}}}
	code, msg := ts.failure("PATCH", "/v1/outposts/net", orch, api.UpdateOutpostRequest{NetworkPolicy: &tight})
	if code != 409 || !strings.Contains(msg, ownID) || !strings.Contains(msg, "network.admin") {
		t.Fatalf("narrowing under a session's own policy: %d %q", code, msg)
	}
	var unchanged api.Outpost
	ts.mustDo(200, "GET", "/v1/outposts/net", ts.admin, nil, &unchanged)
	if unchanged.Spec.NetworkPolicy != nil && unchanged.Spec.NetworkPolicy.Enabled {
		t.Fatalf("the refused PATCH changed the outpost's policy to %s", policyJSON(t, unchanged.Spec.NetworkPolicy))
	}
	// A PATCH of another field sends nothing; the next event is the
	// session-own one's change.
	mr := 5
	ts.mustDo(200, "PATCH", "/v1/outposts/net", ts.admin, api.UpdateOutpostRequest{MaxRunning: &mr}, nil)
	ts.mustDo(200, "PATCH", "/v1/sessions/"+ownID, writer, map[string]any{"network_policy": nil}, nil)
	if ev := lw.next(t); ev.Object.Metadata.SessionID != ownID || ev.Object.Spec.NetworkPolicy != nil {
		t.Fatalf("watch event %+v, want %s unrestricted", ev, ownID)
	}
	var got api.Session
	ts.mustDo(200, "GET", "/v1/sessions/"+ownID, ts.admin, nil, &got)
	if got.Spec.NetworkPolicy != nil || got.Spec.NetworkPolicyOwn {
		t.Fatalf("session %s: %s", ownID, policyJSON(t, got.Spec.NetworkPolicy))
	}

	// An ended session's policy cannot change.
	ts.mustDo(200, "POST", "/v1/sessions/"+ownID+"/terminate", writer, nil, nil)
	ts.mustDo(409, "PATCH", "/v1/sessions/"+ownID, writer, api.UpdateSessionRequest{NetworkPolicy: &narrow}, nil)
	ts.mustDo(404, "PATCH", "/v1/sessions/ses_nosuchsession", writer, api.UpdateSessionRequest{NetworkPolicy: &narrow}, nil)
}

// The claim's holder reports network decisions; each is a transcript
// event and counts in the outpost's metrics; nobody else may post them,
// and a batch is bounded.
func TestNetworkDecisionsIntoTranscript(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "net", NetworkPolicy: &outpostPolicy}, nil)
	id := ts.session("net").Metadata.SessionID
	machine := ts.token([]string{api.ScopeMachine}, "")
	path := "/v1/queue/" + id + "/events"
	decisions := []api.NetworkDecision{
		{Time: 1700000000000, Decision: api.DecisionAllow, Host: "API.example.test.", Address: "10.1.2.3", Port: 443, Protocol: api.ProtocolTCP,
			Rule: "hostname *.example.test", BytesOut: 517, BytesIn: 4096},
		{Decision: api.DecisionDeny, Address: "192.0.2.9", Port: 22, Protocol: api.ProtocolTCP, Rule: "no rule allows it", Count: 7},
		{Decision: api.DecisionDeny, Host: "evil.test", Protocol: api.ProtocolDNS, Rule: "no rule allows it"},
	}
	req := api.MachineEventRequest{AcceptorID: "w1", Network: decisions}
	ts.mustDo(409, "POST", path, machine, req, nil) // nobody holds the claim
	ts.mustDo(200, "POST", "/v1/queue/"+id+"/claim", machine, api.ClaimRequest{AcceptorID: "w1"}, nil)
	ts.mustDo(409, "POST", path, machine, api.MachineEventRequest{AcceptorID: "w2", Network: decisions}, nil)

	big := make([]api.NetworkDecision, api.MaxNetworkDecisions+1)
	for i := range big {
		big[i] = decisions[1]
	}
	for _, bad := range []api.MachineEventRequest{
		{AcceptorID: "w1", Network: big},
		{AcceptorID: "w1", Network: []api.NetworkDecision{{Decision: "maybe", Protocol: api.ProtocolTCP}}},
		{AcceptorID: "w1", Network: []api.NetworkDecision{{Decision: api.DecisionAllow, Protocol: "icmp"}}},
		{AcceptorID: "w1", Network: []api.NetworkDecision{{Decision: api.DecisionAllow, Protocol: api.ProtocolTCP, Port: 70000}}},
		{AcceptorID: "w1", Network: []api.NetworkDecision{{Decision: api.DecisionAllow, Protocol: api.ProtocolTCP, Address: "host.test"}}},
		{AcceptorID: "w1", Network: []api.NetworkDecision{{Decision: api.DecisionAllow, Protocol: api.ProtocolTCP, BytesIn: -1}}},
		{AcceptorID: "w1"},
	} {
		code, msg := ts.failure("POST", path, machine, bad)
		if code != 400 || msg == "" {
			t.Errorf("bad batch: %d %q", code, msg)
		}
	}
	code, msg := ts.failure("POST", path, machine, api.MachineEventRequest{AcceptorID: "w1", Network: big})
	if !strings.Contains(msg, "at most 500") {
		t.Errorf("too large a batch: %d %q", code, msg)
	}

	var last api.Event
	ts.mustDo(201, "POST", path, machine, req, &last)
	if last.Type != api.EventNetwork || last.Protocol != api.ProtocolDNS || last.Seq == 0 {
		t.Fatalf("answer %+v, want the last network event", last)
	}
	var list api.EventList
	ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events", ts.admin, nil, &list)
	var got []api.Event
	for _, e := range list.Items {
		if e.Type == api.EventNetwork {
			got = append(got, e)
		}
	}
	if len(got) != 3 {
		t.Fatalf("%d network events on the transcript, want 3: %+v", len(got), got)
	}
	if e := got[0]; e.Decision != api.DecisionAllow || e.Host != "api.example.test" || e.Address != "10.1.2.3" || e.Port != 443 ||
		e.Rule != "hostname *.example.test" || e.BytesOut != 517 || e.BytesIn != 4096 || e.Time != 1700000000000 || e.AcceptorID != "w1" {
		t.Errorf("first event %+v", e)
	}
	if e := got[1]; e.Decision != api.DecisionDeny || e.Count != 7 || e.Port != 22 || e.Time == 0 {
		t.Errorf("second event %+v", e)
	}
	// The wire form has the contract's field names.
	raw := ts.rawGet("/v1/sessions/" + id + "/events")
	for _, want := range []string{`"type":"network"`, `"decision":"allow"`, `"host":"api.example.test"`, `"address":"10.1.2.3"`,
		`"port":443`, `"protocol":"tcp"`, `"rule":"hostname *.example.test"`, `"bytes_out":517`, `"bytes_in":4096`, `"count":7`} {
		if !strings.Contains(raw, want) {
			t.Errorf("the events' JSON lacks %s", want)
		}
	}
	if v, _ := sample(t, ts, "outpost_network_connections_total", `decision="deny",outpost="net"`); v != 8 {
		t.Errorf("denied connections counted %v, want 8", v)
	}
	if v, _ := sample(t, ts, "outpost_network_connections_total", `decision="allow",outpost="net"`); v != 1 {
		t.Errorf("allowed connections counted %v, want 1", v)
	}
	// The web UI's session page shows the policy and the decisions.
	status, page := rawGet(t, ts, "/ui/sessions/"+id, true)
	for _, want := range []string{"only hostname *.example.test; ipv4 10.1.0.0/16 ports 80,443; ipv6 fd00::/8",
		"network deny tcp 192.0.2.9:22: no rule allows it ×7", "network allow tcp api.example.test (10.1.2.3:443) by hostname *.example.test"} {
		if status != 200 || !strings.Contains(page, want) {
			t.Errorf("the session page (%d) does not show %q", status, want)
		}
	}
	// A step and decisions together: the answer is the step's event.
	var ev api.Event
	ts.mustDo(201, "POST", path, machine, api.MachineEventRequest{AcceptorID: "w1", Step: api.MachineStepStart, Network: decisions[:1]}, &ev)
	if ev.Type != api.EventMachine {
		t.Fatalf("answer %+v, want the step", ev)
	}
}

// fetchWith sends raw (nil for no body) with token and returns the
// answer as it came.
func (ts *testServer) fetchWith(method, path, token string, raw []byte) (int, http.Header, []byte) {
	ts.t.Helper()
	var body io.Reader
	if raw != nil {
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, ts.url+path, body)
	if err != nil {
		ts.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// On PostgreSQL with two replicas, a policy change made on one reaches a
// queue watch on the other (the change's notification, not the backstop
// poll), for a session's own policy and for its outpost's.
func TestNetworkPolicyChangeAcrossReplicas(t *testing.T) {
	t.Parallel()
	a, b, _ := startFanoutPair(t, time.Hour)
	a.mustDo(201, "POST", "/v1/outposts", a.admin, api.CreateOutpostRequest{Name: "net", NetworkPolicy: &outpostPolicy}, nil)
	id := a.session("net").Metadata.SessionID
	var l api.QueueList
	b.mustDo(200, "GET", "/v1/queue?outpost=net", b.admin, nil, &l)
	if len(l.Items) != 1 || policyJSON(t, l.Items[0].Spec.NetworkPolicy) != normalized {
		t.Fatalf("replica b lists %+v", l.Items)
	}
	lw := openWatch(t, b.testServer, b.admin, "/v1/queue?watch=true&outpost=net&cursor="+l.Cursor)

	narrow := api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "a.example.test"}}}
	a.mustDo(200, "PATCH", "/v1/sessions/"+id, a.admin, api.UpdateSessionRequest{NetworkPolicy: &narrow}, nil)
	if ev := lw.next(t); ev.Object.Metadata.SessionID != id || policyJSON(t, ev.Object.Spec.NetworkPolicy) != policyJSON(t, &narrow) {
		t.Fatalf("replica b's watch: %+v, want the narrowed policy", ev)
	}
	a.mustDo(200, "PATCH", "/v1/sessions/"+id, a.admin, map[string]any{"network_policy": nil}, nil)
	if ev := lw.next(t); policyJSON(t, ev.Object.Spec.NetworkPolicy) != normalized {
		t.Fatalf("replica b's watch: %+v, want the outpost's policy", ev)
	}
	a.mustDo(200, "PATCH", "/v1/outposts/net", a.admin, api.UpdateOutpostRequest{NetworkPolicy: &narrow}, nil)
	if ev := lw.next(t); policyJSON(t, ev.Object.Spec.NetworkPolicy) != policyJSON(t, &narrow) {
		t.Fatalf("replica b's watch: %+v, want the outpost's new policy", ev)
	}
	var s api.Session
	b.mustDo(200, "GET", "/v1/sessions/"+id, b.admin, nil, &s)
	if policyJSON(t, s.Spec.NetworkPolicy) != policyJSON(t, &narrow) {
		t.Fatalf("replica b shows the session's policy %s", policyJSON(t, s.Spec.NetworkPolicy))
	}
}

// An outpost's restricted policy is widened or lifted only by a token
// with network.admin (admin has it): an outposts.orchestrator token, which
// orchestrators hold, may set or narrow it, not open its sessions'
// networks, as a sessions.write token may not open a session's.
func TestNetworkPolicyOutpostWideningNeedsNetworkAdmin(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "net", NetworkPolicy: &outpostPolicy}, nil)
	ts.outpost("open")
	orch := ts.token([]string{api.ScopeOrchestrator}, "")
	netAdmin := ts.token([]string{api.ScopeOrchestrator, api.ScopeNetworkAdmin}, "")
	for _, wide := range []api.NetworkPolicy{
		{},
		{Enabled: true, Allow: append([]api.NetworkPolicyRule{{IPv4: "0.0.0.0/0"}}, outpostPolicy.Allow...)},
		{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "example.test"}}},
	} {
		code, msg := ts.failure("PATCH", "/v1/outposts/net", orch, api.UpdateOutpostRequest{NetworkPolicy: &wide})
		if code != 403 || !strings.Contains(msg, "network.admin") || !strings.Contains(msg, "widen") {
			t.Errorf("widening to %s: %d %q, want 403 naming network.admin", policyJSON(t, &wide), code, msg)
		}
	}
	var o api.Outpost
	ts.mustDo(200, "GET", "/v1/outposts/net", ts.admin, nil, &o)
	if got := policyJSON(t, o.Spec.NetworkPolicy); got != normalized {
		t.Fatalf("refused PATCHes changed the outpost's policy to %s", got)
	}
	// Narrowing, and restricting an open outpost, need no network.admin.
	narrow := api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "api.example.test"}}}
	ts.mustDo(200, "PATCH", "/v1/outposts/net", orch, api.UpdateOutpostRequest{NetworkPolicy: &narrow}, nil)
	ts.mustDo(200, "PATCH", "/v1/outposts/open", orch, api.UpdateOutpostRequest{NetworkPolicy: &narrow}, nil)
	// Widening back: network.admin or admin.
	ts.mustDo(200, "PATCH", "/v1/outposts/net", netAdmin, api.UpdateOutpostRequest{NetworkPolicy: &outpostPolicy}, nil)
	ts.mustDo(200, "PATCH", "/v1/outposts/open", ts.admin, api.UpdateOutpostRequest{NetworkPolicy: &api.NetworkPolicy{}}, nil)
}
