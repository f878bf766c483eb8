//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store/sqlite"
	"github.com/outpost-sh/outpost/internal/waitfor"
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
	// A page that is being replaced (a form's answer, a reload on a live
	// update) has no layout for a moment: "Cannot take screenshot with 0
	// width". Wait for the new one, within a deadline.
	var png []byte
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		png, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err == nil || !strings.Contains(err.Error(), "0 width") || time.Now().After(deadline) {
			break
		}
		if _, werr := chromedp.Run(ctx, chromedp.Poll[bool](`document.readyState === "complete" && document.documentElement.clientWidth > 0`)); werr != nil {
			break
		}
	}
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

// waitText waits until the element's text contains want, shown or not
// (the output of a collapsed step counts).
func waitText(t *testing.T, ctx context.Context, sel, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var got string
	for time.Now().Before(deadline) {
		got, _ = chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q)||{}).textContent||""`, sel)))
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
	if eval[int](t, ctx, `document.querySelectorAll("#transcript pre.term span.fg2").length`) == 0 {
		t.Error("coloured output was not rendered as coloured spans")
	}
	body := eval[string](t, ctx, `document.body.innerText`)
	if strings.Contains(eval[string](t, ctx, `document.body.textContent`), "hidden-value-123") {
		t.Error("the page holds a secret's value")
	}
	if !strings.Contains(body, "WEB_SECRET") {
		t.Error("the page does not list the secret's name")
	}
	shot(t, ctx, shots, "session-finished")

	// A second session, terminated from its page.
	newSessionUI(t, ctx, c, "webui", "to terminate", `[{"tool":"exec","args":{"command":"sleep 120"}}]`)
	do(t, ctx, "second session page", chromedp.WaitVisible(chromedp.CSS("#terminate")))
	waitJS(t, ctx, "the step of the call", `document.querySelector("#transcript li.step.s-running") !== null`, 60*time.Second)
	// Dismissing the confirmation leaves the session running.
	dlg := dialogsOf(ctx)
	dlg.accept.Store(false)
	do(t, ctx, "terminate, dismissed", chromedp.Click(chromedp.CSS("#terminate")))
	waitfor.Within(t, 10*time.Second, "the terminate confirmation", func() bool { return len(dlg.messages()) == 1 })
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

	// Tokens limited to an outpost show its name, linked, not its id.
	if code := c.api("POST", "/v1/tokens", c.admin, api.CreateTokenRequest{Name: "limited", Scopes: []string{api.ScopeMachine}, Outpost: "webui"}, nil); code != 201 {
		t.Fatalf("create a limited token: %d", code)
	}
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
	if cell := eval[string](t, ctx, `[...document.querySelectorAll("main tbody tr")].find(r => r.cells[0].textContent === "limited").cells[3].innerHTML`); !strings.Contains(cell, `<a href="/ui/outposts/webui">webui</a>`) {
		t.Errorf("the outpost of a limited token shows as %q, want its name linked", cell)
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

	// A stopped worker says goodbye: it is listed offline, and no longer
	// counted.
	if err := worker.stop(syscall.SIGTERM, 20*time.Second); err != nil {
		t.Logf("worker exit: %v", err)
	}
	do(t, ctx, "outposts page", chromedp.Navigate(c.url+"/ui/outposts"), chromedp.WaitVisible(chromedp.CSS("#workers tr.offline")))
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
	waitfor.Within(t, 10*time.Second, "the delete confirmation", func() bool { return len(dlg.messages()) == 1 })
	time.Sleep(500 * time.Millisecond)
	if code := c.api("GET", "/v1/outposts/shots", c.admin, nil, nil); code != 200 {
		t.Fatalf("after dismissing, GET outpost = %d", code)
	}
	dlg.accept.Store(true)
	do(t, ctx, "delete, accepted", chromedp.Click(chromedp.CSS(`main table button.danger`)), chromedp.WaitVisible(chromedp.CSS("#create-outpost")))
	waitfor.Within(t, 10*time.Second, "the outpost to be deleted", func() bool { return c.api("GET", "/v1/outposts/shots", c.admin, nil, nil) == 404 })
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
				Events: document.querySelectorAll("#transcript [data-seq]").length}; })()`)
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
	lo, hi := runs[0].Load, runs[0].Load
	for _, tm := range runs {
		lo, hi = min(lo, tm.Load), max(hi, tm.Load)
	}
	t.Logf("warm loads of the %d-event session page: load event %.0f–%.0f ms", n, lo, hi)
	if got := eval[string](t, ctx, `String(Math.max(...[...document.querySelectorAll("#transcript [data-seq]")].map(e => +e.dataset.seq)))`); got != fmt.Sprint(last) {
		t.Errorf("the last event shown is %s, want %d", got, last)
	}
	if !eval[bool](t, ctx, `document.querySelectorAll("#transcript b").length === 0`) {
		t.Error("output HTML was rendered")
	}
	shot(t, ctx, shots, "session-10000-events")
	do(t, ctx, "earlier", chromedp.Click(chromedp.CSS("#earlier")), chromedp.WaitVisible(chromedp.CSS("#transcript")))
	if first := eval[string](t, ctx, `String(Math.min(...[...document.querySelectorAll("#transcript [data-seq]")].map(e => +e.dataset.seq)))`); first == "1" {
		t.Errorf("load earlier jumped to the start")
	}
}

