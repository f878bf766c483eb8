package main

import (
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// TestSuspendProgressLine: what `sessions suspend` says while it waits, as
// docs/cli.md shows it.
func TestSuspendProgressLine(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	started := now.Add(-12*time.Second - 400*time.Millisecond).UnixMilli()
	exec := api.RunningCall{Seq: 3, Tool: api.ToolExec, Target: "make test", StartedMS: started}
	list := api.RunningCall{Seq: 4, Tool: api.ToolListDir, StartedMS: now.Add(time.Second).UnixMilli()}
	for _, tc := range []struct {
		p    api.SuspendProgress
		want string
	}{
		{api.SuspendProgress{State: api.SuspendWaiting, Calls: []api.RunningCall{exec}},
			"waiting for the running call to finish: exec `make test` (running 12 s)"},
		{api.SuspendProgress{State: api.SuspendWaiting, Calls: []api.RunningCall{exec, list}},
			"waiting for the running calls to finish: exec `make test` (running 12 s), list_dir (running 0 s)"},
		{api.SuspendProgress{State: api.SuspendWaiting, Interrupt: true, Calls: []api.RunningCall{exec}},
			"stopping the running call: exec `make test` (running 12 s)"},
		{api.SuspendProgress{State: api.SuspendWaiting, Interrupt: true, Calls: []api.RunningCall{exec, list}},
			"stopping the running calls: exec `make test` (running 12 s), list_dir (running 0 s)"},
		{api.SuspendProgress{State: api.SuspendWaiting}, "taking the workspace snapshot…"},
		{api.SuspendProgress{State: api.SuspendSnapshotting}, "taking the workspace snapshot…"},
		{api.SuspendProgress{State: api.SuspendDone}, ""},
	} {
		if got := suspendProgressLine(&tc.p, now); got != tc.want {
			t.Errorf("%+v:\n got %q\nwant %q", tc.p, got, tc.want)
		}
	}
	a := api.SuspendProgress{State: api.SuspendWaiting, Calls: []api.RunningCall{exec}}
	b := api.SuspendProgress{State: api.SuspendWaiting, Calls: []api.RunningCall{list}}
	c := api.SuspendProgress{State: api.SuspendSnapshotting}
	if suspendProgressKey(&a) == suspendProgressKey(&b) || suspendProgressKey(&a) == suspendProgressKey(&c) {
		t.Errorf("progress keys do not tell changes apart: %q %q %q", suspendProgressKey(&a), suspendProgressKey(&b), suspendProgressKey(&c))
	}
	// A wait with no call left says the snapshot once, not again when the
	// snapshot begins.
	if idle := (api.SuspendProgress{State: api.SuspendWaiting}); suspendProgressKey(&idle) != suspendProgressKey(&c) {
		t.Errorf("a wait with no calls (%q) and the snapshot (%q) are said twice", suspendProgressKey(&idle), suspendProgressKey(&c))
	}
}
