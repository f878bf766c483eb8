package server

import (
	"time"

	"github.com/outpost-sh/outpost/internal/suspend"
)

// suspendSweep returns the background side of suspend (suspend.Sweep):
// every five sweep intervals (at most a minute) it suspends llm sessions
// idle past limits.suspend_after_idle_s and deletes the snapshots of
// sessions that ended, ending, as any end, those suspended longer than the
// snapshot TTL.
func (s *Server) suspendSweep() *suspend.Sweep {
	return &suspend.Sweep{
		Suspender:  s.suspender(),
		Every:      min(5*s.opts.SweepInterval, time.Minute),
		EndSession: s.endSession,
	}
}
