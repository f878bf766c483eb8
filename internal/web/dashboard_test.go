package web_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestDashboardWithoutJavaScript reads the dashboard as a client without
// scripts does: the charts are in the HTML as SVG with their tables, an
// outpost's page links to its own, a reader sees it, an outpost-limited
// token sees its outpost's and not another's, and an unknown window falls
// back to the hour.
func TestDashboardWithoutJavaScript(t *testing.T) {
	t.Parallel()
	srv, tokens := startUI(t)
	ctx := context.Background()
	for _, name := range []string{"alpha", "beta"} {
		if _, err := srv.Client.Outposts.Create(ctx, api.CreateOutpostRequest{Name: name, Platform: api.PlatformLinux}); err != nil {
			t.Fatal(err)
		}
	}
	u := newUIUser(t, srv, tokens["reader"])
	body := u.page("/ui/dashboard?window=7d")
	for _, want := range []string{
		`<a href="/ui/dashboard" aria-current="page">Dashboard</a>`,
		`<svg class="chart" id="chart-queued"`, `<svg class="chart" id="chart-running"`, `<svg class="chart" id="chart-duration"`,
		`<table id="table-ended" data-chart="ended">`, `data-window="7d"`, "one bucket per 2 hours",
		"Sessions ended by outcome (per 2 hours)", `<title id="chart-utilization-title">`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the dashboard lacks %q", want)
		}
	}
	if n := strings.Count(body, "<svg "); n != 7 {
		t.Errorf("the dashboard has %d charts, want 7", n)
	}
	if n := strings.Count(body, `<rect data-bucket=`); n != 2*84 {
		t.Errorf("the outcome chart has %d bars, want 2 series × 84 buckets", n)
	}
	if body := u.page("/ui/outposts/alpha"); !strings.Contains(body, `href="/ui/outposts/alpha/dashboard"`) {
		t.Error("the outpost page does not link to its dashboard")
	}
	if body := u.page("/ui/outposts/alpha/dashboard?window=nope"); !strings.Contains(body, "Dashboard of alpha") || !strings.Contains(body, `data-window="1h"`) {
		t.Error("an outpost's dashboard with an unknown window is not alpha's last hour")
	}

	tok, err := srv.Client.Tokens.Create(ctx, api.CreateTokenRequest{Name: "beta-reader", Scopes: []string{api.ScopeSessionsRead}, Outpost: "beta"})
	if err != nil {
		t.Fatal(err)
	}
	b := newUIUser(t, srv, tok.Secret)
	if body := b.page("/ui/fleet"); !strings.Contains(body, "Dashboard of beta") {
		t.Error("an outpost-limited token's fleet page is not its outpost's")
	}
	if code, _, _ := b.do("GET", "/ui/outposts/alpha/dashboard", nil); code != http.StatusNotFound {
		t.Errorf("an outpost-limited token's dashboard of another outpost answered %d, want 404", code)
	}
}
