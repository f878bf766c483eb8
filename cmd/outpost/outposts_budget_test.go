package main

import (
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestOutpostsBudgetFlags: create sets a budget from the flags, update
// changes only the values given, get shows it with the month's usage, and
// a bad --on-limit is refused by the server with nothing changed.
func TestOutpostsBudgetFlags(t *testing.T) {
	t.Parallel()
	ts := startTestServer(t)
	admin := []string{"--server", ts.url, "--token", ts.admin}
	tf := newTestFactory(t, nil)
	if code := tf.run(t, append(admin, "outposts", "create", "capped", "--monthly-hours", "10", "--monthly-cost", "5")...); code != 0 {
		t.Fatalf("create: exit %d: %s", code, tf.errOut)
	}
	if code := tf.run(t, append(admin, "outposts", "update", "capped", "--monthly-cost", "7.5", "--on-limit", "end")...); code != 0 {
		t.Fatalf("update: exit %d: %s", code, tf.errOut)
	}
	o, err := ts.c.Outposts.Get(t.Context(), "capped")
	if err != nil {
		t.Fatal(err)
	}
	if want := (api.OutpostBudget{MonthlySessionHours: 10, MonthlyCostUSD: 7.5, OnLimit: api.OnLimitEnd}); o.Spec.Budget == nil || *o.Spec.Budget != want {
		t.Errorf("budget %+v, want %+v", o.Spec.Budget, want)
	}
	tf.out.Reset()
	if code := tf.run(t, append(admin, "outposts", "get", "capped")...); code != 0 {
		t.Fatalf("get: exit %d", code)
	}
	if !strings.Contains(tf.out.String(), "0.00 of 10 session-hours, $0.00 of $7.50 in ") || !strings.Contains(tf.out.String(), "on limit: end") {
		t.Errorf("get shows:\n%s", tf.out)
	}
	if code := tf.run(t, append(admin, "outposts", "update", "capped", "--on-limit", "later")...); code != exitError {
		t.Errorf("a bad --on-limit: exit %d, want %d", code, exitError)
	}
	if o, _ := ts.c.Outposts.Get(t.Context(), "capped"); o.Spec.Budget == nil || o.Spec.Budget.OnLimit != api.OnLimitEnd {
		t.Errorf("budget after a refused update %+v", o.Spec.Budget)
	}
}
