package server

import (
	"html"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/web"
)

// TestExternalSessionPage: a member (sessions.write on one outpost, not
// admin) creates an external session in the web UI; its page shows the
// MCP URL, and on request a token limited to the session inside a ready
// `claude mcp add` line and mcpServers block — never the viewer's own
// token — and the token reaches that session only.
func TestExternalSessionPage(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("home")
	member := ts.token([]string{api.ScopeSessionsWrite}, "home")

	status, page := ts.uiRequest("GET", "/ui/sessions/new", member, nil)
	if status != 200 || !strings.Contains(page, `id="kind-external"`) {
		t.Fatalf("new session page: %d, external kind offered: %v", status, strings.Contains(page, `id="kind-external"`))
	}
	csrf := csrfField.FindStringSubmatch(page)[1]
	status, page = ts.uiRequest("POST", "/ui/sessions", member, url.Values{"csrf": {csrf}, "outpost": {"home"}, "kind": {"external"}, "title": {"from the web"}})
	if status != 303 {
		t.Fatalf("create an external session: %d %s", status, page)
	}
	var list api.SessionList
	ts.mustDo(200, "GET", "/v1/sessions?outpost=home", ts.admin, nil, &list)
	if len(list.Items) != 1 || list.Items[0].Spec.Agent.Kind != api.AgentExternal {
		t.Fatalf("sessions after the form: %+v", list.Items)
	}
	id := list.Items[0].Metadata.SessionID
	endpoint := ts.url + "/v1/sessions/" + id + "/mcp"

	status, page = ts.uiRequest("GET", "/ui/sessions/"+id, member, nil)
	if status != 200 || !strings.Contains(page, `<code id="mcp-url">`+endpoint+`</code>`) || !strings.Contains(page, `id="mcp-token"`) {
		t.Fatalf("external session page: %d, lacks the MCP URL %s or the token button", status, endpoint)
	}
	if strings.Contains(page, member) {
		t.Fatal("the page shows the viewer's own token")
	}
	csrf = csrfField.FindStringSubmatch(page)[1]
	status, page = ts.uiRequest("POST", "/ui/sessions/"+id+"/token", member, url.Values{"csrf": {csrf}})
	if status != 201 {
		t.Fatalf("make a token for the session: %d", status)
	}
	page = html.UnescapeString(page)
	m := regexp.MustCompile(`claude mcp add --transport http outpost-` + id + ` ` + regexp.QuoteMeta(endpoint) + ` --header "Authorization: Bearer (opt_[A-Za-z0-9_-]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("the page lacks the claude mcp add line")
	}
	secret := m[1]
	if secret == member || strings.Contains(page, member) {
		t.Fatal("the line holds the viewer's own token")
	}
	if !strings.Contains(page, web.MCPServersJSON(id, endpoint, secret)) || !strings.Contains(page, `"mcpServers"`) {
		t.Error("the page lacks the mcpServers block with the session's token")
	}
	var me api.WhoAmI
	ts.mustDo(200, "GET", "/v1/whoami", secret, nil, &me)
	if me.SessionID != id {
		t.Errorf("the page's token is limited to %q, want %s", me.SessionID, id)
	}
	ts.mustDo(403, "GET", "/v1/sessions", secret, nil, nil)

	// A script session's page shows none of it.
	other := ts.session("home").Metadata.SessionID
	if _, page := ts.uiRequest("GET", "/ui/sessions/"+other, member, nil); strings.Contains(page, `id="mcp-url"`) {
		t.Error("a script session's page shows an MCP URL")
	}
}

// TestExternalDocsLine: the docs give the line the page shows.
func TestExternalDocsLine(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/agents.md")
	if err != nil {
		t.Fatal(err)
	}
	const id = "SESSION_ID"
	endpoint := "https://outpost.example.com/v1/sessions/" + id + "/mcp"
	for _, want := range []string{web.ClaudeMCPAdd(id, endpoint, "$OUTPOST_TOKEN"), web.MCPServersJSON(id, endpoint, "$OUTPOST_TOKEN")} {
		if !strings.Contains(string(b), want) {
			t.Errorf("docs/agents.md lacks what the session page shows:\n%s", want)
		}
	}
}
