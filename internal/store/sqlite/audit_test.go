package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/storetest"
)

// auditDB is one database file for storetest.RunAudit, changed through
// database/sql past the store.
type auditDB struct{ sealedDB }

func (d auditDB) Open(t *testing.T) (store.Store, error) { return d.sealedDB.Open(t, nil) }

func (d auditDB) Exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if _, err := d.raw(t).ExecContext(t.Context(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func TestAuditTamper(t *testing.T) {
	storetest.RunAudit(t, func(t *testing.T) storetest.AuditDB {
		return auditDB{sealedDB{path: filepath.Join(t.TempDir(), "outpost.db")}}
	})
}
