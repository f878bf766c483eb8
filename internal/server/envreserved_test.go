package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestSessionEnvRefusesPublicSpellings: a session's env and secrets may set
// neither spelling of a variable the remote or the worker reads — the
// public contract's DEVIN_… names are refused like the OUTPOST_… ones —
// and a refused session is not created.
func TestSessionEnvRefusesPublicSpellings(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("base")
	var names []string
	for _, v := range append(append([]api.EnvVar{}, api.SpawnEnv...), api.WorkerEnv...) {
		names = append(names, v.Names()...)
	}
	if len(names) < 20 {
		t.Fatalf("only %d names: %v", len(names), names)
	}
	count := func() int {
		var l api.SessionList
		ts.mustDo(200, "GET", "/v1/sessions", ts.admin, nil, &l)
		return len(l.Items)
	}
	before := count()
	for _, name := range names {
		for _, field := range []string{"env", "secrets"} {
			body, _ := json.Marshal(map[string]any{"outpost": "base", field: map[string]string{name: "x"}, "agent": map[string]string{"kind": "script"}})
			a := ts.answer("POST", "/v1/sessions", ts.admin, "", string(body))
			if a.status != 400 || !strings.Contains(string(a.body), "is reserved") {
				t.Errorf("%s %s: %d %s, want 400 reserved", field, name, a.status, a.body)
			}
		}
	}
	if n := count(); n != before {
		t.Fatalf("refused sessions were created: %d sessions, were %d", n, before)
	}
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"base","env":{"DEVIN_OWN_SETTING":"1","MY_VAR":"2"},"agent":{"kind":"script"}}`, nil)
}
