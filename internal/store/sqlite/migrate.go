package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/internal/store/migration"
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
	known := make(map[int]bool, len(all))
	for _, m := range all {
		known[m.Version] = true
	}
	var applied []int
	for _, m := range all {
		did, err := applyOne(ctx, db, m, known)
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
// transaction, that db records no version this build does not know.
func applyOne(ctx context.Context, db *sql.DB, m migration.Migration, known map[int]bool) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit

	rows, err := tx.QueryContext(ctx, `SELECT version, name FROM schema_migrations ORDER BY version`)
	if err != nil {
		return false, fmt.Errorf("read schema_migrations: %w", err)
	}
	recorded := false
	for rows.Next() {
		var v int
		var name string
		if err := rows.Scan(&v, &name); err != nil {
			rows.Close()
			return false, err
		}
		if !known[v] {
			rows.Close()
			return false, fmt.Errorf("database has migration %d (%s) that this build does not know: it was written by a newer version of outpost", v, name)
		}
		recorded = recorded || v == m.Version
	}
	if err := rows.Close(); err != nil {
		return false, err
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	if recorded {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return false, fmt.Errorf("migration %s: %w", m.Name, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
		m.Version, m.Name, time.Now().UnixMilli()); err != nil {
		return false, fmt.Errorf("record migration %s: %w", m.Name, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("migration %s: commit: %w", m.Name, err)
	}
	return true, nil
}
