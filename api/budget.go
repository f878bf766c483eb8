package api

// Budget limits: what a session or an outpost may spend, and what happens
// when it reaches that.

// What reaching a limit does (Limits.OnLimit, OutpostBudget.OnLimit).
const (
	// OnLimitSuspend suspends the session (its workspace snapshot kept)
	// when it can be suspended — it runs and its remote takes snapshots —
	// and ends it otherwise. The default ("").
	OnLimitSuspend = "suspend"
	// OnLimitEnd ends the session (exit, usage_limit_exceeded).
	OnLimitEnd = "end"
)

// Budget kinds: which limit a session reached (the budget.reached event's
// budget.kind, the outpost_budget_reached_total metric's kind label).
const (
	BudgetTokens       = "tokens"
	BudgetCost         = "cost"
	BudgetToolCalls    = "tool_calls"
	BudgetOutpostHours = "outpost_hours"
	BudgetOutpostCost  = "outpost_cost"
)

// CodeBudgetExceeded answers the creation of a session (409) on an outpost
// that reached its monthly budget (OutpostBudget).
const CodeBudgetExceeded = "budget_exceeded"

// OutpostBudget caps what an outpost's sessions spend per calendar month
// (UTC). A zero cap is no cap.
type OutpostBudget struct {
	// MonthlySessionHours caps the session-hours of the month: the hours
	// between each session's start (its first remote) and its end (or
	// now), counted within the month.
	MonthlySessionHours float64 `json:"monthly_session_hours,omitempty"`
	// MonthlyCostUSD caps the estimated model cost (usage.cost_usd) of the
	// sessions created in the month.
	MonthlyCostUSD float64 `json:"monthly_cost_usd,omitempty"`
	// OnLimit is what reaching a cap does to the outpost's running
	// sessions: OnLimitSuspend (the default, "") or OnLimitEnd. New
	// sessions are refused either way until the next month or a higher
	// cap.
	OnLimit string `json:"on_limit,omitempty"`
}

// IsZero reports whether b caps nothing.
func (b OutpostBudget) IsZero() bool { return b.MonthlySessionHours == 0 && b.MonthlyCostUSD == 0 }

// OutpostBudgetUsage is what an outpost's sessions spent in the current
// month (status.budget_usage of an outpost with a budget).
type OutpostBudgetUsage struct {
	// Month is the calendar month counted, "2006-01" (UTC).
	Month string `json:"month"`
	// SessionHours and CostUSD are the month's usage, as OutpostBudget
	// counts it.
	SessionHours float64 `json:"session_hours"`
	CostUSD      float64 `json:"cost_usd"`
	// Reached names the cap reached (BudgetOutpostHours or
	// BudgetOutpostCost); omitted while under both.
	Reached string `json:"reached,omitempty"`
}
