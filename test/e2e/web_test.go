package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/outpost-sh/outpost/internal/api"
	"github.com/outpost-sh/outpost/internal/store/sqlite"
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
	d := &dialogs{}
	d.accept.Store(true)
	answer := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range answer {
			if err != nil {
				return
			}
			d.mu.Lock()
			d.seen = append(d.seen, ev.Message)
			d.mu.Unlock()
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: d.accept.Load()})
		}
	}()
	return context.WithValue(ctx, dialogsKey{}, d)
}

// dialogs answers the page's JavaScript dialogs (confirm) as told, and
// keeps their messages.
type dialogs struct {
	accept atomic.Bool
	mu     sync.Mutex
	seen   []string
}

type dialogsKey struct{}

func dialogsOf(ctx context.Context) *dialogs { return ctx.Value(dialogsKey{}).(*dialogs) }

func (d *dialogs) messages() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.seen...)
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
	// Dismissing the confirmation leaves the session running.
	dlg := dialogsOf(ctx)
	dlg.accept.Store(false)
	do(t, ctx, "terminate, dismissed", chromedp.Click(chromedp.CSS("#terminate")))
	waitFor(t, 10*time.Second, "the terminate confirmation", func() bool { return len(dlg.messages()) == 1 })
	if msg := dlg.messages()[0]; !strings.Contains(msg, "Terminate this session?") {
		t.Errorf("confirmation says %q", msg)
	}
	time.Sleep(time.Second)
	path := eval[string](t, ctx, `location.pathname`)
	if st := c.session(strings.TrimPrefix(path, "/ui/sessions/")).Status.Status; st != api.StatusRunning {
		t.Fatalf("after dismissing the confirmation the session is %s, want running", st)
	}
	dlg.accept.Store(true)
	do(t, ctx, "terminate, accepted", chromedp.Click(chromedp.CSS("#terminate")))
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
	if n := eval[int](t, ctx, `document.querySelectorAll("form[action$='/revoke'][data-confirm]").length`); n == 0 {
		t.Error("the revoke forms do not ask for confirmation")
	}
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
	path = eval[string](t, ctx, `location.pathname`)
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

// waitJS polls a JavaScript condition until it is true.
func waitJS(t *testing.T, ctx context.Context, what, js string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if ok, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](js)); ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s (%s)", within, what, js)
}

// imgLoaded is true when the first image matching sel has loaded.
func imgLoaded(sel string) string {
	return fmt.Sprintf(`(() => { const i = document.querySelector(%q); if (!i) return false; i.scrollIntoView(); return i.complete && i.naturalWidth > 0; })()`, sel)
}