// stepView is what a step of the session page shows.
type stepView struct {
	Call, Class, Head, Term string
	Open                    bool
}

// stepsJS reads every step of the page's transcript.
const stepsJS = `[...document.querySelectorAll("#transcript li.step")].map(li => {
	const term = li.querySelector("pre.term");
	return {Call: li.dataset.call, Class: li.className, Head: li.querySelector("summary").textContent,
		Term: term ? term.innerHTML : "", Open: li.querySelector("details.step").open};
})`

// TestWebUISteps follows a session run by an orchestrator (process
// backend) in Chromium: its transcript reads like a CI log. Provisioning
// folds into one line; each call is a step with a header; a passing step
// is collapsed, a failing one (exit 3, red output) and a running one open;
// a step started after the page loaded appears, its output grows and it
// closes when it succeeds; a page opened while a step runs goes on from
// where the server left off; the live page and a reload show the same
// steps; the raw JSON is behind a toggle; a phone-sized screen does not
// scroll sideways.
func TestWebUISteps(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	shots := screenshotDir(t)
	c := startCluster(t)
	token := setupOutpost(t, c, "ci")
	long := strings.Repeat("0123456789", 60)
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "ci", Title: "ci log",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			execStep("echo passing step; echo " + long),
			{Tool: api.ToolExec, ContinueOnError: true, Args: execStep(`printf '\033[31mred\033[0m and <script>window.pwned=1</script>\n'; echo to stderr >&2; exit 3`).Args},
			execStep(`for i in 1 2 3 4 5 6 7 8 9 10; do printf '\033[3%dmtick-%d\033[0m\n' $((i % 7 + 1)) $i; sleep 0.5; done`),
		}}})
	signIn(t, ctx, c, c.admin)
	page := c.url + "/ui/sessions/" + id
	do(t, ctx, "session page", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#transcript")))
	eval[int](t, ctx, `window.noReload = 1`)
	if n := eval[int](t, ctx, `document.querySelectorAll("#transcript li.step").length`); n != 0 {
		t.Fatalf("the queued session shows %d steps", n)
	}
	startOrchestrator(t, c, "ci", token, t.TempDir(), "--backend", "process")

	// Live: the third step appears, running and open, and its output grows.
	term3 := `(document.querySelector("#call-3 pre.term") || {}).textContent || ""`
	waitJS(t, ctx, "the third step's first line", fmt.Sprintf(`(%s).includes("tick-1")`, term3), 90*time.Second)
	if eval[bool](t, ctx, fmt.Sprintf(`(%s).includes("tick-10")`, term3)) {
		t.Fatal("the third step's output arrived whole; it should grow")
	}
	if !eval[bool](t, ctx, `document.querySelector("#call-3").classList.contains("s-running") && document.querySelector("#call-3 details.step").open`) {
		t.Error("the running step is not shown running and open")
	}
	waitJS(t, ctx, "the third step's output to grow", fmt.Sprintf(`(%s).includes("tick-3")`, term3), 30*time.Second)
	if eval[int](t, ctx, `window.noReload`) != 1 {
		t.Fatal("the session page reloaded; steps should arrive live")
	}
	if !eval[bool](t, ctx, `document.querySelector("#call-1").classList.contains("s-ok") && !document.querySelector("#call-1 details.step").open`) {
		t.Error("the passing step did not close live")
	}
	if !eval[bool](t, ctx, `document.querySelector("#call-2").classList.contains("s-failed") && document.querySelector("#call-2 details.step").open`) {
		t.Error("the failing step is not open live")
	}
	shot(t, ctx, shots, "live-running")

	// A page opened while the step runs: the server renders its output so
	// far, the page goes on from there.
	do(t, ctx, "reload while the step runs", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#transcript")))
	if !eval[bool](t, ctx, `document.querySelector("#call-3").classList.contains("s-running") && document.querySelector("#call-3 details.step").open`) {
		t.Fatal("after a reload the running step is not shown running and open")
	}
	waitJS(t, ctx, "the third step to succeed", `document.querySelector("#call-3").classList.contains("s-ok")`, 60*time.Second)
	if eval[bool](t, ctx, `document.querySelector("#call-3 details.step").open`) {
		t.Error("the third step did not close when it succeeded")
	}
	waitText(t, ctx, "#live-state", "The session has ended.", 30*time.Second)
	if !eval[bool](t, ctx, `window.pwned === undefined`) {
		t.Fatal("the page ran a script from the output")
	}
	live := eval[[]stepView](t, ctx, stepsJS)

	// Reloaded, the server shows the same steps.
	do(t, ctx, "reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#transcript")))
	server := eval[[]stepView](t, ctx, stepsJS)
	if len(server) != 3 || len(live) != 3 {
		t.Fatalf("steps: %d live, %d after a reload; want 3", len(live), len(server))
	}
	for i := range server {
		if live[i] != server[i] {
			t.Errorf("step %d differs\n live: %+v\nserver: %+v", i+1, live[i], server[i])
		}
	}
	want := []struct {
		class string
		open  bool
		head  []string
	}{
		{"step s-ok", false, []string{"Step 1 of 3", "exec", "echo passing step; echo 0123", "exit 0"}},
		{"step s-failed", true, []string{"Step 2 of 3", "exec", `printf '\033[31mred`, "exit 3"}},
		{"step s-ok", false, []string{"Step 3 of 3", "exec", "for i in 1 2 3", "exit 0"}},
	}
	for i, w := range want {
		s := server[i]
		if s.Class != w.class || s.Open != w.open {
			t.Errorf("step %d is %q open=%v, want %q open=%v", i+1, s.Class, s.Open, w.class, w.open)
		}
		for _, h := range w.head {
			if !strings.Contains(s.Head, h) {
				t.Errorf("step %d's header %q lacks %q", i+1, s.Head, h)
			}
		}
		if !regexp.MustCompile(`\d(\.\d)?(ms|s)`).MatchString(s.Head) {
			t.Errorf("step %d's header %q shows no duration", i+1, s.Head)
		}
	}
	if got := eval[string](t, ctx, `document.querySelector("#call-2 pre.term .fg1").textContent`); got != "red" {
		t.Errorf("red text %q", got)
	}
	if got := eval[string](t, ctx, `getComputedStyle(document.querySelector("#call-2 pre.term .fg1")).color`); got != "rgb(255, 123, 114)" {
		t.Errorf("the red text's colour is %s", got)
	}
	if got := eval[string](t, ctx, `getComputedStyle(document.querySelector("#call-2 pre.term")).backgroundColor`); got != "rgb(13, 17, 23)" {
		t.Errorf("the terminal's background is %s", got)
	}
	if !strings.Contains(server[1].Term, "&lt;script&gt;window.pwned=1&lt;/script&gt;") || !strings.Contains(server[1].Term, `<span class="se">to stderr`) {
		t.Errorf("the failing step's output %q", server[1].Term)
	}
	for i := 1; i <= 10; i++ {
		if !strings.Contains(server[2].Term, fmt.Sprintf(`">tick-%d</span>`, i)) {
			t.Errorf("the third step lacks coloured tick-%d: %q", i, server[2].Term)
		}
	}

	// Provisioning and connection events fold into collapsed lines.
	if !eval[bool](t, ctx, `[...document.querySelectorAll("#transcript li[data-type]")].every(l => l.closest("li.noise"))`) {
		t.Error("a machine or connection event is shown outside a fold")
	}
	if n := eval[int](t, ctx, `[...document.querySelectorAll("#transcript > li.noise")].filter(g => g.nextElementSibling && g.nextElementSibling.matches("li.noise")).length`); n != 0 {
		t.Errorf("%d folds follow another fold; consecutive events should share one", n)
	}
	fold := eval[string](t, ctx, `document.querySelector("#transcript > li.noise summary").textContent`)
	if !regexp.MustCompile(`^\d+ events: .*machine create.* — last: `).MatchString(fold) {
		t.Errorf("the provisioning fold reads %q", fold)
	}
	if eval[bool](t, ctx, `document.querySelector("#transcript > li.noise details.noise").open`) {
		t.Error("the provisioning fold is open")
	}
	if eval[int](t, ctx, `document.querySelectorAll("#transcript li[data-type=machine]").length`) < 2 {
		t.Error("the folds lack the machine events")
	}

	// The raw JSON toggle.
	rawShown := `document.querySelector("#call-2 pre.raw-ev").checkVisibility()`
	if eval[bool](t, ctx, rawShown) {
		t.Error("the raw JSON shows before its toggle is opened")
	}
	do(t, ctx, "open the raw JSON", chromedp.Click(chromedp.CSS("#call-2 details.raw > summary")))
	waitJS(t, ctx, "the raw JSON to show", rawShown, 5*time.Second)
	raw := eval[string](t, ctx, `[...document.querySelectorAll("#call-2 pre.raw-ev")].map(p => p.textContent).join("\n")`)
	if !strings.Contains(raw, `"exit_code":3`) || !strings.Contains(raw, `"type":"call"`) || !strings.Contains(raw, `\u001b[31mred`) {
		t.Errorf("raw JSON %q", raw)
	}
	var ev api.Event
	if err := json.Unmarshal([]byte(strings.Split(raw, "\n")[0]), &ev); err != nil || ev.Type != api.EventCall || ev.CallSeq != 2 {
		t.Errorf("the first raw event is not the call's JSON: %v %+v", err, ev)
	}
	shot(t, ctx, shots, "steps-desktop")

	// A phone-sized screen: nothing scrolls the page sideways, not even the
	// 600-character line of the first step, once it is opened.
	do(t, ctx, "narrow screen", chromedp.EmulateViewport(390, 844), chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#transcript")))
	do(t, ctx, "open the passing step", chromedp.Click(chromedp.CSS("#call-1 summary")))
	waitJS(t, ctx, "the first step to open", `document.querySelector("#call-1 details.step").open`, 5*time.Second)
	if !eval[bool](t, ctx, `document.documentElement.scrollWidth <= window.innerWidth + 1`) {
		t.Errorf("the session page is wider than a 390 px screen (%d px)", eval[int](t, ctx, `document.documentElement.scrollWidth`))
	}
	if !eval[bool](t, ctx, `(() => { const p = document.querySelector("#call-1 pre.term"); return p.getBoundingClientRect().right <= window.innerWidth; })()`) {
		t.Error("the terminal block reaches past the screen's edge")
	}
	shot(t, ctx, shots, "steps-390")
	do(t, ctx, "wide screen", chromedp.EmulateReset())
}

