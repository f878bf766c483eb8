package worker

import (
	"time"

	"github.com/outpost-sh/outpost/internal/api"
)

// RenewWait is the wait before the next renewal of a claim that lapses at
// deadline (zero: unknown): about a third of the time left. Orchestrators
// use it to renew their own claims on the worker's cadence.
func RenewWait(deadline, now time.Time) time.Duration { return renewWait(deadline, now) }

// ClaimDeadline is the claim deadline of a claim answer, zero when unknown.
func ClaimDeadline(e *api.QueueEntry) time.Time { return claimDeadline(e) }

// Sleep waits d or until ctx ends.
var Sleep = sleep
