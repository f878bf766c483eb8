package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// testOutpostBudget checks an outpost's budget (set, read, removed) and
// the session spans its usage is counted from: the sessions created since
// the month's start or not ended by then, with their cost.
func testOutpostBudget(t *testing.T, s store.Store) {
	o := newOutpost("op-budget", "budget")
	must(t, "create outpost", s.CreateOutpost(ctx(t), o))
	b, err := s.OutpostBudget(ctx(t), o.ID)
	must(t, "get budget", err)
	equal(t, "no budget", b, (*api.OutpostBudget)(nil))
	want := &api.OutpostBudget{MonthlySessionHours: 12.5, MonthlyCostUSD: 3, OnLimit: api.OnLimitEnd}
	must(t, "set budget", s.SetOutpostBudget(ctx(t), o.ID, want))
	b, err = s.OutpostBudget(ctx(t), o.ID)
	must(t, "get budget", err)
	equal(t, "budget", b, want)
	must(t, "remove budget", s.SetOutpostBudget(ctx(t), o.ID, &api.OutpostBudget{}))
	b, err = s.OutpostBudget(ctx(t), o.ID)
	must(t, "get budget", err)
	equal(t, "removed budget", b, (*api.OutpostBudget)(nil))
	if err := s.SetOutpostBudget(ctx(t), "op-missing", want); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("budget of a missing outpost: got %v, want ErrNotFound", err)
	}
	if _, err := s.OutpostBudget(ctx(t), "op-missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("budget of a missing outpost: got %v, want ErrNotFound", err)
	}

	// Old and ended before since: left out. Old but running: in. New: in.
	since := at(10 * time.Hour)
	for _, c := range []struct {
		id    string
		d     time.Duration
		ended bool
		cost  float64
	}{{"s-b-old", 0, true, 1}, {"s-b-long", time.Hour, false, 2}, {"s-b-new", 11 * time.Hour, false, 0.25}} {
		sess := newSession(c.id, o.ID, c.id, c.d)
		must(t, "create "+c.id, s.CreateSession(ctx(t), sess, newEntry(sess), nil))
		_, err := s.UpdateSession(ctx(t), c.id, func(cur store.Session, e store.QueueEntry) (store.Mutation, error) {
			started := at(c.d)
			cur.StartedAt, cur.Status = &started, api.StatusRunning
			cur.Usage.CostUSD = c.cost
			if c.ended {
				ended := at(c.d + time.Hour)
				cur.EndedAt, cur.Status = &ended, api.StatusExit
			}
			return store.Mutation{Session: &cur}, nil
		})
		must(t, "update "+c.id, err)
	}
	spans, err := s.OutpostSessionSpans(ctx(t), o.ID, since)
	must(t, "session spans", err)
	var costs []float64
	for _, sp := range spans {
		costs = append(costs, sp.CostUSD)
		if sp.StartedAt == nil || sp.EndedAt != nil {
			t.Errorf("span %+v: want started and not ended", sp)
		}
	}
	if len(costs) != 2 || costs[0]+costs[1] != 2.25 {
		t.Errorf("spans' costs %v, want the running old session's 2 and the new one's 0.25", costs)
	}
}