// TestWebUIWorkersAndMedia: a real worker shows on the Outposts page with
// its capabilities and disappears when it stops; a session's screenshot
// shows inline, live and after a reload, and its recording as a video;
// deleting an outpost asks first.
func TestWebUIWorkersAndMedia(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	shots := screenshotDir(t)
	c := startCluster(t)
	token := setupOutpost(t, c, "shots")
	signIn(t, ctx, c, c.admin)

	do(t, ctx, "outposts page", chromedp.Navigate(c.url+"/ui/outposts"), chromedp.WaitVisible(chromedp.CSS("#no-workers")))

	// A session opened before the worker starts: its screenshot arrives live.
	step := func(tool string, args any) api.Step {
		b, _ := json.Marshal(args)
		return api.Step{Tool: tool, Args: b}
	}
	pageURL := `data:text/html,<title>Shot</title><body%20style="background:%23fd0"><h1%20style="font-size:80px">Hello%20from%20the%20browser</h1></body>`
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "shots", Title: "screenshot",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			step(api.ToolBrowserNavigate, map[string]any{"url": pageURL}),
			step(api.ToolRecordStart, map[string]any{"name": "demo.webm"}),
			step(api.ToolExec, map[string]any{"command": "sleep 1"}),
			step(api.ToolBrowserScreenshot, map[string]any{"name": "page.png"}),
			step(api.ToolRecordStop, map[string]any{}),
		}}})
	do(t, ctx, "session page", chromedp.Navigate(c.url+"/ui/sessions/"+id), chromedp.WaitVisible(chromedp.CSS("#transcript")))
	eval[int](t, ctx, `window.noReload = 7`)

	worker, _ := startWorker(t, c, "shots", token)
	waitJS(t, ctx, "the live screenshot to load", imgLoaded("#transcript figure.media img"), 90*time.Second)
	if eval[int](t, ctx, `window.noReload === 7 ? 7 : 0`) != 7 {
		t.Fatal("the session page reloaded; the screenshot should arrive live")
	}
	if alt := eval[string](t, ctx, `document.querySelector("#transcript figure.media img").alt`); alt != "page.png" {
		t.Errorf("screenshot alt %q, want page.png", alt)
	}
	waitText(t, ctx, "#status", "Finished", 60*time.Second)

	// Server-rendered: the screenshot in the transcript and the artifacts,
	// the recording as a video that loads its metadata.
	do(t, ctx, "reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#artifacts")))
	waitJS(t, ctx, "the transcript screenshot to load", imgLoaded("#transcript figure.media img"), 20*time.Second)
	waitJS(t, ctx, "the artifact screenshot to load", imgLoaded("#artifacts figure.media img"), 20*time.Second)
	if w := eval[int](t, ctx, `document.querySelector("#artifacts img").naturalWidth`); w < 100 {
		t.Errorf("screenshot is %d pixels wide", w)
	}
	if lazy := eval[string](t, ctx, `document.querySelector("#artifacts img").loading`); lazy != "lazy" {
		t.Errorf("img loading=%q, want lazy", lazy)
	}
	waitJS(t, ctx, "the recording's metadata", `(() => { const v = document.querySelector("#artifacts video"); return !!v && v.readyState >= 1 && v.duration > 0; })()`, 20*time.Second)
	if pre := eval[string](t, ctx, `document.querySelector("#artifacts video").preload`); pre != "metadata" {
		t.Errorf("video preload=%q, want metadata", pre)
	}
	shot(t, ctx, shots, "session-media")

	// The worker on the Outposts page, with its capabilities.
	// The worker is idle once its remote has exited, a moment after the
	// session ended; the page shows the state of the last heartbeat.
	var row string
	for deadline := time.Now().Add(30 * time.Second); ; {
		do(t, ctx, "outposts page", chromedp.Navigate(c.url+"/ui/outposts"), chromedp.WaitVisible(chromedp.CSS("#workers")))
		row = eval[string](t, ctx, `document.querySelector("#workers tbody tr").innerText`)
		if strings.Contains(row, "idle") || time.Now().After(deadline) {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	for _, want := range []string{"worker-", "shots", runtime.GOOS + "/" + runtime.GOARCH, "idle"} {
		if !strings.Contains(row, want) {
			t.Errorf("worker row %q lacks %q", row, want)
		}
	}
	if git := eval[string](t, ctx, `document.querySelector("#workers .caps-git").innerText`); git == "" || git == "no" {
		t.Errorf("git cell %q, want a version", git)
	}
	if chrome := eval[string](t, ctx, `document.querySelector("#workers .caps-chrome").innerText`); !strings.Contains(chrome, "Chrom") {
		t.Errorf("Chrome cell %q, want the browser's version", chrome)
	}
	if ff := eval[string](t, ctx, `document.querySelector("#workers .caps-ffmpeg").innerText`); ff == "" || ff == "no" {
		t.Errorf("ffmpeg cell %q, want a version", ff)
	}
	if n := eval[string](t, ctx, `document.querySelector("main table .worker-count").innerText`); n != "1" {
		t.Errorf("workers column shows %q, want 1", n)
	}
	shot(t, ctx, shots, "outposts-workers")

	// On a phone-sized screen the page does not scroll sideways: wide
	// tables scroll inside their box.
	do(t, ctx, "narrow screen", chromedp.EmulateViewport(390, 844), chromedp.Navigate(c.url+"/ui/outposts"), chromedp.WaitVisible(chromedp.CSS("#workers")))
	for _, p := range []string{"/ui/outposts", "/ui/sessions/" + id} {
		do(t, ctx, "narrow "+p, chromedp.Navigate(c.url+p), chromedp.WaitVisible(chromedp.CSS("main")))
		if !eval[bool](t, ctx, `document.documentElement.scrollWidth <= window.innerWidth + 1`) {
			t.Errorf("%s is wider than a 390 px screen (%d px)", p, eval[int](t, ctx, `document.documentElement.scrollWidth`))
		}
		shot(t, ctx, shots, "narrow-"+strings.ReplaceAll(strings.Trim(p, "/"), "/", "-"))
	}
	do(t, ctx, "wide screen", chromedp.EmulateReset())

	// A stopped worker says goodbye and is no longer listed.
	if err := worker.stop(syscall.SIGTERM, 20*time.Second); err != nil {
		t.Logf("worker exit: %v", err)
	}
	do(t, ctx, "outposts page", chromedp.Navigate(c.url+"/ui/outposts"), chromedp.WaitVisible(chromedp.CSS("#no-workers")))
	if n := eval[string](t, ctx, `document.querySelector("main table .worker-count").innerText`); n != "0" {
		t.Errorf("workers column shows %q after the worker stopped, want 0", n)
	}

	// The new-session form takes repositories.
	do(t, ctx, "new session with a repository",
		chromedp.Navigate(c.url+"/ui/sessions/new"),
		chromedp.WaitVisible(chromedp.CSS("#repos")),
		chromedp.SetValue(chromedp.CSS("#outpost"), "shots"),
		chromedp.SendKeys(chromedp.CSS("#title"), "with a repo"),
		chromedp.SetValue(chromedp.CSS("#repos"), "file:///srv/git/app.git main app\nhttps://example.com/lib.git"),
		chromedp.SetValue(chromedp.CSS("#steps"), "[]"),
		chromedp.Click(chromedp.CSS("#create-session")),
		chromedp.WaitVisible(chromedp.CSS("#transcript")),
	)
	withRepo := c.session(strings.TrimPrefix(eval[string](t, ctx, `location.pathname`), "/ui/sessions/"))
	if r := withRepo.Spec.Repos; len(r) != 2 || r[0] != (api.Repo{URL: "file:///srv/git/app.git", Ref: "main", Name: "app"}) || r[1].URL != "https://example.com/lib.git" || r[1].Name != "lib" {
		t.Errorf("session repos %+v", r)
	}

	// Deleting an outpost asks first: dismissed, it stays.
	dlg := dialogsOf(ctx)
	dlg.accept.Store(false)
	do(t, ctx, "outposts page", chromedp.Navigate(c.url+"/ui/outposts"), chromedp.WaitVisible(chromedp.CSS("#create-outpost")))
	do(t, ctx, "delete, dismissed", chromedp.Click(chromedp.CSS(`main table button.danger`)))
	waitFor(t, 10*time.Second, "the delete confirmation", func() bool { return len(dlg.messages()) == 1 })
	time.Sleep(500 * time.Millisecond)
	if code := c.api("GET", "/v1/outposts/shots", c.admin, nil, nil); code != 200 {
		t.Fatalf("after dismissing, GET outpost = %d", code)
	}
	dlg.accept.Store(true)
	do(t, ctx, "delete, accepted", chromedp.Click(chromedp.CSS(`main table button.danger`)), chromedp.WaitVisible(chromedp.CSS("#create-outpost")))
	waitFor(t, 10*time.Second, "the outpost to be deleted", func() bool { return c.api("GET", "/v1/outposts/shots", c.admin, nil, nil) == 404 })
	if msg := dlg.messages(); len(msg) != 2 || !strings.Contains(msg[1], "Delete outpost shots?") {
		t.Errorf("confirmations %q", msg)
	}
}

// TestWebUILongTranscript opens a session of 10,000 events in Chromium and
// measures the navigation (DOMContentLoaded, load). The events are written
// into the server's SQLite database directly (the store's AppendEvents, as
// the server records them), because a remote would take minutes to make
// them. The bound is a sanity check; the numbers are logged.
func TestWebUILongTranscript(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	shots := screenshotDir(t)
	c := startCluster(t)
	setupOutpost(t, c, "long")
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "long", Title: "ten thousand events",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{execStep("true")}}})
	const n = 10000
	st, err := sqlite.Open(context.Background(), filepath.Join(c.dataDir, "outpost.db"))
	if err != nil {
		t.Fatal(err)
	}
	ok, zero := true, 0
	var batch []api.Event
	for call := int64(1); len(batch) < n; call++ {
		args, _ := json.Marshal(map[string]string{"command": fmt.Sprintf("make test PKG=./pkg/%d", call)})
		batch = append(batch,
			api.Event{Type: api.EventCall, Time: time.Now().UnixMilli(), CallSeq: call, Tool: api.ToolExec, Args: args},
			api.Event{Type: api.EventOutput, Time: time.Now().UnixMilli(), CallSeq: call, Stream: "stdout", Text: fmt.Sprintf("\x1b[32mok\x1b[0m  pkg/%d <b>not bold</b>\n", call)},
			api.Event{Type: api.EventOutput, Time: time.Now().UnixMilli(), CallSeq: call, Stream: "stderr", Text: "warning: something\n"},
			api.Event{Type: api.EventResult, Time: time.Now().UnixMilli(), CallSeq: call, Tool: api.ToolExec, OK: &ok, ExitCode: &zero})
	}
	for i := 0; i < n; i += 1000 {
		if err := st.AppendEvents(context.Background(), id, batch[i:i+1000]); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	last := int64(len(c.events(id)))

	signIn(t, ctx, c, c.admin)
	type timing struct {
		TTFB, Response, DOMContentLoaded, Load float64
		Events                                 int
	}
	var runs []timing
	for i := range 4 {
		do(t, ctx, "session page", chromedp.Navigate(c.url+"/ui/sessions/"+id), chromedp.WaitVisible(chromedp.CSS("#transcript")))
		waitJS(t, ctx, "the load event", `performance.getEntriesByType("navigation")[0].loadEventEnd > 0`, 30*time.Second)
		tm := eval[timing](t, ctx, `(() => { const n = performance.getEntriesByType("navigation")[0];
			return {TTFB: n.responseStart, Response: n.responseEnd, DOMContentLoaded: n.domContentLoadedEventEnd, Load: n.loadEventEnd,
				Events: document.querySelectorAll("#transcript li.ev").length}; })()`)
		if i > 0 { // the first load warms the server and the browser's cache of the static files
			runs = append(runs, tm)
		}
		t.Logf("load %d of the %d-event session page: first byte %.0f ms, last byte %.0f ms, DOMContentLoaded %.0f ms, load %.0f ms, %d events shown",
			i+1, n, tm.TTFB, tm.Response, tm.DOMContentLoaded, tm.Load, tm.Events)
		if tm.Events != 500 {
			t.Errorf("the page shows %d events, want the newest 500", tm.Events)
		}
		if tm.Load > 5000 {
			t.Errorf("the %d-event session page took %.0f ms to load; the target is under 1 s", n, tm.Load)
		}
	}
	if got := eval[string](t, ctx, `document.querySelector("#transcript li.ev:last-child").dataset.seq`); got != fmt.Sprint(last) {
		t.Errorf("the last event shown is %s, want %d", got, last)
	}
	if !eval[bool](t, ctx, `document.querySelectorAll("#transcript b").length === 0`) {
		t.Error("output HTML was rendered")
	}
	shot(t, ctx, shots, "session-10000-events")
	do(t, ctx, "earlier", chromedp.Click(chromedp.CSS("#earlier")), chromedp.WaitVisible(chromedp.CSS("#transcript")))
	if first := eval[string](t, ctx, `document.querySelector("#transcript li.ev").dataset.seq`); first == "1" {
		t.Errorf("load earlier jumped to the start")
	}
}
