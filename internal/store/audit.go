package store

import (
	"context"
	"time"

	"github.com/outpost-sh/outpost/internal/audit"
)

// AuditFilter narrows ListAudit.
type AuditFilter struct {
	// Before, when not 0, keeps the entries older than the one of this
	// seq (the cursor of the page before).
	Before int64
	// TimeAfter and TimeBefore, when not zero, keep the entries created
	// at or after TimeAfter and before TimeBefore.
	TimeAfter, TimeBefore time.Time
	// Action, when set, keeps the entries of this action.
	Action string
	// Actor, when set, keeps the entries whose actor's id or name it is.
	Actor string
	// Limit caps the page; 0 means no cap.
	Limit int
}

// AuditLog is the audit log. Entries are appended by the store's own
// write transactions (see package audit: the entry a context carries goes
// in with the change), never by a method of this interface but Record.
type AuditLog interface {
	// RecordAudit appends the entry ctx carries (audit.With) in a
	// transaction of its own, for an action that changes nothing else
	// (a sign-in). An error when ctx carries none.
	RecordAudit(ctx context.Context) error
	// ListAudit returns a page of entries, newest first, and how many
	// match f without its Before cursor.
	ListAudit(ctx context.Context, f AuditFilter) ([]audit.Entry, int, error)
	// VerifyAudit checks the hash chain from its anchor to its head.
	VerifyAudit(ctx context.Context) (audit.Verification, error)
	// PruneAudit removes up to limit of the oldest entries created
	// before before (0: no cap), records the last one removed as the
	// chain's anchor, and returns how many it removed.
	PruneAudit(ctx context.Context, before time.Time, limit int) (int, error)
}