// TestWebUIStepsMatchTheReason follows a script that clones a repository
// and stops at its second step's failure: the page numbers its calls as
// the session's reason does (the clone first, then "Step N of 3"), and the
// step that never ran shows as skipped — live, and the same after a reload.
func TestWebUIStepsMatchTheReason(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	c := startCluster(t)
	token := setupOutpost(t, c, "stops")
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "stops", Title: "stops early",
		Repos: []api.Repo{{URL: httpRepo(t), Name: "demo"}},
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			execStep("echo built"), execStep("echo failing; exit 4"), execStep("echo never runs"),
		}}})
	signIn(t, ctx, c, c.admin)
	do(t, ctx, "session page", chromedp.Navigate(c.url+"/ui/sessions/"+id), chromedp.WaitVisible(chromedp.CSS("#transcript")))
	eval[int](t, ctx, `window.noReload = 1`)
	startOrchestrator(t, c, "stops", token, t.TempDir(), "--backend", "process")
	waitText(t, ctx, "#live-state", "The session has ended.", 90*time.Second)
	if eval[int](t, ctx, `window.noReload`) != 1 {
		t.Fatal("the session page reloaded; steps should arrive live")
	}
	reason := eval[string](t, ctx, `document.getElementById("reason").textContent`)
	if !strings.Contains(reason, "Step 2 of 3") || !strings.Contains(reason, "step 3 did not run") {
		t.Fatalf("the reason reads %q", reason)
	}
	live := eval[[]stepView](t, ctx, stepsJS)
	do(t, ctx, "reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#transcript")))
	server := eval[[]stepView](t, ctx, stepsJS)
	want := []struct{ class, head string }{
		{"step s-ok", "Clone 1 of 1"},
		{"step s-ok", "Step 1 of 3"},
		{"step s-failed", "Step 2 of 3"},
		{"step s-skipped", "Step 3 of 3"},
	}
	for name, steps := range map[string][]stepView{"live": live, "after a reload": server} {
		if len(steps) != len(want) {
			t.Fatalf("%s: %d steps, want %d: %+v", name, len(steps), len(want), steps)
		}
		for i, w := range want {
			if s := steps[i]; s.Class != w.class || !strings.HasPrefix(strings.TrimSpace(s.Head), w.head) {
				t.Errorf("%s: step %d is %q %q, want %q starting %q", name, i+1, s.Class, s.Head, w.class, w.head)
			}
		}
		if s := steps[3]; !strings.Contains(s.Head, "echo never runs") || !strings.Contains(s.Head, "skipped") || s.Open {
			t.Errorf("%s: the skipped step reads %q (open %v)", name, s.Head, s.Open)
		}
	}

	// The whole log, as the page's link downloads it, reads as the CLI's.
	href := eval[string](t, ctx, `document.getElementById("log-download").href`)
	log := eval[string](t, ctx, fmt.Sprintf(`fetch(%q).then(r => r.text())`, href))
	for _, want := range []string{"$ echo built\nbuilt\n[exit 0]\n", "$ echo failing; exit 4\nfailing\n[exit 4]\n", "session ended: error", "Step 2 of 3"} {
		if !strings.Contains(log, want) {
			t.Errorf("the downloaded log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "never runs") {
		t.Errorf("the downloaded log shows the step that never ran:\n%s", log)
	}
	// Re-run: the button opens the new session's page, which runs the same
	// script to the same end.
	do(t, ctx, "re-run", chromedp.Click(chromedp.CSS("#rerun")))
	waitJS(t, ctx, "the new session's page", fmt.Sprintf(`location.pathname.startsWith("/ui/sessions/") && !location.pathname.endsWith(%q)`, id), 10*time.Second)
	waitText(t, ctx, "#live-state", "The session has ended.", 90*time.Second)
	if reason := eval[string](t, ctx, `document.getElementById("reason").textContent`); !strings.Contains(reason, "Step 2 of 3") {
		t.Errorf("the rerun's reason reads %q", reason)
	}
}

// TestWebUITerminalJS runs the terminal cases the server's renderer passes
// (internal/web/testdata/terminal.json) through static/terminal.js in
// Chromium: live output renders as the server renders it.
func TestWebUITerminalJS(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	c := startCluster(t)
	b, err := os.ReadFile("../../internal/web/testdata/terminal.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Name   string          `json:"name"`
		Chunks json.RawMessage `json:"chunks"`
		HTML   string          `json:"html"`
	}
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "a page with the scripts", chromedp.Navigate(c.url+"/ui/signin"), chromedp.WaitVisible(chromedp.CSS("#token")))
	if len(cases) < 20 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, tc := range cases {
		html, _ := json.Marshal(tc.HTML)
		got := eval[[]string](t, ctx, fmt.Sprintf(`(() => {
			const run = (chunks) => {
				const pre = document.createElement("pre"), term = OutpostTerminal.attach(pre);
				for (const c of chunks) term.write(c.text, c.stream === "stderr");
				return pre.innerHTML;
			};
			const chunks = %s;
			// The server's HTML, as the browser parses and writes it back.
			const tpl = document.createElement("template");
			tpl.innerHTML = %s;
			// The same output a character at a time.
			const chars = chunks.flatMap(c => [...c.text].map(ch => ({text: ch, stream: c.stream})));
			return [run(chunks), tpl.innerHTML, run(chars)];
		})()`, tc.Chunks, html))
		if got[0] != got[1] {
			t.Errorf("%s:\n   js %q\nserver %q", tc.Name, got[0], got[1])
		}
		if got[2] != got[1] {
			t.Errorf("%s, a character at a time:\n   js %q\nserver %q", tc.Name, got[2], got[1])
		}
	}
	if !eval[bool](t, ctx, `(() => { const pre = document.createElement("pre"); OutpostTerminal.attach(pre).write("\x1b[31m<img src=x onerror=alert(1)>", false); return pre.querySelector("img") === null && pre.textContent === "<img src=x onerror=alert(1)>"; })()`) {
		t.Error("terminal.js made markup of output")
	}
}

