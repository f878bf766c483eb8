package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/outpost-sh/outpost/internal/api"
)

const chromiumPath = "/usr/bin/chromium"

// browser starts headless Chromium for a test, or skips the test when
// Chromium is not installed.
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("chromium is not installed at %s", chromiumPath)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Flag("headless", "new"),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1100, 900),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelB := chromedp.NewContext(actx)
	if err := chromedp.Do(bctx); err != nil { // starts the browser
		cancelB()
		cancelA()
		t.Fatalf("start chromium: %v", err)
	}
	ctx, cancelC := context.WithTimeout(bctx, 4*time.Minute)
	t.Cleanup(func() { cancelC(); cancelB(); cancelA() })
	return ctx
}

// screenshotDir is where page screenshots go: $OUTPOST_SCREENSHOTS, or a
// directory of the test.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("OUTPOST_SCREENSHOTS"); d != "" {
		d = filepath.Join(d, t.Name())
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

func shot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

func do(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates JavaScript, awaiting a promise.
func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// waitText waits until the element's text contains want.
func waitText(t *testing.T, ctx context.Context, sel, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var got string
	for time.Now().Before(deadline) {
		got, _ = chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q)||{}).innerText||""`, sel)))
		if strings.Contains(got, want) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s to contain %q; it has %q", within, sel, want, got)
}

func signIn(t *testing.T, ctx context.Context, c *cluster, token string) {
	t.Helper()
	do(t, ctx, "sign in",
		chromedp.Navigate(c.url+"/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#f-q")),
	)
}

func signOut(t *testing.T, ctx context.Context) {
	t.Helper()
	do(t, ctx, "sign out", chromedp.Click(chromedp.CSS("#signout")), chromedp.WaitVisible(chromedp.CSS("#token")))
}

// newSessionUI fills and posts the new-session form.
func newSessionUI(t *testing.T, ctx context.Context, c *cluster, outpost, title, steps string) {
	t.Helper()
	do(t, ctx, "new session form",
		chromedp.Navigate(c.url+"/ui/sessions/new"),
		chromedp.WaitVisible(chromedp.CSS("#create-session")),
		chromedp.SetValue(chromedp.CSS("#outpost"), outpost),
		chromedp.SendKeys(chromedp.CSS("#title"), title),
		chromedp.SetValue(chromedp.CSS("#steps"), steps),
		chromedp.SetValue(chromedp.CSS("#secrets"), "WEB_SECRET=hidden-value-123"),
		chromedp.Click(chromedp.CSS("#create-session")),
	)
}

// TestWebUI drives the UI in Chromium: sign in, create an outpost and
// sessions, watch one run live, terminate another, tokens, CSRF and scope
// refusals, sign out.
func TestWebUI(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	shots := screenshotDir(t)
	c := startCluster(t)

	signIn(t, ctx, c, c.admin)

	// Create an outpost through the UI.
	do(t, ctx, "create outpost",
		chromedp.Navigate(c.url+"/ui/outposts"),
		chromedp.WaitVisible(chromedp.CSS("#name")),
		chromedp.SendKeys(chromedp.CSS("#name"), "webui"),
		chromedp.SendKeys(chromedp.CSS("#description"), "made in the browser"),
		chromedp.Click(chromedp.CSS("#create-outpost")),
	)
	waitText(t, ctx, "main table", "made in the browser", 10*time.Second)
	shot(t, ctx, shots, "outposts")

	var machine api.CreateTokenResponse
	if code := c.api("POST", "/v1/tokens", c.admin, api.CreateTokenRequest{Name: "web-worker", Scopes: []string{api.ScopeMachine}, Outpost: "webui"}, &machine); code != 201 {
		t.Fatalf("create machine token: %d", code)
	}

	// A session created in the UI, opened before any worker exists: its
	// output must arrive live, without a reload.
	steps := `[{"tool":"exec","args":{"command":"for i in 1 2 3; do printf '\\033[32mline-%s\\033[0m\\n' $i; sleep 0.3; done"}}]`
	newSessionUI(t, ctx, c, "webui", "live one", steps)
	do(t, ctx, "session page", chromedp.WaitVisible(chromedp.CSS("#transcript")))
	waitText(t, ctx, "#status", "Waiting in the queue", 10*time.Second)
	shot(t, ctx, shots, "session-queued")
	eval[int](t, ctx, `window.noReload = 42`)

	startWorker(t, c, "webui", machine.Secret)
	waitText(t, ctx, "#transcript", "line-3", 60*time.Second)
	waitText(t, ctx, "#status", "Finished", 30*time.Second)
	if eval[int](t, ctx, `window.noReload === 42 ? 42 : 0`) != 42 {
		t.Fatal("the session page reloaded; output should arrive live")
	}
	if eval[int](t, ctx, `document.querySelectorAll("#transcript .ev-output span.fg2").length`) == 0 {
		t.Error("coloured output was not rendered as coloured spans")
	}
	body := eval[string](t, ctx, `document.body.innerText`)
	if strings.Contains(body, "hidden-value-123") {
		t.Error("the page shows a secret's value")
	}
	if !strings.Contains(body, "WEB_SECRET") {
		t.Error("the page does not list the secret's name")
	}
	shot(t, ctx, shots, "session-finished")

	// A second session, terminated from its page.
	newSessionUI(t, ctx, c, "webui", "to terminate", `[{"tool":"exec","args":{"command":"sleep 120"}}]`)
	do(t, ctx, "second session page", chromedp.WaitVisible(chromedp.CSS("#terminate")))
	waitText(t, ctx, "#transcript", "call #", 60*time.Second)
	do(t, ctx, "terminate", chromedp.Click(chromedp.CSS("#terminate")))
	waitText(t, ctx, "#status", "Terminated by a user", 30*time.Second)
	shot(t, ctx, shots, "session-terminated")

	// The sessions list, filtered and searched.
	do(t, ctx, "sessions list", chromedp.Navigate(c.url+"/ui/sessions?outpost=webui&q=live"), chromedp.WaitVisible(chromedp.CSS("#f-q")))
	waitText(t, ctx, "main table", "live one", 10*time.Second)
	rows := eval[int](t, ctx, `document.querySelectorAll("main tbody tr").length`)
	if rows != 1 {
		t.Errorf("search for %q shows %d rows, want 1", "live", rows)
	}
	do(t, ctx, "sessions list", chromedp.Navigate(c.url+"/ui/sessions"), chromedp.WaitVisible(chromedp.CSS("#f-q")))
	shot(t, ctx, shots, "sessions")
	do(t, ctx, "new session page", chromedp.Navigate(c.url+"/ui/sessions/new"), chromedp.WaitVisible(chromedp.CSS("#steps")))
	shot(t, ctx, shots, "new-session")

	// A read-only token made on the tokens page, shown once.
	do(t, ctx, "create token",
		chromedp.Navigate(c.url+"/ui/tokens"),
		chromedp.WaitVisible(chromedp.CSS("#tname")),
		chromedp.SendKeys(chromedp.CSS("#tname"), "reader"),
		chromedp.Click(chromedp.CSS(`input[name="scope"][value="sessions.read"]`)),
		chromedp.Click(chromedp.CSS("#create-token")),
		chromedp.WaitVisible(chromedp.CSS("#new-token")),
	)
	reader := eval[string](t, ctx, `document.querySelector("#new-token").value`)
	if !strings.HasPrefix(reader, "opt_") {
		t.Fatalf("new token %q", reader)
	}
	shot(t, ctx, shots, "tokens")

	// A form post without the CSRF token is refused.
	status := eval[int](t, ctx, `fetch("/ui/outposts", {method: "POST", body: new URLSearchParams({name: "csrf-less"})}).then(r => r.status)`)
	if status != 403 {
		t.Errorf("post without CSRF token: %d, want 403", status)
	}
	status = eval[int](t, ctx, `fetch("/ui/outposts", {method: "POST", body: new URLSearchParams({name: "csrf-bad", csrf: "forged"})}).then(r => r.status)`)
	if status != 403 {
		t.Errorf("post with a forged CSRF token: %d, want 403", status)
	}
	if code := c.api("GET", "/v1/outposts/csrf-less", c.admin, nil, nil); code != 404 {
		t.Errorf("the outpost of a refused post exists (%d)", code)
	}

	signOut(t, ctx)
	shot(t, ctx, shots, "signin")

	// A sessions.read token cannot create sessions: the UI says so.
	signIn(t, ctx, c, reader)
	newSessionUI(t, ctx, c, "webui", "not allowed", `[]`)
	waitText(t, ctx, "#error", "403", 10*time.Second)
	shot(t, ctx, shots, "forbidden")
	signOut(t, ctx)

	// Signed out, pages send the browser to sign in.
	do(t, ctx, "signed out", chromedp.Navigate(c.url+"/ui/sessions"), chromedp.WaitVisible(chromedp.CSS("#token")))
	path := eval[string](t, ctx, `location.pathname`)
	if path != "/ui/signin" {
		t.Errorf("signed out, /ui/sessions went to %s", path)
	}
}

// TestWebUIEscapesOutput runs a session that prints HTML and a script tag:
// the session page shows them as text, live and after a reload.
func TestWebUIEscapesOutput(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	shots := screenshotDir(t)
	c := startCluster(t)
	token := setupOutpost(t, c, "xss")
	payload := `<script>window.pwned=1</script><img src=x onerror="window.pwned=2"><b>bold</b>`
	id := createSession(t, c, api.CreateSessionRequest{
		Outpost: "xss", Title: `<script>window.pwned=3</script> title`,
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{execStep("echo '" + payload + "'")}},
	})
	signIn(t, ctx, c, c.admin)
	do(t, ctx, "session page", chromedp.Navigate(c.url+"/ui/sessions/"+id), chromedp.WaitVisible(chromedp.CSS("#transcript")))
	startWorker(t, c, "xss", token)

	check := func(when string) {
		t.Helper()
		waitText(t, ctx, "#transcript", payload, 60*time.Second)
		if !eval[bool](t, ctx, `window.pwned === undefined && document.querySelectorAll("main script, main img, #transcript b").length === 0`) {
			t.Fatalf("%s: the page ran or rendered the session's HTML", when)
		}
		title := eval[string](t, ctx, `document.querySelector("h1").innerText`)
		if !strings.Contains(title, "<script>window.pwned=3</script>") {
			t.Errorf("%s: title shows %q", when, title)
		}
	}
	check("live")
	waitText(t, ctx, "#status", "Finished", 30*time.Second)
	do(t, ctx, "reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#transcript")))
	check("after reload")
	shot(t, ctx, shots, "escaped")
	do(t, ctx, "sessions list", chromedp.Navigate(c.url+"/ui/sessions"), chromedp.WaitVisible(chromedp.CSS("#f-q")))
	if !eval[bool](t, ctx, `window.pwned === undefined`) {
		t.Fatal("the sessions list ran a title's script")
	}
}
