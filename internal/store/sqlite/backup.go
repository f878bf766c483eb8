package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
)

// openReadOnly opens the existing database at path read-only: the
// connection never writes it, creates it, or changes its journal mode, and
// works beside a writer in this process or another (WAL readers see one
// snapshot per transaction).
func openReadOnly(ctx context.Context, path string) (*sql.DB, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(abs); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no database at %s: %w", abs, err)
		}
		return nil, err
	}
	q := url.Values{}
	q.Set("mode", "ro")
	q.Set("_busy_timeout", fmt.Sprint(busyTimeoutMS))
	u := url.URL{Scheme: "file", Path: abs, RawQuery: q.Encode()}
	// url.URL renders file:///abs; SQLite wants file:/abs (or an
	// authority of localhost), and both parse the same.
	db, err := sql.Open("sqlite", "file:"+u.EscapedPath()+"?"+u.RawQuery)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// Snapshot writes a consistent copy of the database at path to dst, which
// must not exist, with VACUUM INTO: one read transaction, so the copy is
// the database as of one commit however many writers go on meanwhile, in
// this process or another. It opens the database read-only and never
// blocks writers (with WAL, a reader does not hold them up). The copy is
// compacted, and is a complete database on its own: no -wal file goes
// with it.
func Snapshot(ctx context.Context, path, dst string) error {
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("sqlite: snapshot to %s: the file exists", dst)
	}
	db, err := openReadOnly(ctx, path)
	if err != nil {
		return fmt.Errorf("sqlite: snapshot %s: %w", path, err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, dst); err != nil {
		os.Remove(dst)
		return fmt.Errorf("sqlite: snapshot %s: %w", path, err)
	}
	// VACUUM INTO does not sync the file it writes.
	f, err := os.Open(dst)
	if err != nil {
		return fmt.Errorf("sqlite: snapshot %s: %w", path, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sqlite: snapshot %s: sync: %w", path, err)
	}
	return nil
}

// Info describes a database file; see Inspect.
type Info struct {
	// Migrations are the schema versions the database records, in order.
	Migrations []int
	// Unknown are the recorded versions this build does not know: a
	// database written by a newer version of outpost, which Open refuses.
	Unknown []int
	// Sessions counts the sessions.
	Sessions int
	// SecretKeyIDs are the ids of the keys sessions' secrets are sealed
	// under, sorted; "" stands for secrets kept as plaintext.
	SecretKeyIDs []string
}

// Inspect opens the database at path read-only, checks it with PRAGMA
// integrity_check and describes it. It fails when the check finds a
// problem, naming the first, and changes nothing, so it also suits a
// database a server is using.
func Inspect(ctx context.Context, path string) (Info, error) {
	var info Info
	db, err := openReadOnly(ctx, path)
	if err != nil {
		return info, fmt.Errorf("sqlite: inspect %s: %w", path, err)
	}
	defer db.Close()
	var check string
	if err := db.QueryRowContext(ctx, `PRAGMA integrity_check(1)`).Scan(&check); err != nil {
		return info, fmt.Errorf("sqlite: inspect %s: integrity check: %w", path, err)
	}
	if check != "ok" {
		return info, fmt.Errorf("sqlite: %s fails its integrity check: %s", path, check)
	}
	all, err := migrations()
	if err != nil {
		return info, err
	}
	known := map[int]bool{}
	for _, m := range all {
		known[m.Version] = true
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return info, fmt.Errorf("sqlite: inspect %s: %w", path, err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	rows, err := tx.QueryContext(ctx, `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		return info, fmt.Errorf("sqlite: inspect %s: not an outpost database: %w", path, err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return info, err
		}
		info.Migrations = append(info.Migrations, v)
		if !known[v] {
			info.Unknown = append(info.Unknown, v)
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return info, fmt.Errorf("sqlite: inspect %s: %w", path, err)
	}
	if len(info.Unknown) > 0 {
		// A newer schema may name its tables otherwise: stop here.
		return info, nil
	}
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM sessions`).Scan(&info.Sessions); err != nil {
		return info, fmt.Errorf("sqlite: inspect %s: %w", path, err)
	}
	if !slices.Contains(info.Migrations, 7) { // 0007_sealed_secrets adds secrets_key
		return info, nil
	}
	keys, err := tx.QueryContext(ctx, `SELECT DISTINCT secrets_key FROM sessions`)
	if err != nil {
		return info, fmt.Errorf("sqlite: inspect %s: %w", path, err)
	}
	for keys.Next() {
		var id string
		if err := keys.Scan(&id); err != nil {
			keys.Close()
			return info, err
		}
		info.SecretKeyIDs = append(info.SecretKeyIDs, id)
	}
	if err := errors.Join(keys.Err(), keys.Close()); err != nil {
		return info, fmt.Errorf("sqlite: inspect %s: %w", path, err)
	}
	slices.Sort(info.SecretKeyIDs)
	return info, nil
}
