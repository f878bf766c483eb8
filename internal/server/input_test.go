package server

import (
	"strconv"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestBadInputChangesNothing sends malformed, unknown, oversized and
// dangerous requests and checks each gets a 4xx JSON error and that no
// outpost, session or token appeared.
func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("base")
	count := func() (outposts, sessions, tokens int) {
		var ol api.OutpostList
		ts.mustDo(200, "GET", "/v1/outposts", ts.admin, nil, &ol)
		var sl api.SessionList
		ts.mustDo(200, "GET", "/v1/sessions", ts.admin, nil, &sl)
		var tl api.TokenList
		ts.mustDo(200, "GET", "/v1/tokens", ts.admin, nil, &tl)
		return len(ol.Items), sl.Total, len(tl.Items)
	}
	o0, s0, t0 := count()
	script := func(extra string) string {
		return `{"outpost":"base","agent":{"kind":"script","steps":[{"tool":"exec","args":{"command":"true"}}]}` + extra + `}`
	}
	huge := `{"outpost":"base","prompt":"` + strings.Repeat("x", 2<<20) + `","agent":{"kind":"script"}}`
	cases := []struct {
		name, method, path, body string
		want                     int
	}{
		{"malformed json", "POST", "/v1/sessions", `{"outpost":`, 400},
		{"not an object", "POST", "/v1/sessions", `[1,2]`, 400},
		{"two objects", "POST", "/v1/sessions", script("") + script(""), 400},
		{"empty body", "POST", "/v1/sessions", ``, 400},
		{"unknown field", "POST", "/v1/sessions", script(`,"colour":"red"`), 400},
		{"unknown step arg", "POST", "/v1/sessions", `{"outpost":"base","agent":{"kind":"script","steps":[{"tool":"exec","args":{"command":"true","sudo":true}}]}}`, 400},
		{"unknown tool", "POST", "/v1/sessions", `{"outpost":"base","agent":{"kind":"script","steps":[{"tool":"rm_rf"}]}}`, 400},
		{"exec without command", "POST", "/v1/sessions", `{"outpost":"base","agent":{"kind":"script","steps":[{"tool":"exec","args":{}}]}}`, 400},
		{"wrong type", "POST", "/v1/sessions", `{"outpost":"base","title":5,"agent":{"kind":"script"}}`, 400},
		{"no agent kind", "POST", "/v1/sessions", `{"outpost":"base"}`, 400},
		{"unknown outpost", "POST", "/v1/sessions", `{"outpost":"nowhere","agent":{"kind":"script"}}`, 404},
		{"oversized", "POST", "/v1/sessions", huge, 413},
		{"repo traversal", "POST", "/v1/sessions", `{"outpost":"base","repos":[{"url":"/tmp/x.git","name":"../../etc"}],"agent":{"kind":"script"}}`, 400},
		{"repo slash", "POST", "/v1/sessions", `{"outpost":"base","repos":[{"url":"/tmp/x.git","name":"a/b"}],"agent":{"kind":"script"}}`, 400},
		{"repo dotdot name", "POST", "/v1/sessions", `{"outpost":"base","repos":[{"url":"/tmp/..git"}],"agent":{"kind":"script"}}`, 400},
		{"bad env name", "POST", "/v1/sessions", `{"outpost":"base","env":{"A B":"1"},"agent":{"kind":"script"}}`, 400},
		{"reserved env", "POST", "/v1/sessions", `{"outpost":"base","env":{"OUTPOST_CONNECT_TOKEN":"1"},"agent":{"kind":"script"}}`, 400},
		{"negative limit", "POST", "/v1/sessions", `{"outpost":"base","limits":{"max_duration_s":-1},"agent":{"kind":"script"}}`, 400},
		{"limit past a time.Duration", "POST", "/v1/sessions", `{"outpost":"base","limits":{"max_duration_s":10000000000},"agent":{"kind":"script"}}`, 400},
		{"idle limit past a time.Duration", "POST", "/v1/sessions", `{"outpost":"base","limits":{"idle_s":10000000000},"agent":{"kind":"script"}}`, 400},
		{"bad outpost name", "POST", "/v1/outposts", `{"name":"Bad_Name","platform":"linux"}`, 400},
		{"outpost name too long", "POST", "/v1/outposts", `{"name":"` + strings.Repeat("a", 64) + `","platform":"linux"}`, 400},
		{"bad platform", "POST", "/v1/outposts", `{"name":"ok","platform":"beos"}`, 400},
		{"duplicate outpost", "POST", "/v1/outposts", `{"name":"base","platform":"linux"}`, 409},
		{"unknown scope", "POST", "/v1/tokens", `{"scopes":["root"]}`, 400},
		{"no scopes", "POST", "/v1/tokens", `{"name":"x"}`, 400},
		{"token for unknown outpost", "POST", "/v1/tokens", `{"scopes":["sessions.read"],"outpost":"nowhere"}`, 404},
		{"claim without acceptor", "POST", "/v1/queue/ses_x/claim", `{}`, 400},
		{"unknown session events", "GET", "/v1/sessions/ses_nosuch/events", ``, 404},
		{"bad after", "GET", "/v1/sessions/ses_nosuch/events?after=-1", ``, 404},
		{"bad session cursor", "GET", "/v1/sessions?cursor=bm8tY29sb24", ``, 400},
		{"bad status filter", "GET", "/v1/sessions?status=sleeping", ``, 400},
		{"unknown endpoint", "GET", "/v1/nothing", ``, 404},
		{"bad force", "DELETE", "/v1/outposts/base?force=maybe", ``, 400},
	}
	for _, c := range cases {
		var body any
		if c.body != "" {
			body = c.body
		}
		if got := ts.do(c.method, c.path, ts.admin, body, nil); got != c.want {
			t.Errorf("%s: status %d, want %d", c.name, got, c.want)
		}
	}
	o1, s1, t1 := count()
	if o0 != o1 || s0 != s1 || t0 != t1 {
		t.Fatalf("bad input changed state: outposts %d→%d sessions %d→%d tokens %d→%d", o0, o1, s0, s1, t0, t1)
	}
}

