// Package migration reads a store's embedded schema migrations: files
// named NNNN_name.sql, applied in version order and recorded by version in
// the table schema_migrations; and it decides, from what a database
// recorded, whether a migration is still to apply.
package migration

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Migration is one schema step.
type Migration struct {
	Version int
	Name    string // the file name without .sql
	SQL     string
}

// Load returns the migrations in dir of fsys (dir/*.sql) in version order.
// A file whose name does not start with a positive version, or two files
// with one version, are errors. Versions need not be contiguous: a gap
// (0001, 0004) is fine, and a database that recorded a later version before
// an earlier one was added gets the earlier one applied on its next start.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, n := range names {
		base := strings.TrimSuffix(path.Base(n), ".sql")
		num, _, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive version", n)
		}
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: base, SQL: string(b)})
	}
	slices.SortFunc(ms, func(a, b Migration) int { return a.Version - b.Version })
	for i := 1; i < len(ms); i++ {
		if ms[i].Version == ms[i-1].Version {
			return nil, fmt.Errorf("migrations %s and %s share a version", ms[i-1].Name, ms[i].Name)
		}
	}
	return ms, nil
}

// Statements of schema_migrations both SQL dialects accept.
const (
	// ReadSQL lists the recorded migrations: version, name.
	ReadSQL = `SELECT version, name FROM schema_migrations ORDER BY version`
	// RecordSQL records migration version $1 named $2 applied at $3 (Unix
	// milliseconds).
	RecordSQL = `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`
)

// Record is a migration a database recorded.
type Record struct {
	Version int
	Name    string
}

// Pending reports whether m is still to apply to a database that recorded
// recs. It fails when recs hold a version none of all has: the database
// was written by a newer build.
func Pending(all []Migration, recs []Record, m Migration) (bool, error) {
	recorded := false
	for _, r := range recs {
		if !slices.ContainsFunc(all, func(k Migration) bool { return k.Version == r.Version }) {
			return false, fmt.Errorf("database has migration %d (%s) that this build does not know: it was written by a newer version of outpost", r.Version, r.Name)
		}
		recorded = recorded || r.Version == m.Version
	}
	return !recorded, nil
}
