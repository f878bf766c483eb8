package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestErrorsDoNotEchoLongInput: an error message names the value it
// refuses, but a value of 70,000 characters comes back cut to its first
// 200 with an ellipsis, not whole.
func TestErrorsDoNotEchoLongInput(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("base")
	long := strings.Repeat("x", 70000)
	for _, c := range []struct {
		name, method, path, body string
		want                     int
	}{
		{"outpost name", "POST", "/v1/outposts", `{"name":"` + long + `","platform":"linux"}`, 400},
		{"platform", "POST", "/v1/outposts", `{"name":"ok","platform":"` + long + `"}`, 400},
		{"scope", "POST", "/v1/tokens", `{"scopes":["` + long + `"]}`, 400},
		{"agent kind", "POST", "/v1/sessions", `{"outpost":"base","agent":{"kind":"` + long + `"}}`, 400},
		{"step tool", "POST", "/v1/sessions", `{"outpost":"base","agent":{"kind":"script","steps":[{"tool":"` + long + `"}]}}`, 400},
		{"env name", "POST", "/v1/sessions", `{"outpost":"base","env":{"` + long + `":"1"},"agent":{"kind":"script"}}`, 400},
		{"secret name", "POST", "/v1/sessions", `{"outpost":"base","secrets":{"A` + long + `":""},"agent":{"kind":"script"}}`, 400},
		{"unknown field", "POST", "/v1/outposts", `{"` + long + `":1}`, 400},
		{"session outpost", "POST", "/v1/sessions", `{"outpost":"` + long + `","agent":{"kind":"script"}}`, 404},
		{"status filter", "GET", "/v1/sessions?status=" + long[:30000], "", 400},
	} {
		a := ts.answer(c.method, c.path, ts.admin, "", c.body)
		var e api.ErrorResponse
		if err := json.Unmarshal(a.body, &e); err != nil || a.status != c.want {
			t.Errorf("%s: %d %.300s, want %d with the JSON envelope", c.name, a.status, a.body, c.want)
			continue
		}
		if m := e.Error.Message; len(m) > 1000 || strings.Contains(m, strings.Repeat("x", 201)) || !strings.Contains(m, strings.Repeat("x", 150)) || !strings.Contains(m, "…") {
			t.Errorf("%s: a message of %d bytes: %.400s", c.name, len(m), m)
		}
	}
	// A list of the server's own is shown whole, however long.
	a := ts.answer("POST", "/v1/sessions", ts.admin, "", `{"outpost":"base","agent":{"kind":"script","steps":[{"tool":"nope"}]}}`)
	if a.status != http.StatusBadRequest || !strings.Contains(string(a.body), strings.Join(api.ToolNames(), ", ")) {
		t.Errorf("unknown tool: %d %s", a.status, a.body)
	}
}
