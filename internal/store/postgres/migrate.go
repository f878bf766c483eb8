package postgres

import (
	"context"
	"embed"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outpost-sh/outpost/internal/store/migration"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrationLock is the key of the transaction-scoped advisory lock that
// serialises migrations of servers starting together on one database.
const migrationLock = 0x6f7574706f7374 // "outpost"

// migrations returns the embedded migrations in version order.
func migrations() ([]migration.Migration, error) { return migration.Load(migrationFS, "migrations") }

// migrate applies, in order and each in its own transaction, the embedded
// migrations the database has not recorded in schema_migrations. It returns
// the versions it applied, and fails when the database records a version
// this build does not know. Each transaction holds an advisory lock, so
// servers starting together apply each migration once.
func migrate(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	all, err := migrations()
	if err != nil {
		return nil, err
	}
	var applied []int
	for _, m := range all {
		did, err := applyOne(ctx, pool, m, all)
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
// transaction, that the database records no version all lacks.
func applyOne(ctx context.Context, pool *pgxpool.Pool, m migration.Migration, all []migration.Migration) (bool, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit

	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
		return false, fmt.Errorf("lock schema_migrations: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at BIGINT NOT NULL
	)`); err != nil {
		return false, fmt.Errorf("create schema_migrations: %w", err)
	}
	recs, err := collect(func(sc sqlstore.Scanner) (migration.Record, error) {
		var r migration.Record
		err := sc.Scan(&r.Version, &r.Name)
		return r, err
	})(tx.Query(ctx, migration.ReadSQL))
	if err != nil {
		return false, fmt.Errorf("read schema_migrations: %w", err)
	}
	if pending, err := migration.Pending(all, recs, m); !pending || err != nil {
		return false, err
	}
	// No arguments: pgx sends it with the simple protocol, which runs
	// several statements.
	if _, err := tx.Exec(ctx, m.SQL); err != nil {
		return false, fmt.Errorf("migration %s: %w", m.Name, err)
	}
	if _, err := tx.Exec(ctx, migration.RecordSQL, m.Version, m.Name, time.Now().UnixMilli()); err != nil {
		return false, fmt.Errorf("record migration %s: %w", m.Name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("migration %s: commit: %w", m.Name, err)
	}
	return true, nil
}