// TestWebUILLMSteps shows an llm session in Chromium: the model's messages
// read between the steps of the calls they ask for, each message links to
// its calls, and edit_file and apply_patch show coloured diffs.
func TestWebUILLMSteps(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	shots := screenshotDir(t)
	patch := "--- a/app.txt\n+++ b/app.txt\n@@ -1,2 +1,2 @@\n hello\n-outpost\n+outposts\n"
	fake := newFakeOpenAI(t,
		func(map[string]any) map[string]any {
			m := toolCall("call_1", "write_file", `{"path":"app.txt","content":"hello\nworld\n"}`)
			m["content"] = "I will write the file first, then fix its second line."
			return m
		},
		func(map[string]any) map[string]any {
			return toolCall("call_2", "edit_file", `{"path":"app.txt","old":"world","new":"outpost"}`)
		},
		func(map[string]any) map[string]any {
			b, _ := json.Marshal(map[string]string{"patch": patch})
			return toolCall("call_3", "apply_patch", string(b))
		},
		func(map[string]any) map[string]any {
			return toolCall("call_4", "exec", `{"command":"cat app.txt"}`)
		},
		func(map[string]any) map[string]any { return say("Done: app.txt says hello and outposts.") },
	)
	c := startClusterEnv(t, []string{"OUTPOST_LLM_PROVIDER=openai", "OUTPOST_LLM_BASE_URL=" + fake.srv.URL + "/v1",
		"OUTPOST_LLM_API_KEY=sk-test", "OUTPOST_LLM_MODEL=fake-model"})
	token := setupOutpost(t, c, "models")
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "models", Title: "llm steps", Prompt: "Write app.txt.",
		Agent: api.Agent{Kind: api.AgentLLM}})
	signIn(t, ctx, c, c.admin)
	do(t, ctx, "session page", chromedp.Navigate(c.url+"/ui/sessions/"+id), chromedp.WaitVisible(chromedp.CSS("#transcript")))
	startWorker(t, c, "models", token)
	waitText(t, ctx, "#live-state", "The session has ended.", 90*time.Second)
	check := func(when string) {
		t.Helper()
		order := eval[[]string](t, ctx, `[...document.querySelectorAll("#transcript > li.ev-message, #transcript > li.step")].map(li =>
			li.matches(".step") ? "step " + li.querySelector("summary .tool").textContent : "message " + li.className.replace(/.*msg-/, ""))`)
		want := "message user, message assistant, step write_file, message assistant, step edit_file, message assistant, step apply_patch, message assistant, step exec, message assistant"
		if strings.Join(order, ", ") != want {
			t.Errorf("%s: the transcript reads %q, want %q", when, strings.Join(order, ", "), want)
		}
		if got := eval[string](t, ctx, `document.querySelector("#transcript li.msg-assistant .text").textContent`); got != "I will write the file first, then fix its second line." {
			t.Errorf("%s: the first answer reads %q", when, got)
		}
		if got := eval[string](t, ctx, `document.querySelector("#transcript li.msg-assistant .calls a").getAttribute("href")`); got != "#call-1" {
			t.Errorf("%s: the first answer links to %q", when, got)
		}
		diffs := eval[[]string](t, ctx, `[...document.querySelectorAll("#transcript pre.diff")].map(d =>
			[...d.querySelectorAll("span.add, span.del")].map(s => s.className + ":" + s.textContent.trim()).join(" "))`)
		if len(diffs) != 2 || !strings.Contains(diffs[0], "del:-world") || !strings.Contains(diffs[0], "add:+outpost") ||
			!strings.Contains(diffs[1], "del:-outpost") || !strings.Contains(diffs[1], "add:+outposts") {
			t.Errorf("%s: diffs %q", when, diffs)
		}
		if got := eval[string](t, ctx, `document.querySelector("#call-3 summary .what").textContent`); got != "app.txt" {
			t.Errorf("%s: apply_patch's header names %q", when, got)
		}
		if got := eval[string](t, ctx, `document.querySelector("#call-4 pre.term").textContent`); got != "$ cat app.txt\nhello\noutposts\n" {
			t.Errorf("%s: the exec step shows %q", when, got)
		}
	}
	check("live")
	eval[bool](t, ctx, `[...document.querySelectorAll("details.step")].every(d => d.open = true)`)
	shot(t, ctx, shots, "llm-live")
	do(t, ctx, "reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#transcript")))
	check("after a reload")
	eval[bool](t, ctx, `[...document.querySelectorAll("details.step")].every(d => d.open = true)`)
	shot(t, ctx, shots, "llm")
}
