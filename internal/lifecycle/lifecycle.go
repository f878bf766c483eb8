// Package lifecycle is the session state machine: how a session and its
// queue entry change hands between claimers, are kept alive, suspended and
// resumed, lapse, and come to an end.
//
// Every transition is a pure function of the rows a store transaction
// read (store.Session, store.QueueEntry, the time) that returns the rows
// to write (a store.Mutation) or a refusal. The functions read no store
// and send nothing: the caller runs them inside the store's transaction
// for the session (store.UpdateSession, ClaimSession, ClaimNext), so a
// decision and its write are one atomic step, and publishes what was
// committed afterwards.
//
// A Machine runs these functions against a store, one transaction of the
// session per transition, and then calls the hooks its owner gave it for
// what must follow a committed change (queue watchers, fencing, end
// frames, metrics). Its methods are the way a claim changes hands; it also
// runs the sweeps that requeue lapsed claims, end sessions past their
// limits and clear the entries of ended sessions.
//
// Refusals are *Error values whose kind (ErrGone, ErrConflict,
// ErrAtCapacity, ErrEnded) errors.Is finds; the HTTP edge chooses status
// codes from the kind, once.
package lifecycle

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// The kinds of refusal. A transition's error wraps exactly one of them.
var (
	// ErrGone: the session has no live queue entry (never had one, or it
	// was deleted).
	ErrGone = errors.New("the session's queue entry is gone")
	// ErrConflict: the entry's state does not allow the transition (held
	// by another acceptor, not claimed by the caller, not suspended…).
	ErrConflict = errors.New("the session's state does not allow the transition")
	// ErrAtCapacity: a claim that would take the outpost beyond its
	// max_running.
	ErrAtCapacity = errors.New("the session's outpost is at capacity")
	// ErrEnded: the transition ended the session instead (its last
	// attempt failed); what it wrote is to be committed.
	ErrEnded = errors.New("the session ended")
)

// Error is a refused transition: its kind and the whole sentence a client
// is shown. Format and Args are kept apart so the edge can bound how much
// of each value it repeats back.
type Error struct {
	Kind   error // one of ErrGone, ErrConflict, ErrAtCapacity, ErrEnded
	Format string
	Args   []any
}

func (e *Error) Error() string { return fmt.Sprintf(e.Format, e.Args...) }

// Unwrap returns the kind, for errors.Is.
func (e *Error) Unwrap() error { return e.Kind }

func refuse(kind error, format string, args ...any) error {
	return &Error{Kind: kind, Format: format, Args: args}
}

// gone is the refusal of a transition on a session without a live entry.
func gone(sessionID string) error {
	return refuse(ErrGone, "Session %s is not in any queue.", sessionID)
}

// live reports whether e is a queue entry that exists and is not deleted.
func live(e store.QueueEntry) bool { return e.OutpostID != "" && !e.Deleted }

// StatusEvent records a session's current status on the transcript.
func StatusEvent(sess store.Session, now time.Time) api.Event {
	return api.Event{Type: api.EventStatus, Time: now.UnixMilli(), Status: sess.Status, StatusDetail: sess.StatusDetail, Reason: sess.Reason}
}

// QueueSessionStatus maps a session status to the coarse status queue
// entries show.
func QueueSessionStatus(status string) string {
	switch status {
	case api.StatusRunning:
		return api.QueueSessionRunning
	case api.StatusSuspended:
		return api.QueueSessionSuspended
	case api.StatusExit, api.StatusError:
		return api.QueueSessionTerminated
	default:
		return api.QueueSessionPending
	}
}

// MaxAttempts is how many attempts the entry's session gets.
func MaxAttempts(e store.QueueEntry) int {
	if e.MaxAttempts > 0 {
		return e.MaxAttempts
	}
	return api.DefaultMaxAttempts
}

// Sentence trims s and ends it with a full stop, so reasons join cleanly.
func Sentence(s string) string {
	s = strings.TrimSpace(s)
	if s == "" || strings.HasSuffix(s, ".") || strings.HasSuffix(s, "!") || strings.HasSuffix(s, "?") {
		return s
	}
	return s + "."
}
