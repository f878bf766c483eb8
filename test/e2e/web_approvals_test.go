//go:build linux

package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/outpost-sh/outpost/api"
)

// TestWebUIApproval approves a held call in Chromium: a sessions.write
// token's session page says the session waits for approval and shows the
// call's arguments with the secret redacted; the machine has not run it;
// Approve, with a reason, runs it, and the transcript names who approved.
func TestWebUIApproval(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	shots := screenshotDir(t)
	c := startCluster(t)
	token := approvalOutpost(t, c, "webguard", []api.ApprovalRule{
		{Action: api.ApprovalAsk, Tool: "exec", Match: map[string]string{"command": `marker-web`}, Reason: "Markers need a person."},
	})
	startWorker(t, c, "webguard", token)
	var writer api.CreateTokenResponse
	if code := c.api("POST", "/v1/tokens", c.admin, api.CreateTokenRequest{Name: "approver", Scopes: []string{api.ScopeSessionsWrite}}, &writer); code != 201 {
		t.Fatalf("create token: %d", code)
	}
	const secret = "hidden-web-value-42"
	marker := filepath.Join(t.TempDir(), "marker-web")
	var s api.Session
	if code := c.api("POST", "/v1/sessions", writer.Secret, api.CreateSessionRequest{Outpost: "webguard", Title: "web approval",
		Secrets: map[string]string{"WEB_SECRET": secret},
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			execStep("test \"$WEB_SECRET\" = " + secret + " && " + touch(marker)),
			execStep("echo after"),
		}}}, &s); code != 201 {
		t.Fatalf("create session: %d", code)
	}
	id := s.Metadata.SessionID

	signIn(t, ctx, c, writer.Secret)
	do(t, ctx, "session page", chromedp.Navigate(c.url+"/ui/sessions/"+id), chromedp.WaitVisible(chromedp.CSS("#status")))
	// The open page learns of the hold live.
	waitText(t, ctx, "#status", "Waiting for a person's approval", 60*time.Second)
	waitHeldCall(t, c, id, 1)
	do(t, ctx, "reload", chromedp.Navigate(c.url+"/ui/sessions/"+id), chromedp.WaitVisible(chromedp.CSS("#approval-1")))
	card := eval[string](t, ctx, `document.querySelector("#approval-1").textContent`)
	for _, want := range []string{"#1", "exec", "outpost[0]", "Markers need a person.", "[REDACTED:WEB_SECRET]", "marker-web"} {
		if !strings.Contains(card, want) {
			t.Errorf("the held call's card lacks %q:\n%s", want, card)
		}
	}
	if page := eval[string](t, ctx, `document.documentElement.outerHTML`); strings.Contains(page, secret) {
		t.Error("the session page shows the secret's value")
	}
	shot(t, ctx, shots, "waiting-for-approval")
	staysAbsent(t, marker)

	do(t, ctx, "approve",
		chromedp.SendKeys(chromedp.CSS("#approve-reason-1"), "checked in the browser"),
		chromedp.Click(chromedp.CSS("#approve-1")),
	)
	waitExists(t, marker)
	end := c.waitFinal(id, 60*time.Second)
	if end.Status.Status != api.StatusExit {
		t.Fatalf("session ended %s/%s: %s", end.Status.Status, end.Status.StatusDetail, end.Status.Reason)
	}
	succeeded(t, c, id, 1)
	checkTrail(t, c, id, 1, "pending outpost[0]", "approved person outpost[0]")
	var decided *api.Approval
	for _, ev := range c.events(id) {
		if ev.Type == api.EventApproval && ev.Approval != nil && ev.Approval.State == api.ApprovalApproved {
			decided = ev.Approval
		}
	}
	if decided == nil || decided.By != writer.ID || decided.Reason != "checked in the browser" {
		b, _ := json.Marshal(decided)
		t.Fatalf("the approval %s, want by %s with the reason typed", b, writer.ID)
	}
	do(t, ctx, "session page after", chromedp.Navigate(c.url+"/ui/sessions/"+id), chromedp.WaitVisible(chromedp.CSS("#transcript")))
	waitText(t, ctx, "#transcript", "approved by "+writer.ID+": checked in the browser", 20*time.Second)
	if n := eval[int](t, ctx, `document.querySelectorAll("#approvals").length`); n != 0 {
		t.Error("an ended session's page still offers the approval")
	}
	shot(t, ctx, shots, "approved")
}
