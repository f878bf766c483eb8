package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// A network_policy with allow rules but no "enabled" decodes as disabled,
// which would store the rules unrestricted: every route that takes a
// policy refuses it with 400 and a sentence, and changes nothing. An
// explicit "enabled" of either value is accepted, and unknown keys inside
// the policy stay refused.
func TestNetworkPolicyAllowWithoutEnabled(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "net", NetworkPolicy: &outpostPolicy}, nil)
	own := api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "a.example.test"}}}
	ownJSON := `{"enabled":true,"allow":[{"hostname":"a.example.test"}]}`
	s := ts.session("net")
	id := s.Metadata.SessionID
	ts.mustDo(200, "PATCH", "/v1/sessions/"+id, ts.admin, api.UpdateSessionRequest{NetworkPolicy: &own}, nil)

	const rules = `"allow":[{"hostname":"b.example.test"}]`
	session := func(policy string) string {
		return `{"outpost":"net","title":"x","agent":{"kind":"script","steps":[]},"network_policy":` + policy + `}`
	}
	for _, tc := range []struct {
		method, path, body string
		want               string
	}{
		{"POST", "/v1/outposts", `{"name":"other","network_policy":{` + rules + `}}`, "no \"enabled\""},
		{"POST", "/opbeta/outposts", `{"name":"other","network_policy":{` + rules + `}}`, "no \"enabled\""},
		{"POST", "/v1/outposts", `{"name":"other","network_policy":{` + rules + `,"enabled":null}}`, "no \"enabled\""},
		{"POST", "/v1/outposts", `{"name":"other","NETWORK_POLICY":{"ALLOW":[{"hostname":"b.example.test"}]}}`, "no \"enabled\""},
		{"PATCH", "/v1/outposts/net", `{"max_running":7,"network_policy":{` + rules + `}}`, "no \"enabled\""},
		{"POST", "/v1/sessions", session(`{` + rules + `}`), "no \"enabled\""},
		{"PATCH", "/v1/sessions/" + id, `{"network_policy":{` + rules + `}}`, "no \"enabled\""},
		// The strict decode still names a key it does not know, inside the
		// policy as outside.
		{"POST", "/v1/outposts", `{"name":"other","network_policy":{"enabled":true,` + rules + `,"deny":[]}}`, "unknown field \"deny\""},
		{"PATCH", "/v1/outposts/net", `{"network_policy":{"enabled":true,"alow":[]}}`, "unknown field \"alow\""},
		{"POST", "/v1/sessions", session(`{"enabled":true,"allow":[],"colour":1}`), "unknown field \"colour\""},
		{"PATCH", "/v1/sessions/" + id, `{"network_policy":{"enabeld":true,` + rules + `}}`, "unknown field \"enabeld\""},
	} {
		code, _, out := ts.fetchWith(tc.method, tc.path, ts.admin, []byte(tc.body))
		var e api.ErrorResponse
		_ = json.Unmarshal(out, &e)
		if code != 400 || e.Error.Code != api.CodeBadRequest || !strings.Contains(e.Error.Message, tc.want) {
			t.Errorf("%s %s %s: %d %s, want 400 saying %q", tc.method, tc.path, tc.body, code, out, tc.want)
		}
		if strings.Contains(tc.want, "enabled") {
			const sentence = `network_policy has allow rules but no "enabled": set "enabled": true to enforce them, or false to store them unenforced.`
			if e.Error.Message != sentence {
				t.Errorf("%s %s: message %q, want %q", tc.method, tc.path, e.Error.Message, sentence)
			}
		}
	}

	// Nothing changed: no outpost "other", net's policy and limit as
	// they were, one session, whose own policy is still its own.
	var list api.OutpostList
	ts.mustDo(200, "GET", "/v1/outposts", ts.admin, nil, &list)
	if len(list.Items) != 1 || list.Items[0].Spec.Name != "net" || policyJSON(t, list.Items[0].Spec.NetworkPolicy) != normalized || list.Items[0].Spec.MaxRunning == 7 {
		t.Fatalf("outposts after the refusals: %+v", list.Items)
	}
	var sessions api.SessionList
	ts.mustDo(200, "GET", "/v1/sessions", ts.admin, nil, &sessions)
	if len(sessions.Items) != 1 {
		t.Fatalf("%d sessions after the refusals, want 1", len(sessions.Items))
	}
	var got api.Session
	ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &got)
	if policyJSON(t, got.Spec.NetworkPolicy) != ownJSON || !got.Spec.NetworkPolicyOwn {
		t.Fatalf("session policy after the refusals %s (own %v), want %s", policyJSON(t, got.Spec.NetworkPolicy), got.Spec.NetworkPolicyOwn, ownJSON)
	}
	var entry api.QueueEntry
	ts.mustDo(200, "GET", "/v1/queue/"+id, ts.admin, nil, &entry)
	if policyJSON(t, entry.Spec.NetworkPolicy) != ownJSON {
		t.Fatalf("queue entry policy after the refusals %s, want %s", policyJSON(t, entry.Spec.NetworkPolicy), ownJSON)
	}

	// Said either way, the rules are taken: enforced, or stored unenforced
	// and shown as stored.
	var o api.Outpost
	code, _, out := ts.fetchWith("POST", "/v1/outposts", ts.admin, []byte(`{"name":"stored","network_policy":{"enabled":false,`+rules+`}}`))
	if code != 201 || json.Unmarshal(out, &o) != nil {
		t.Fatalf("create with enabled false: %d %s", code, out)
	}
	if got := policyJSON(t, o.Spec.NetworkPolicy); got != `{"enabled":false,`+rules+`}` {
		t.Fatalf("stored unenforced policy %s", got)
	}
	code, _, out = ts.fetchWith("PATCH", "/v1/outposts/stored", ts.admin, []byte(`{"network_policy":{"enabled":true,`+rules+`}}`))
	if code != 200 || json.Unmarshal(out, &o) != nil || policyJSON(t, o.Spec.NetworkPolicy) != `{"enabled":true,`+rules+`}` {
		t.Fatalf("enable: %d %s", code, out)
	}
	// A policy without rules needs no "enabled": it restricts nothing
	// by mistake.
	if code, _, out := ts.fetchWith("POST", "/v1/sessions", ts.admin, []byte(session(`{"allow":[]}`))); code != 201 {
		t.Fatalf("session with an empty, disabled policy: %d %s", code, out)
	}
}
