// Package budget decides what sessions and outposts may spend: the
// estimated cost of model calls from a price table, whether a session
// reached one of its limits (tokens, cost, tool calls), and an outpost's
// usage of its monthly budget. It holds no state but the price table; the
// server reads usage from the store and acts on what this package decides.
package budget

import (
	"cmp"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// Price is what a model costs, in US dollars per million tokens.
type Price struct {
	InputPerMTok  float64 `json:"input_per_mtok"`
	OutputPerMTok float64 `json:"output_per_mtok"`
}

// DefaultPrices prices the models the project's docs name, at their
// providers' list prices. A table given to the server replaces it.
var DefaultPrices = map[string]Price{
	"gpt-4.1":           {InputPerMTok: 2, OutputPerMTok: 8},
	"gpt-4.1-mini":      {InputPerMTok: 0.4, OutputPerMTok: 1.6},
	"gpt-4o":            {InputPerMTok: 2.5, OutputPerMTok: 10},
	"claude-sonnet-4-5": {InputPerMTok: 3, OutputPerMTok: 15},
	"claude-haiku-4-5":  {InputPerMTok: 1, OutputPerMTok: 5},
	"claude-opus-4-5":   {InputPerMTok: 5, OutputPerMTok: 25},
}

// ParsePrices reads a price table as JSON: {"<model>": {"input_per_mtok":
// 3, "output_per_mtok": 15}, …}. "" gives DefaultPrices.
func ParsePrices(text string) (map[string]Price, error) {
	if strings.TrimSpace(text) == "" {
		return DefaultPrices, nil
	}
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	var table map[string]Price
	if err := dec.Decode(&table); err != nil {
		return nil, fmt.Errorf(`the price table is not JSON of the shape {"<model>": {"input_per_mtok": 3, "output_per_mtok": 15}}: %w`, err)
	}
	for model, p := range table {
		if model == "" {
			return nil, fmt.Errorf("the price table has a price for an empty model name")
		}
		if !finite(p.InputPerMTok) || !finite(p.OutputPerMTok) || p.InputPerMTok < 0 || p.OutputPerMTok < 0 {
			return nil, fmt.Errorf("the price of model %q must not be negative", model)
		}
	}
	return table, nil
}

// Prices estimates the cost of model calls. A model the table lacks costs
// 0, with a warning logged the first time it is priced.
type Prices struct {
	table map[string]Price
	// Model is the model of calls that name none (the server's default).
	model string
	log   *slog.Logger

	mu     sync.Mutex // guards the following
	warned map[string]bool
}

// NewPrices returns the estimator of table; defaultModel prices calls of
// sessions that name no model; log (nil: slog.Default()) gets the warnings.
func NewPrices(table map[string]Price, defaultModel string, log *slog.Logger) *Prices {
	if table == nil {
		table = DefaultPrices
	}
	if log == nil {
		log = slog.Default()
	}
	return &Prices{table: table, model: defaultModel, log: log, warned: map[string]bool{}}
}

// Cost is the estimated cost in US dollars of prompt and completion tokens
// of model ("": the default model).
func (p *Prices) Cost(model string, prompt, completion int64) float64 {
	if p == nil {
		return 0
	}
	if model == "" {
		model = p.model
	}
	price, ok := p.table[model]
	if !ok {
		p.mu.Lock()
		first := !p.warned[model]
		p.warned[model] = true
		p.mu.Unlock()
		if first {
			p.log.Warn("the price table has no price for a model; its calls count as costing nothing (outpost server --prices)", "model", model)
		}
		return 0
	}
	return (float64(prompt)*price.InputPerMTok + float64(completion)*price.OutputPerMTok) / 1e6
}

// Models lists the priced models, sorted.
func (p *Prices) Models() []string {
	out := make([]string, 0, len(p.table))
	for m := range p.table {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// Reached is a limit a session reached.
type Reached struct {
	// Kind is one of api.Budget….
	Kind string
	// OnLimit is what reaching it does: api.OnLimitSuspend or
	// api.OnLimitEnd.
	OnLimit string
	// Reason says it in a sentence: "token limit of 10000 reached: 10234
	// used".
	Reason string
	// Limit and Used are the numbers it compares.
	Limit, Used float64
}

// Session reports whether a session with limits l and usage u reached one
// of its limits. pending says the model's last answer has tool calls still
// to run: those within max_tool_calls may run, so the tool-call limit is
// reached only by asking for more; without pending calls a session that
// made all its calls may not ask the model again.
func Session(l api.Limits, u api.Usage, pending bool) (Reached, bool) {
	onLimit := cmp.Or(l.OnLimit, api.OnLimitSuspend)
	if l.MaxTokens > 0 {
		if used := u.PromptTokens + u.CompletionTokens; used >= l.MaxTokens {
			return Reached{Kind: api.BudgetTokens, OnLimit: onLimit, Limit: float64(l.MaxTokens), Used: float64(used),
				Reason: fmt.Sprintf("token limit of %d reached: %d used (limits.max_tokens)", l.MaxTokens, used)}, true
		}
	}
	if l.MaxCostUSD > 0 && u.CostUSD >= l.MaxCostUSD {
		return Reached{Kind: api.BudgetCost, OnLimit: onLimit, Limit: l.MaxCostUSD, Used: u.CostUSD,
			Reason: fmt.Sprintf("cost limit of %s reached: %s used (limits.max_cost_usd)", USD(l.MaxCostUSD), USD(u.CostUSD))}, true
	}
	if l.MaxToolCalls > 0 && (u.ToolCalls > l.MaxToolCalls || (!pending && u.ToolCalls >= l.MaxToolCalls)) {
		verb := "made"
		if u.ToolCalls > l.MaxToolCalls {
			verb = "asked for"
		}
		return Reached{Kind: api.BudgetToolCalls, OnLimit: onLimit, Limit: float64(l.MaxToolCalls), Used: float64(u.ToolCalls),
			Reason: fmt.Sprintf("tool call limit of %d reached: %d %s (limits.max_tool_calls)", l.MaxToolCalls, u.ToolCalls, verb)}, true
	}
	return Reached{}, false
}

// CheckLimits validates a session's budget limits; the error is a sentence
// without its full stop.
func CheckLimits(l api.Limits) error {
	if l.MaxTokens < 0 || l.MaxToolCalls < 0 || l.MaxCostUSD < 0 || !finite(l.MaxCostUSD) {
		return fmt.Errorf("limits.max_tokens, limits.max_cost_usd and limits.max_tool_calls must not be negative")
	}
	return checkOnLimit("limits.on_limit", l.OnLimit)
}

// CheckOutpostBudget validates an outpost's budget; the error is a
// sentence without its full stop.
func CheckOutpostBudget(b api.OutpostBudget) error {
	if b.MonthlySessionHours < 0 || b.MonthlyCostUSD < 0 || !finite(b.MonthlySessionHours) || !finite(b.MonthlyCostUSD) {
		return fmt.Errorf("budget.monthly_session_hours and budget.monthly_cost_usd must not be negative (0 is no cap)")
	}
	return checkOnLimit("budget.on_limit", b.OnLimit)
}

func checkOnLimit(field, v string) error {
	switch v {
	case "", api.OnLimitSuspend, api.OnLimitEnd:
		return nil
	}
	return fmt.Errorf("%s %q is not one of %q and %q", field, v, api.OnLimitSuspend, api.OnLimitEnd)
}

// MonthStart is the start of the calendar month (UTC) of t.
func MonthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// SessionSpan is what a session spent that an outpost's budget counts.
type SessionSpan struct {
	CreatedAt time.Time
	// StartedAt is nil before the session's first remote; EndedAt before
	// its end.
	StartedAt, EndedAt *time.Time
	CostUSD            float64
}

// Month sums the usage of the month of now from the sessions' spans:
// the hours each ran within the month (to now, for those that have not
// ended) and the cost of those created in it.
func Month(spans []SessionSpan, now time.Time) api.OutpostBudgetUsage {
	start := MonthStart(now)
	u := api.OutpostBudgetUsage{Month: start.Format("2006-01")}
	var ran time.Duration
	for _, s := range spans {
		if !s.CreatedAt.Before(start) {
			u.CostUSD += s.CostUSD
		}
		if s.StartedAt == nil {
			continue
		}
		from, to := *s.StartedAt, now
		if s.EndedAt != nil {
			to = *s.EndedAt
		}
		if from.Before(start) {
			from = start
		}
		if to.After(from) {
			ran += to.Sub(from)
		}
	}
	u.SessionHours = ran.Hours()
	return u
}

// Outpost reports whether an outpost's usage u reached its budget b.
func Outpost(b api.OutpostBudget, u api.OutpostBudgetUsage) (Reached, bool) {
	onLimit := cmp.Or(b.OnLimit, api.OnLimitSuspend)
	if b.MonthlySessionHours > 0 && u.SessionHours >= b.MonthlySessionHours {
		return Reached{Kind: api.BudgetOutpostHours, OnLimit: onLimit, Limit: b.MonthlySessionHours, Used: u.SessionHours,
			Reason: fmt.Sprintf("the outpost's monthly limit of %s session-hours reached: %s used in %s (budget.monthly_session_hours)",
				hours(b.MonthlySessionHours), hours(u.SessionHours), u.Month)}, true
	}
	if b.MonthlyCostUSD > 0 && u.CostUSD >= b.MonthlyCostUSD {
		return Reached{Kind: api.BudgetOutpostCost, OnLimit: onLimit, Limit: b.MonthlyCostUSD, Used: u.CostUSD,
			Reason: fmt.Sprintf("the outpost's monthly cost limit of %s reached: %s used in %s (budget.monthly_cost_usd)",
				USD(b.MonthlyCostUSD), USD(u.CostUSD), u.Month)}, true
	}
	return Reached{}, false
}

// USD formats dollars for people: "$0.0123", "$12.50".
func USD(v float64) string {
	if v != 0 && math.Abs(v) < 1 {
		return fmt.Sprintf("$%.4f", v)
	}
	return fmt.Sprintf("$%.2f", v)
}

func hours(h float64) string { return fmt.Sprintf("%.2f", h) }

// DescribeOutpost shows an outpost's budget and its usage this month.
func DescribeOutpost(b *api.OutpostBudget, u *api.OutpostBudgetUsage) string {
	if b == nil || b.IsZero() {
		return "none"
	}
	var parts []string
	if b.MonthlySessionHours > 0 {
		used := ""
		if u != nil {
			used = fmt.Sprintf("%.2f of ", u.SessionHours)
		}
		parts = append(parts, fmt.Sprintf("%s%g session-hours", used, b.MonthlySessionHours))
	}
	if b.MonthlyCostUSD > 0 {
		used := ""
		if u != nil {
			used = USD(u.CostUSD) + " of "
		}
		parts = append(parts, used+USD(b.MonthlyCostUSD))
	}
	text := strings.Join(parts, ", ")
	if u != nil {
		text += " in " + u.Month
		if u.Reached != "" {
			text += " (reached)"
		}
	}
	return text + "; on limit: " + cmp.Or(b.OnLimit, api.OnLimitSuspend)
}

// DescribeUsage shows a session's usage.
func DescribeUsage(u api.Usage) string {
	text := fmt.Sprintf("%d model calls, %d prompt + %d completion tokens", u.ModelCalls, u.PromptTokens, u.CompletionTokens)
	if u.ToolCalls > 0 {
		text += fmt.Sprintf(", %d tool calls", u.ToolCalls)
	}
	if u.CostUSD > 0 {
		text += ", about " + USD(u.CostUSD)
	}
	return text
}
