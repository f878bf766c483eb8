//go:build linux

package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// TestWorkersAndTheirSessions runs a real worker: the session it ran names
// it (API filter, CLI --worker, the session list's column, which updates
// itself in Chromium without a reload), workers list and get show it online
// with its isolation and the sessions it ran, the web UI's worker page
// lists them, an outpost-limited token sees only its own outpost's
// workers, and once the worker stops it is listed offline with when it was
// last seen.
func TestWorkersAndTheirSessions(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "machines")
	other := setupOutpost(t, c, "elsewhere")
	env := c.env(c.admin)

	ctx := browser(t)
	signIn(t, ctx, c, c.admin)
	do(t, ctx, "sessions page", chromedp.Navigate(c.url+"/ui/sessions?outpost=machines"), chromedp.WaitVisible(chromedp.CSS("#sessions-list")))

	wp, _ := startWorker(t, c, "machines", token, "--acceptor-id", "box-1")
	waitWorkers(t, c, "machines", 1)
	if code := c.api("PUT", "/v1/outposts/elsewhere/workers/far-1", other, api.WorkerInfo{Kind: api.WorkerKindWorker, Hostname: "far", MaxSessions: 1}, nil); code != 200 {
		t.Fatalf("heartbeat on the other outpost: %d", code)
	}
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "machines", Title: "ran on box-1",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{execStep("true")}}})
	waitText(t, ctx, "#sessions-list", "ran on box-1", 30*time.Second) // no reload
	if s := c.waitFinal(id, 2*time.Minute); s.Status.Worker != "box-1" || s.Status.Status != api.StatusExit {
		t.Fatalf("session ended as %s, worker %q; want exit on box-1", s.Status.Status, s.Status.Worker)
	}
	waitText(t, ctx, "#sessions tr[data-session='"+id+"']", "box-1", 30*time.Second)

	var l api.SessionList
	if code := c.api("GET", "/v1/sessions?worker=box-1", c.admin, nil, &l); code != 200 || len(l.Items) != 1 || l.Items[0].Metadata.SessionID != id {
		t.Fatalf("sessions of box-1: %d %+v", code, l.Items)
	}
	if code := c.api("GET", "/v1/sessions?worker=box-2", c.admin, nil, &l); code != 200 || len(l.Items) != 0 {
		t.Fatalf("sessions of box-2: %d, %d items", code, len(l.Items))
	}
	if code := c.api("GET", "/v1/sessions?worker=no%20such", c.admin, nil, nil); code != 400 {
		t.Errorf("a bad worker filter answered %d, want 400", code)
	}
	if out := run(t, env, "sessions", "list", "--worker", "box-1"); !strings.Contains(out, id) || !strings.Contains(out, "box-1") {
		t.Errorf("sessions list --worker box-1:\n%s", out)
	}

	out := run(t, env, "workers", "list")
	for _, want := range []string{"machines", "box-1", "online", "none", "elsewhere", "far-1"} {
		if !strings.Contains(out, want) {
			t.Errorf("workers list lacks %q:\n%s", want, out)
		}
	}
	var mine api.WorkerList
	if code := c.api("GET", "/v1/workers", token, nil, &mine); code != 200 || len(mine.Items) != 1 || mine.Items[0].AcceptorID != "box-1" {
		t.Errorf("an outpost-limited token lists %d: %+v; want its own worker only", code, mine.Items)
	}
	if code := c.api("GET", "/v1/workers?outpost=elsewhere", token, nil, nil); code == 200 {
		t.Error("an outpost-limited token listed another outpost's workers")
	}
	out = run(t, env, "workers", "get", "box-1", "--outpost", "machines")
	for _, want := range []string{"State:      online", "Isolation:  none", id, "ran on box-1"} {
		if !strings.Contains(out, want) {
			t.Errorf("workers get lacks %q:\n%s", want, out)
		}
	}

	do(t, ctx, "worker page", chromedp.Navigate(c.url+"/ui/outposts/machines/workers/box-1"), chromedp.WaitVisible(chromedp.CSS("#worker-sessions")))
	waitText(t, ctx, "#worker-sessions", "ran on box-1", 10*time.Second)
	waitText(t, ctx, "#worker-isolation", "none", 10*time.Second)
	waitText(t, ctx, "#worker-state", "Online", 10*time.Second)

	// Stopped, it says goodbye: gone from the live list, kept as offline.
	if err := wp.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Logf("worker exit: %v", err)
	}
	waitfor.Within(t, 30*time.Second, "box-1 offline", func() bool {
		var w api.Worker
		return c.api("GET", "/v1/outposts/machines/workers/box-1", c.admin, nil, &w) == 200 && !w.Online
	})
	if out := run(t, env, "workers", "list", "--outpost", "machines"); strings.Contains(out, "box-1") {
		t.Errorf("workers list shows a stopped worker:\n%s", out)
	}
	if out := run(t, env, "workers", "list", "--outpost", "machines", "--offline"); !strings.Contains(out, "offline, seen") || !strings.Contains(out, "box-1") {
		t.Errorf("workers list --offline:\n%s", out)
	}
	do(t, ctx, "outposts page", chromedp.Navigate(c.url+"/ui/outposts"), chromedp.WaitVisible(chromedp.CSS("#workers")))
	waitText(t, ctx, "#workers tr[data-acceptor='box-1'] .state", "offline", 10*time.Second)
	do(t, ctx, "worker page offline", chromedp.Navigate(c.url+"/ui/outposts/machines/workers/box-1"), chromedp.WaitVisible(chromedp.CSS("#worker-state")))
	waitText(t, ctx, "#worker-state", "Offline", 10*time.Second)
}