func TestDeleteOutpostWithClaimedSessions(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("busy")
	a := ts.session("busy")
	b := ts.session("busy")
	machine := ts.token([]string{api.ScopeMachine}, "")
	ts.mustDo(200, "POST", "/v1/queue/"+a.Metadata.SessionID+"/claim", machine, api.ClaimRequest{AcceptorID: "w"}, nil)
	ts.mustDo(409, "DELETE", "/v1/outposts/busy", ts.admin, nil, nil)
	ts.mustDo(204, "DELETE", "/v1/outposts/busy?force=true", ts.admin, nil, nil)
	ts.mustDo(404, "GET", "/v1/outposts/busy", ts.admin, nil, nil)
	for _, id := range []string{a.Metadata.SessionID, b.Metadata.SessionID} {
		var s api.Session
		ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &s)
		if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailOutpostDeleted || !strings.Contains(s.Status.Reason, "busy") {
			t.Errorf("session after forced delete: %+v", s.Status)
		}
		ts.mustDo(404, "GET", "/v1/queue/"+id, machine, nil, nil)
	}
}

func TestSessionSecretsAreWriteOnly(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("sec")
	body := `{"outpost":"sec","secrets":{"API_KEY":"hunter2-very-secret"},"env":{"CI":"1"},"agent":{"kind":"script"}}`
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, body, &s)
	if len(s.Spec.SecretNames) != 1 || s.Spec.SecretNames[0] != "API_KEY" || s.Spec.Env["CI"] != "1" {
		t.Fatalf("spec %+v", s.Spec)
	}
	for _, path := range []string{"/v1/sessions/" + s.Metadata.SessionID, "/v1/sessions", "/v1/sessions/" + s.Metadata.SessionID + "/events"} {
		var raw map[string]any
		ts.mustDo(200, "GET", path, ts.admin, nil, &raw)
		if b, _ := jsonString(raw); strings.Contains(b, "hunter2") {
			t.Fatalf("%s leaks a secret: %s", path, b)
		}
	}
}

// A limit in seconds beyond what a time.Duration holds would turn negative
// after the conversion and end (or suspend) the session at once: it is
// refused, with the field named.
func TestLimitsPastADurationAreRefused(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("base")
	for _, field := range []string{"max_duration_s", "idle_s", "suspend_after_idle_s"} {
		body := `{"outpost":"base","limits":{"` + field + `":10000000000},"agent":{"kind":"script"}}`
		resp, raw := ts.raw("POST", "/v1/sessions", ts.admin, "application/json", body)
		if resp.StatusCode != 400 || !strings.Contains(string(raw), "limits."+field+" is 10000000000") {
			t.Errorf("%s: status %d, body %s", field, resp.StatusCode, raw)
		}
	}
	body := `{"outpost":"base","limits":{"max_duration_s":` + strconv.Itoa(api.MaxLimitSeconds) + `},"agent":{"kind":"script"}}`
	if got := ts.do("POST", "/v1/sessions", ts.admin, body, nil); got != 201 {
		t.Errorf("a hundred years: status %d, want 201", got)
	}
}
