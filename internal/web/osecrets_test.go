package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestOutpostSecretsSection: the outpost page lists stored secrets by name
// to a token that manages them and hides the section from others; its
// form stores a value the page never shows, shows the API's refusal of a
// bad name, and its delete button removes one.
func TestOutpostSecretsSection(t *testing.T) {
	t.Parallel()
	srv, tok := startUI(t)
	ctx := context.Background()
	if _, err := srv.Client.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "sec"}); err != nil {
		t.Fatal(err)
	}
	const value = "web-stored-secret-value-9f3a"

	if body := newUIUser(t, srv, tok["reader"]).page("/ui/outposts/sec"); strings.Contains(body, `id="secrets-h"`) {
		t.Error("a sessions.read token is shown the secrets section")
	}
	orch := newUIUser(t, srv, tok["orchestrator"])
	if body := orch.page("/ui/outposts/sec"); !strings.Contains(body, `id="no-secrets"`) || !strings.Contains(body, `id="set-secret"`) {
		t.Fatalf("the orchestrator's page lacks the empty secrets section:\n%s", body)
	}
	code, hdr, out := orch.post("/ui/outposts/sec", "/ui/outposts/sec/secrets", url.Values{"name": {"API_KEY"}, "value": {value}})
	if code != http.StatusSeeOther || !strings.HasPrefix(hdr.Get("Location"), "/ui/outposts/sec?secret=saved") {
		t.Fatalf("set: %d %s\n%s", code, hdr.Get("Location"), out)
	}
	body := orch.page("/ui/outposts/sec?secret=saved")
	if !strings.Contains(body, `<td class="mono">API_KEY</td>`) || !strings.Contains(body, "The secret is stored") {
		t.Errorf("after set, the page lacks the secret or the notice:\n%s", body)
	}
	if strings.Contains(body, value) || strings.Contains(out, value) {
		t.Error("the page shows the stored value")
	}
	vals, err := srv.Client.Outposts.ListSecrets(ctx, "sec")
	if err != nil || len(vals.Items) != 1 || vals.Items[0].Name != "API_KEY" {
		t.Fatalf("stored: %+v, %v", vals, err)
	}

	code, _, out = orch.post("/ui/outposts/sec", "/ui/outposts/sec/secrets", url.Values{"name": {"OUTPOST_X"}, "value": {value}})
	if code != http.StatusBadRequest || !strings.Contains(out, "reserved") || !strings.Contains(out, `value="OUTPOST_X"`) || strings.Contains(out, value) {
		t.Errorf("a reserved name: %d\n%s", code, out)
	}

	// The new-session form names stored secrets.
	writer := newUIUser(t, srv, tok["writer"])
	code, hdr, out = writer.post("/ui/sessions/new", "/ui/sessions", url.Values{"outpost": {"sec"}, "kind": {"script"},
		"steps": {"[]"}, "use_secrets": {" API_KEY, "}})
	if code != http.StatusSeeOther || !strings.HasPrefix(hdr.Get("Location"), "/ui/sessions/") {
		t.Fatalf("new session with use_secrets: %d %s\n%s", code, hdr.Get("Location"), out)
	}
	s, err := srv.Client.Sessions.Get(ctx, strings.TrimPrefix(hdr.Get("Location"), "/ui/sessions/"))
	if err != nil || strings.Join(s.Spec.UseSecrets, ",") != "API_KEY" || strings.Join(s.Spec.SecretNames, ",") != "API_KEY" {
		t.Errorf("the session made with use_secrets: %+v, %v", s, err)
	}

	code, hdr, out = orch.post("/ui/outposts/sec", "/ui/outposts/sec/secrets/API_KEY/delete", url.Values{})
	if code != http.StatusSeeOther || !strings.HasPrefix(hdr.Get("Location"), "/ui/outposts/sec?secret=deleted") {
		t.Fatalf("delete: %d %s\n%s", code, hdr.Get("Location"), out)
	}
	if body := orch.page("/ui/outposts/sec"); !strings.Contains(body, `id="no-secrets"`) {
		t.Error("after delete the page still lists a secret")
	}
}
