package budget

import (
	"bytes"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

// TestCost checks estimates against numbers computed by hand, the default
// model for sessions naming none, and the one warning for an unpriced model.
func TestCost(t *testing.T) {
	var logs bytes.Buffer
	p := NewPrices(map[string]Price{"big": {InputPerMTok: 3, OutputPerMTok: 15}, "small": {InputPerMTok: 0.4, OutputPerMTok: 1.6}}, "small",
		slog.New(slog.NewTextHandler(&logs, nil)))
	// 12345 × 3 / 1e6 + 678 × 15 / 1e6 = 0.037035 + 0.01017 = 0.047205
	if c := p.Cost("big", 12345, 678); !near(c, 0.047205) {
		t.Errorf("big: %v, want 0.047205", c)
	}
	// 1e6 × 0.4 / 1e6 + 500000 × 1.6 / 1e6 = 0.4 + 0.8 = 1.2
	if c := p.Cost("", 1000000, 500000); !near(c, 1.2) {
		t.Errorf("default model: %v, want 1.2", c)
	}
	if c := p.Cost("mystery", 1000, 1000); c != 0 {
		t.Errorf("unpriced model: %v", c)
	}
	p.Cost("mystery", 1, 1)
	if n := strings.Count(logs.String(), "mystery"); n != 1 {
		t.Errorf("%d warnings about the unpriced model, want 1: %s", n, logs.String())
	}
	if c := NewPrices(nil, "", nil).Cost("claude-sonnet-4-5", 1000000, 1000000); !near(c, 18) {
		t.Errorf("default table: %v, want 18", c)
	}
}

func TestParsePrices(t *testing.T) {
	table, err := ParsePrices(`{"m": {"input_per_mtok": 1.5, "output_per_mtok": 2}}`)
	if err != nil || table["m"] != (Price{1.5, 2}) || len(table) != 1 {
		t.Fatalf("%v %v", table, err)
	}
	for _, bad := range []string{`{"m": {"input_per_mtok": -1}}`, `{"m": {"input": 1}}`, `[1]`, `{"": {}}`} {
		if _, err := ParsePrices(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	if table, _ := ParsePrices(""); table["gpt-4.1"] != DefaultPrices["gpt-4.1"] {
		t.Error("empty text is not the default table")
	}
}

func TestSessionLimits(t *testing.T) {
	for _, c := range []struct {
		l       api.Limits
		u       api.Usage
		pending bool
		kind    string
		reason  string
	}{
		{api.Limits{MaxTokens: 10000}, api.Usage{PromptTokens: 9000, CompletionTokens: 1234}, false, api.BudgetTokens,
			"token limit of 10000 reached: 10234 used (limits.max_tokens)"},
		{api.Limits{MaxTokens: 10000}, api.Usage{PromptTokens: 9000}, false, "", ""},
		{api.Limits{MaxCostUSD: 0.5}, api.Usage{CostUSD: 0.5}, true, api.BudgetCost, "cost limit of $0.5000 reached: $0.5000 used (limits.max_cost_usd)"},
		{api.Limits{MaxToolCalls: 3}, api.Usage{ToolCalls: 3}, true, "", ""},
		{api.Limits{MaxToolCalls: 3}, api.Usage{ToolCalls: 3}, false, api.BudgetToolCalls, "tool call limit of 3 reached: 3 made (limits.max_tool_calls)"},
		{api.Limits{MaxToolCalls: 3}, api.Usage{ToolCalls: 5}, true, api.BudgetToolCalls, "tool call limit of 3 reached: 5 asked for (limits.max_tool_calls)"},
	} {
		r, ok := Session(c.l, c.u, c.pending)
		if ok != (c.kind != "") || r.Kind != c.kind || r.Reason != c.reason {
			t.Errorf("%+v %+v pending %v: %+v %v", c.l, c.u, c.pending, r, ok)
		}
	}
	if r, _ := Session(api.Limits{MaxTokens: 1, OnLimit: api.OnLimitEnd}, api.Usage{PromptTokens: 1}, false); r.OnLimit != api.OnLimitEnd {
		t.Errorf("on_limit %q", r.OnLimit)
	}
	if r, _ := Session(api.Limits{MaxTokens: 1}, api.Usage{PromptTokens: 1}, false); r.OnLimit != api.OnLimitSuspend {
		t.Errorf("default on_limit %q", r.OnLimit)
	}
}

// TestMonth sums session-hours within the month and the cost of the
// month's sessions.
func TestMonth(t *testing.T) {
	at := func(s string) *time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return &v
	}
	now := *at("2026-12-10T12:00:00Z")
	spans := []SessionSpan{
		// Started last month: counts from Dec 1 00:00 to 02:00; its cost is last month's.
		{CreatedAt: *at("2026-11-30T20:00:00Z"), StartedAt: at("2026-11-30T21:00:00Z"), EndedAt: at("2026-12-01T02:00:00Z"), CostUSD: 5},
		// 90 minutes.
		{CreatedAt: *at("2026-12-03T10:00:00Z"), StartedAt: at("2026-12-03T10:00:00Z"), EndedAt: at("2026-12-03T11:30:00Z"), CostUSD: 1.25},
		// Running: 30 minutes to now.
		{CreatedAt: *at("2026-12-10T11:00:00Z"), StartedAt: at("2026-12-10T11:30:00Z"), CostUSD: 0.5},
		// Never started.
		{CreatedAt: *at("2026-12-10T11:59:00Z")},
	}
	u := Month(spans, now)
	if u.Month != "2026-12" || !near(u.SessionHours, 4) || !near(u.CostUSD, 1.75) {
		t.Errorf("%+v, want 2026-12, 4 hours, $1.75", u)
	}
	r, ok := Outpost(api.OutpostBudget{MonthlySessionHours: 4}, u)
	if !ok || r.Kind != api.BudgetOutpostHours || !strings.Contains(r.Reason, "4.00 session-hours reached: 4.00 used in 2026-12") {
		t.Errorf("%+v %v", r, ok)
	}
	if _, ok := Outpost(api.OutpostBudget{MonthlySessionHours: 5, MonthlyCostUSD: 2}, u); ok {
		t.Error("under both caps, reached")
	}
}

func TestCheck(t *testing.T) {
	if CheckLimits(api.Limits{MaxCostUSD: math.NaN()}) == nil || CheckLimits(api.Limits{OnLimit: "x"}) == nil || CheckLimits(api.Limits{MaxTokens: 5, OnLimit: "end"}) != nil {
		t.Error("CheckLimits")
	}
	if CheckOutpostBudget(api.OutpostBudget{MonthlyCostUSD: math.Inf(1)}) == nil || CheckOutpostBudget(api.OutpostBudget{OnLimit: "suspend", MonthlySessionHours: 1}) != nil {
		t.Error("CheckOutpostBudget")
	}
}
