package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/internal/store/migration"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrations returns the embedded migrations in version order.
func migrations() ([]migration.Migration, error) { return migration.Load(migrationFS, "migrations") }

// migrate applies, in order and each in its own transaction, the embedded
// migrations db has not recorded in schema_migrations. It returns the
// versions it applied, and fails when db records a version it does not know.
func migrate(ctx context.Context, db *sql.DB) ([]int, error) {
	all, err := migrations()
	if err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at INTEGER NOT NULL
	) STRICT`); err != nil {
		return nil, fmt.Errorf("create schema_migrations: %w", err)
	}
	var applied []int
	for _, m := range all {
		did, err := applyOne(ctx, db, m, all)
		if err != nil {
			return applied, err
		}
		if did {
			applied = append(applied, m.Version)
		}
	}
	return applied, nil
}

// applyOne applies m unless it is recorded, checking first, inside the
// transaction, that db records no version all lacks.
func applyOne(ctx context.Context, db *sql.DB, m migration.Migration, all []migration.Migration) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit

	rows, err := tx.QueryContext(ctx, migration.ReadSQL)
	recs, err := collect(rows, err, func(sc sqlstore.Scanner) (migration.Record, error) {
		var r migration.Record
		err := sc.Scan(&r.Version, &r.Name)
		return r, err
	})
	if err != nil {
		return false, fmt.Errorf("read schema_migrations: %w", err)
	}
	if pending, err := migration.Pending(all, recs, m); !pending || err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return false, fmt.Errorf("migration %s: %w", m.Name, err)
	}
	if _, err := tx.ExecContext(ctx, migration.RecordSQL, m.Version, m.Name, time.Now().UnixMilli()); err != nil {
		return false, fmt.Errorf("record migration %s: %w", m.Name, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("migration %s: commit: %w", m.Name, err)
	}
	return true, nil
}
