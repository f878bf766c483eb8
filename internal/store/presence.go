package store

import (
	"errors"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// WorkerOfflineKeep is how long an acceptor's entry is kept after it went
// offline (its goodbye, or its last heartbeat's expiry), so that people see
// which machines went away and when they were last seen.
const WorkerOfflineKeep = 24 * time.Hour

// Worker is the presence of one acceptor (a worker or an orchestrator) on
// an outpost: what its latest heartbeat said, and when.
type Worker struct {
	OutpostID  string
	AcceptorID string
	// Info is the heartbeat's body.
	Info api.WorkerInfo
	// ConnectedAt is when the entry appeared: the first heartbeat since it
	// was absent or expired. PutWorker sets it.
	ConnectedAt time.Time
	// LastSeenAt is the latest heartbeat; ExpiresAt when the entry is
	// forgotten without another.
	LastSeenAt time.Time
	ExpiresAt  time.Time
}

// WorkerCount is how many live acceptors of one kind an outpost has.
type WorkerCount struct {
	OutpostID string
	Kind      string
	N         int
}

// ErrTooManyWorkers: the outpost has as many live acceptors as it may.
var ErrTooManyWorkers = errors.New("too many workers")

// AcceptorInUseError refuses a heartbeat of an acceptor id whose live
// entry another process (instance) holds. It matches ErrConflict.
type AcceptorInUseError struct {
	// Holder is the live entry.
	Holder Worker
}

func (e *AcceptorInUseError) Error() string {
	return fmt.Sprintf("acceptor %s is held by instance %s", e.Holder.AcceptorID, e.Holder.Info.Instance)
}

// Unwrap makes the error match ErrConflict.
func (e *AcceptorInUseError) Unwrap() error { return ErrConflict }
