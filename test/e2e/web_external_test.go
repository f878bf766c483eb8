//go:build linux

package e2e

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/outpost-sh/outpost/api"
)

// TestWebUIExternalSession: in Chromium, a member creates an external
// session from the new-session form; its page shows the MCP URL, makes a
// token for the session and shows the `claude mcp add` line with it, whose
// copy button copies that line; the token is the session's, not the
// member's.
func TestWebUIExternalSession(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	shots := screenshotDir(t)
	c := startCluster(t)
	if code := c.api("POST", "/v1/outposts", c.admin, api.CreateOutpostRequest{Name: "webext", Platform: "linux"}, nil); code != 201 {
		t.Fatalf("create outpost: %d", code)
	}
	var member api.CreateTokenResponse
	if code := c.api("POST", "/v1/tokens", c.admin, api.CreateTokenRequest{Name: "member", Role: api.RoleMember}, &member); code != 201 {
		t.Fatalf("create token: %d", code)
	}
	signIn(t, ctx, c, member.Secret)
	do(t, ctx, "new external session",
		chromedp.Navigate(c.url+"/ui/sessions/new"),
		chromedp.WaitVisible(chromedp.CSS("#create-session")),
		chromedp.SetValue(chromedp.CSS("#outpost"), "webext"),
		chromedp.SendKeys(chromedp.CSS("#title"), "driven by my editor"),
		chromedp.Click(chromedp.CSS("#kind-external")),
		chromedp.Click(chromedp.CSS("#create-session")),
		chromedp.WaitVisible(chromedp.CSS("#mcp-url")),
	)
	id := strings.TrimPrefix(eval[string](t, ctx, `location.pathname`), "/ui/sessions/")
	endpoint := eval[string](t, ctx, `document.getElementById("mcp-url").textContent`)
	if !strings.HasPrefix(endpoint, "http") || !strings.HasSuffix(endpoint, "/v1/sessions/"+id+"/mcp") {
		t.Fatalf("MCP URL %q for session %s", endpoint, id)
	}
	do(t, ctx, "make a token", chromedp.Click(chromedp.CSS("#mcp-token")), chromedp.WaitVisible(chromedp.CSS("#mcp-claude")))
	line := eval[string](t, ctx, `document.getElementById("mcp-claude").textContent`)
	m := regexp.MustCompile(`^claude mcp add --transport http outpost-` + regexp.QuoteMeta(id) + ` ` + regexp.QuoteMeta(endpoint) + ` --header "Authorization: Bearer (opt_\S+)"$`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("the claude mcp add line: %q", line)
	}
	if m[1] == member.Secret {
		t.Fatal("the line holds the member's own token")
	}
	var me api.WhoAmI
	if code := c.api("GET", "/v1/whoami", m[1], nil, &me); code != 200 || me.SessionID != id {
		t.Fatalf("whoami with the page's token: %d %+v", code, me)
	}
	if !strings.Contains(eval[string](t, ctx, `document.getElementById("mcp-json").textContent`), `"Authorization": "Bearer `+m[1]+`"`) {
		t.Error("the mcpServers block lacks the session's token")
	}
	// The copy button copies the line (the clipboard is stubbed: headless
	// Chromium has none to read back).
	copied := eval[string](t, ctx, `new Promise(function (done) {
		Object.defineProperty(navigator, "clipboard", {value: {writeText: function (s) { done(s); return Promise.resolve(); }}, configurable: true});
		document.querySelector('button[data-copy="mcp-claude"]').click();
	})`)
	if copied != line {
		t.Errorf("the copy button copied %q, want the line", copied)
	}
	waitText(t, ctx, `button[data-copy="mcp-claude"]`, "Copied", 5*time.Second)
	shot(t, ctx, shots, "external-session")
}
