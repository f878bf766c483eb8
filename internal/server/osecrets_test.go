package server

import (
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestOutpostSecrets stores, lists, replaces and deletes secrets of an
// outpost, and checks that no answer and no log line shows a value.
func TestOutpostSecrets(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	ts := startServer(t, Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ts.outpost("home")
	ts.outpost("other")
	const path = "/v1/outposts/home/secrets/"

	var sec api.OutpostSecret
	ts.mustDo(http.StatusCreated, "PUT", path+"API_KEY", ts.admin, api.PutOutpostSecretRequest{Value: secretValue}, &sec)
	if sec.Name != "API_KEY" || sec.Outpost != "home" || sec.CreatedAt == 0 {
		t.Errorf("put answered %+v", sec)
	}
	ts.mustDo(http.StatusOK, "PUT", path+"API_KEY", ts.admin, api.PutOutpostSecretRequest{Value: secretValue + "-2"}, nil)
	ts.mustDo(http.StatusCreated, "PUT", path+"DB_URL", ts.admin, api.PutOutpostSecretRequest{Value: secretValue + "-db"}, nil)

	var list api.OutpostSecretList
	ts.mustDo(http.StatusOK, "GET", "/v1/outposts/home/secrets", ts.admin, nil, &list)
	if len(list.Items) != 2 || list.Items[0].Name != "API_KEY" || list.Items[1].Name != "DB_URL" {
		t.Errorf("list = %+v", list)
	}
	ts.mustDo(http.StatusOK, "GET", "/v1/outposts/other/secrets", ts.admin, nil, &list)
	if list.Items == nil || len(list.Items) != 0 {
		t.Errorf("another outpost lists %+v, want an empty list", list.Items)
	}
	for _, p := range []string{"/v1/outposts/home/secrets", path + "API_KEY"} {
		if code, body := rawGet(t, ts, p, false); code != 200 || strings.Contains(body, secretValue) {
			t.Errorf("GET %s: %d %s", p, code, body)
		}
	}

	// Bad input is a clear 400 and stores nothing.
	for _, c := range []struct {
		name string
		body any
		want string
	}{
		{"1BAD", api.PutOutpostSecretRequest{Value: "x"}, "not a valid environment variable name"},
		{"OUTPOST_X", api.PutOutpostSecretRequest{Value: "x"}, "reserved"},
		{"EMPTY", api.PutOutpostSecretRequest{}, "value is required"},
		{"NUL", api.PutOutpostSecretRequest{Value: "a\x00b"}, "NUL"},
		{"LONG", api.PutOutpostSecretRequest{Value: strings.Repeat("x", maxEnvValue+1)}, "longer than"},
		{"FIELD", map[string]string{"val": "x"}, "unknown field"},
	} {
		if got := ts.do("PUT", path+c.name, ts.admin, c.body, nil); got != 400 {
			t.Errorf("PUT %s: %d, want 400", c.name, got)
		}
	}
	ts.mustDo(http.StatusOK, "GET", "/v1/outposts/home/secrets", ts.admin, nil, &list)
	if len(list.Items) != 2 {
		t.Errorf("bad input stored something: %+v", list.Items)
	}
	ts.mustDo(http.StatusNotFound, "GET", path+"NOPE", ts.admin, nil, nil)
	ts.mustDo(http.StatusNotFound, "PUT", "/v1/outposts/nope/secrets/X", ts.admin, api.PutOutpostSecretRequest{Value: "x"}, nil)

	// A session names them; its own secret of the same name wins.
	var s api.Session
	ts.mustDo(http.StatusCreated, "POST", "/v1/sessions", ts.admin, map[string]any{
		"outpost": "home", "agent": map[string]any{"kind": "script"},
		"secrets": map[string]string{"DB_URL": "own-db", "OWN": "own"}, "use_secrets": []string{"API_KEY", "DB_URL"},
	}, &s)
	if !slices.Equal(s.Spec.SecretNames, []string{"API_KEY", "DB_URL", "OWN"}) || !slices.Equal(s.Spec.UseSecrets, []string{"API_KEY", "DB_URL"}) {
		t.Errorf("session spec: secret_names %v, use_secrets %v", s.Spec.SecretNames, s.Spec.UseSecrets)
	}
	stored, err := ts.srv.store.GetSession(t.Context(), s.Metadata.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"API_KEY": secretValue + "-2", "DB_URL": "own-db", "OWN": "own"}
	if len(stored.Secrets) != len(want) {
		t.Errorf("session secrets have names %v", stored.Secrets)
	}
	for k, v := range want {
		if stored.Secrets[k] != v {
			t.Errorf("session secret %s is not the expected value", k)
		}
	}
	// Names the outpost lacks, or another outpost's, are refused.
	for _, use := range [][]string{{"MISSING"}, {"API_KEY", "API_KEY"}, {"bad-name"}} {
		if got := ts.do("POST", "/v1/sessions", ts.admin, map[string]any{
			"outpost": "other", "agent": map[string]any{"kind": "script"}, "use_secrets": use,
		}, nil); got != 400 {
			t.Errorf("use_secrets %v: %d, want 400", use, got)
		}
	}
	if got := ts.do("POST", "/v1/sessions", ts.admin, map[string]any{
		"outpost": "other", "agent": map[string]any{"kind": "script"}, "use_secrets": []string{"API_KEY"},
	}, nil); got != 400 {
		t.Errorf("another outpost's secret: %d, want 400", got)
	}

	ts.mustDo(http.StatusNoContent, "DELETE", path+"API_KEY", ts.admin, nil, nil)
	ts.mustDo(http.StatusNotFound, "DELETE", path+"API_KEY", ts.admin, nil, nil)
	// The session made before keeps the value it was given.
	stored, err = ts.srv.store.GetSession(t.Context(), s.Metadata.SessionID)
	if err != nil || stored.Secrets["API_KEY"] != secretValue+"-2" {
		t.Errorf("after the delete the session's secret changed (%v)", err)
	}
	if strings.Contains(logs.String(), secretValue) {
		t.Errorf("the log shows a secret value:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "outpost secret set") {
		t.Error("setting a secret left no log line")
	}
}
