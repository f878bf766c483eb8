package main

import (
	"github.com/spf13/pflag"

	"github.com/outpost-sh/outpost/api"
)

// BudgetFlags are an outpost's budget flags: --monthly-hours,
// --monthly-cost and --on-limit.
type BudgetFlags struct {
	Hours, Cost float64
	OnLimit     string
	// set records which were given (by apply, for merge).
	set map[string]bool
}

func (b *BudgetFlags) add(fl *pflag.FlagSet) {
	fl.Float64Var(&b.Hours, "monthly-hours", 0, "the session-hours the outpost's sessions may run per calendar month (UTC) (0: no cap)")
	fl.Float64Var(&b.Cost, "monthly-cost", 0, "the estimated model cost in US dollars the outpost's sessions may spend per calendar month (UTC) (0: no cap)")
	fl.StringVar(&b.OnLimit, "on-limit", "", "what reaching the monthly budget does to running sessions: suspend (the default) or end")
}

// given reports whether any budget flag was given, and remembers which.
func (b *BudgetFlags) given(fl *pflag.FlagSet) bool {
	b.set = map[string]bool{}
	for _, n := range []string{"monthly-hours", "monthly-cost", "on-limit"} {
		b.set[n] = fl.Changed(n)
	}
	return b.set["monthly-hours"] || b.set["monthly-cost"] || b.set["on-limit"]
}

// merge is cur with the given flags' values (given must have run).
func (b *BudgetFlags) merge(cur api.OutpostBudget) api.OutpostBudget {
	if b.set["monthly-hours"] {
		cur.MonthlySessionHours = b.Hours
	}
	if b.set["monthly-cost"] {
		cur.MonthlyCostUSD = b.Cost
	}
	if b.set["on-limit"] {
		cur.OnLimit = b.OnLimit
	}
	return cur
}
