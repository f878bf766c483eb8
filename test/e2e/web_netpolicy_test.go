//go:build linux

package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/outpost-sh/outpost/api"
)

// TestWebUINetworkPolicy edits network policies in Chromium: on the
// outpost's page an orchestrator-and-network-admin token adds a rule with
// ports through "Add another rule" and removes one, and the API holds the
// result; on a session's page a sessions.write token narrows the
// session's policy, sees the API's refusal of a wider one, and goes back
// to the outpost's.
func TestWebUINetworkPolicy(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	shots := screenshotDir(t)
	c := startCluster(t)

	start := api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "*.example.test"}, {IPv4: "10.1.0.0/16"}}}
	if code := c.api("POST", "/v1/outposts", c.admin, api.CreateOutpostRequest{Name: "webnet", NetworkPolicy: &start}, nil); code != 201 {
		t.Fatalf("create outpost: %d", code)
	}
	policyOf := func(p *api.NetworkPolicy) string {
		b, _ := json.Marshal(p)
		return string(b)
	}

	signIn(t, ctx, c, c.admin)
	do(t, ctx, "outpost page",
		chromedp.Navigate(c.url+"/ui/outposts"),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/ui/outposts/webnet"]`)),
		chromedp.Click(chromedp.CSS(`a[href="/ui/outposts/webnet"]`)),
		chromedp.WaitVisible(chromedp.CSS("#policy-effective")),
	)
	waitText(t, ctx, "#policy-rules", "ipv4 10.1.0.0/16", 10*time.Second)
	do(t, ctx, "edit the outpost's policy",
		chromedp.Click(chromedp.CSS("#policy-edit > summary")),
		chromedp.WaitVisible(chromedp.CSS("#policy-add")),
		// Two new rows: the blank one and one "Add another rule" adds.
		chromedp.SendKeys(chromedp.CSS("#policy-rows tr.new-rule input[name=value]"), "api.other.test"),
		chromedp.SendKeys(chromedp.CSS("#policy-rows tr.new-rule input[name=ports]"), "443, 8443"),
		chromedp.Click(chromedp.CSS("#policy-add")),
	)
	if n := eval[int](t, ctx, `document.querySelectorAll("#policy-rows tr.new-rule").length`); n != 2 {
		t.Fatalf("after Add another rule the form has %d new rows, want 2", n)
	}
	if v := eval[string](t, ctx, `document.activeElement.name + "=" + document.activeElement.value`); v != "value=" {
		t.Errorf("the added row's address does not have the focus, empty: %q", v)
	}
	do(t, ctx, "fill the added row, remove a rule, save",
		chromedp.SetValue(chromedp.CSS("#policy-rows tr.new-rule:last-child select"), "ipv6"),
		chromedp.SendKeys(chromedp.CSS("#policy-rows tr.new-rule:last-child input[name=value]"), "fd00::/8"),
		chromedp.Click(chromedp.CSS(`#policy-rows input.remove-rule[value="1"]`)),
	)
	shot(t, ctx, shots, "outpost-policy-editing")
	do(t, ctx, "save", chromedp.Click(chromedp.CSS("#policy-save")), chromedp.WaitVisible(chromedp.CSS(".notice")))
	waitText(t, ctx, "#network-policy", "hostname api.other.test ports 443,8443", 10*time.Second)
	var o api.Outpost
	if code := c.api("GET", "/v1/outposts/webnet", c.admin, nil, &o); code != 200 {
		t.Fatalf("get outpost: %d", code)
	}
	want := `{"enabled":true,"allow":[{"hostname":"*.example.test"},{"hostname":"api.other.test","ports":[443,8443]},{"ipv6":"fd00::/8"}]}`
	if got := policyOf(o.Spec.NetworkPolicy); got != want {
		t.Fatalf("outpost policy after the edit: %s, want %s", got, want)
	}
	shot(t, ctx, shots, "outpost-policy-saved")

	// A session's page, for a sessions.write token.
	var writer api.CreateTokenResponse
	if code := c.api("POST", "/v1/tokens", c.admin, api.CreateTokenRequest{Name: "writer", Scopes: []string{api.ScopeSessionsWrite}}, &writer); code != 201 {
		t.Fatalf("create token: %d", code)
	}
	var s api.Session
	if code := c.api("POST", "/v1/sessions", c.admin, api.CreateSessionRequest{Outpost: "webnet", Title: "narrowed",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"true"}`)}}}}, &s); code != 201 {
		t.Fatalf("create session: %d", code)
	}
	id := s.Metadata.SessionID
	signOut(t, ctx)
	signIn(t, ctx, c, writer.Secret)
	do(t, ctx, "session page",
		chromedp.Navigate(c.url+"/ui/sessions/"+id),
		chromedp.WaitVisible(chromedp.CSS("#policy-effective")),
		chromedp.Click(chromedp.CSS("#policy-edit > summary")),
		chromedp.WaitVisible(chromedp.CSS("#policy-locked")),
	)
	if eval[bool](t, ctx, `document.querySelector("#policy-enabled").disabled`) != true {
		t.Error("a sessions.write token may uncheck the restriction")
	}
	// Widen: the API refuses, the page says why and keeps the rule.
	do(t, ctx, "widen",
		chromedp.SendKeys(chromedp.CSS("#policy-rows tr.new-rule input[name=value]"), "evil.test"),
		chromedp.Click(chromedp.CSS("#policy-save")),
	)
	waitText(t, ctx, "#error", "network.admin", 10*time.Second)
	if v := eval[string](t, ctx, `Array.from(document.querySelectorAll("#policy-rows input[name=value]")).map(i => i.value).join(" ")`); !strings.Contains(v, "evil.test") {
		t.Errorf("the refused rule is gone from the form: %q", v)
	}
	shot(t, ctx, shots, "session-policy-refused")
	if got := c.session(id); got.Spec.NetworkPolicyOwn {
		t.Fatalf("a refused edit gave the session a policy: %s", policyOf(got.Spec.NetworkPolicy))
	}
	// Narrow: keep only the name below the outpost's glob.
	do(t, ctx, "narrow",
		chromedp.Navigate(c.url+"/ui/sessions/"+id),
		chromedp.WaitVisible(chromedp.CSS("#policy-effective")),
		chromedp.Click(chromedp.CSS("#policy-edit > summary")),
		chromedp.Click(chromedp.CSS(`#policy-rows input.remove-rule[value="1"]`)),
		chromedp.Click(chromedp.CSS(`#policy-rows input.remove-rule[value="2"]`)),
		chromedp.SetValue(chromedp.CSS(`#policy-rows tr.rule:first-child input[name=value]`), "git.example.test"),
		chromedp.Click(chromedp.CSS("#policy-save")),
		chromedp.WaitVisible(chromedp.CSS(".notice")),
	)
	waitText(t, ctx, "#network-policy", "only hostname git.example.test (the session's own)", 10*time.Second)
	if got := c.session(id); !got.Spec.NetworkPolicyOwn || policyOf(got.Spec.NetworkPolicy) != `{"enabled":true,"allow":[{"hostname":"git.example.test"}]}` {
		t.Fatalf("session policy after narrowing: %s own=%v", policyOf(got.Spec.NetworkPolicy), got.Spec.NetworkPolicyOwn)
	}
	shot(t, ctx, shots, "session-policy-narrowed")
	do(t, ctx, "follow the outpost's",
		chromedp.Click(chromedp.CSS("#policy-edit > summary")),
		chromedp.Click(chromedp.CSS("#policy-follow")),
		chromedp.WaitVisible(chromedp.CSS(".notice")),
	)
	waitText(t, ctx, "#policy-effective", "This is its outpost's policy.", 10*time.Second)
	if got := c.session(id); got.Spec.NetworkPolicyOwn {
		t.Fatal("the session still has its own policy after following its outpost's")
	}
}
