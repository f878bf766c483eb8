//go:build linux

package e2e

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// TestWebUIApprovesDeviceLogin: a worker started without a token prints a
// link; a person opens it in the browser, signs in (and is brought back
// to the link), sees what asks (the
// client, the host, the scope, the outpost, the source address) and
// approves, and the worker registers. A login typed in by its code is
// denied the same way and exits 1.
func TestWebUIApprovesDeviceLogin(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	c := startCluster(t)
	run(t, c.env(c.admin), "worker", "outpost", "create", "webdev", "--platform", "linux")
	env := append(noTokenEnv(t, c), api.EnvWorkerIsolation.Name+"=none")
	w := start(t, "worker", env, "worker", "start", "--outpost", "webdev", "--dir", t.TempDir(), "--data-dir", filepath.Join(t.TempDir(), "worker"))
	code := userCode(t, w)
	link := regexp.MustCompile(`open (http://\S+)`).FindStringSubmatch(w.out.String())
	if link == nil || !strings.HasSuffix(link[1], "/ui/device?user_code="+code) {
		t.Fatalf("the worker printed no verification link:\n%s", w.out.String())
	}
	dir := screenshotDir(t)

	// Signed out, the link asks to sign in first, and comes back to the
	// grant once signed in.
	do(t, ctx, "open the link signed out", chromedp.Navigate(link[1]), chromedp.WaitVisible(chromedp.CSS("#token")))
	waitText(t, ctx, "main", "Sign in to approve a device login", 5*time.Second)
	do(t, ctx, "sign in from the link", chromedp.SendKeys(chromedp.CSS("#token"), c.admin),
		chromedp.Click(chromedp.CSS("#signin")), chromedp.WaitVisible(chromedp.CSS("#device-approve")))
	waitText(t, ctx, "#device-code", code, 5*time.Second)
	waitText(t, ctx, "#device-client", api.DeviceClientWorker+" on ", 5*time.Second)
	waitText(t, ctx, "#device-scopes", api.ScopeMachine, 5*time.Second)
	waitText(t, ctx, "#device-outpost", "webdev", 5*time.Second)
	waitText(t, ctx, "#device-source", "127.0.0.1", 5*time.Second)
	shot(t, ctx, dir, "device-approve")
	do(t, ctx, "approve", chromedp.Click(chromedp.CSS("#device-approve")), chromedp.WaitVisible(chromedp.CSS(".notice")))
	waitText(t, ctx, ".notice", "Approved", 5*time.Second)
	waitText(t, ctx, "#device-state", "approved", 5*time.Second)
	waitfor.Within(t, 30*time.Second, "the approved worker to register", func() bool {
		var list api.WorkerList
		return c.api("GET", "/v1/outposts/webdev/workers", c.admin, nil, &list) == 200 && list.Total == 1
	})

	// A wrong code is an error on the page; a right one typed in is shown.
	login := start(t, "login", noTokenEnv(t, c), "login", "--server", c.url, "--no-browser")
	code = userCode(t, login)
	do(t, ctx, "type a wrong code", chromedp.Navigate(c.url+"/ui/device"), chromedp.WaitVisible(chromedp.CSS("#user_code")),
		chromedp.SendKeys(chromedp.CSS("#user_code"), "BBBB-BBBC"), chromedp.Click(chromedp.CSS("#device-find")),
		chromedp.WaitVisible(chromedp.CSS("#error")))
	waitText(t, ctx, "#error", "No device login is waiting", 5*time.Second)
	do(t, ctx, "type the code", chromedp.Navigate(c.url+"/ui/device"), chromedp.WaitVisible(chromedp.CSS("#user_code")),
		chromedp.SendKeys(chromedp.CSS("#user_code"), strings.ToLower(code)), chromedp.Click(chromedp.CSS("#device-find")),
		chromedp.WaitVisible(chromedp.CSS("#device-deny")))
	waitText(t, ctx, "#device-client", api.DeviceClientCLI, 5*time.Second)
	waitText(t, ctx, "#device-scopes", "the same as yours", 5*time.Second)
	do(t, ctx, "deny", chromedp.Click(chromedp.CSS("#device-deny")), chromedp.WaitVisible(chromedp.CSS(".notice")))
	waitText(t, ctx, ".notice", "Denied", 5*time.Second)
	err := waitExit(t, login, 30*time.Second)
	if ee, ok := err.(interface{ ExitCode() int }); !ok || ee.ExitCode() != 1 {
		t.Errorf("denied login: %v\n%s", err, login.out.String())
	}
}
