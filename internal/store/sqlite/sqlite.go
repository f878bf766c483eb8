// Package sqlite is the embedded implementation of store.Store, on the
// pure-Go SQLite driver modernc.org/sqlite.
//
// The database runs in WAL mode with synchronous=FULL, so a write is on disk
// before its method returns. Every write transaction runs on one dedicated
// connection and begins IMMEDIATE, which serialises writers without
// SQLITE_BUSY upgrades; queries use a separate pool of read-only connections.
// Times are kept as Unix milliseconds and come back in UTC.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sealed"
)

// busyTimeoutMS bounds how long a connection waits for a lock another
// process (or the WAL checkpointer) holds.
const busyTimeoutMS = 10000

// Store is a store.Store backed by one SQLite database file.
type Store struct {
	w *sql.DB // the single writer connection
	r *sql.DB // read-only pool

	// keys seal session secrets; nil keeps them as plaintext JSON.
	keys *sealed.Keyring

	// migrated lists the migration versions this Open applied.
	migrated []int
	// resealed counts the sessions whose secrets this Open sealed anew.
	resealed int
}

var _ store.Store = (*Store)(nil)

// Option configures Open.
type Option func(*Store)

// WithKeyring seals session secrets at rest with keys. Open then reseals,
// under the keyring's current key, the secrets of every session that are
// plaintext (written without a keyring) or sealed under an older key, and
// fails when some are sealed under a key the keyring lacks. Without it,
// secrets are written as plaintext JSON and sealed ones do not open.
func WithKeyring(keys *sealed.Keyring) Option { return func(s *Store) { s.keys = keys } }

// Open opens (creating if needed) the database at path and brings its schema
// up to date. It fails when the database was written by a newer version.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	if path == "" || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("sqlite: open %q: invalid path", path)
	}
	common := url.Values{}
	common.Set("_busy_timeout", fmt.Sprint(busyTimeoutMS))
	common.Set("_foreign_keys", "1")

	wq := url.Values{}
	for k, v := range common {
		wq[k] = v
	}
	wq.Set("_journal_mode", "WAL")
	wq.Set("_synchronous", "FULL")
	wq.Set("_txlock", "immediate")
	w, err := sql.Open("sqlite", path+"?"+wq.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	// The writer connection turns the file to WAL; readers open after it.
	if err := w.PingContext(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}

	rq := common // common is not used again
	rq.Set("_query_only", "1")
	r, err := sql.Open("sqlite", path+"?"+rq.Encode())
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	n := max(4, runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)

	s := &Store{w: w, r: r}
	for _, o := range opts {
		o(s)
	}
	if s.migrated, err = migrate(ctx, w); err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if s.resealed, err = s.reseal(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	return s, nil
}

// Ping checks both connection pools answer.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.w.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: ping: %w", err)
	}
	if err := s.r.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: ping: %w", err)
	}
	return nil
}

// Close closes the database.
func (s *Store) Close() error {
	return errors.Join(s.r.Close(), s.w.Close())
}

// write runs fn in an IMMEDIATE transaction on the writer and commits it.
// An error from fn rolls back and is returned unchanged.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// read runs fn in a read transaction, so its queries see one snapshot.
func (s *Store) read(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // read-only; nothing to lose
	return fn(tx)
}

// mapErr turns driver errors into store errors: unique and primary key
// violations become store.ErrConflict, sql.ErrNoRows store.ErrNotFound.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return fmt.Errorf("%w: %w", store.ErrConflict, err)
		}
	}
	return err
}

// ms stores a time: zero is 0.
func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// fromMS reads a time stored by ms.
func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

// nullMS stores an optional time: zero is NULL.
func nullMS(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

// fromNullMS reads a time stored by nullMS.
func fromNullMS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMilli(v.Int64).UTC()
}

// ptrMS stores a time pointer: nil is NULL.
func ptrMS(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMilli()
}

// fromPtrMS reads a time stored by ptrMS.
func fromPtrMS(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := time.UnixMilli(v.Int64).UTC()
	return &t
}

// bytesOrNil keeps a nil json.RawMessage NULL.
func bytesOrNil(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

// marshal encodes v as JSON text.
func marshal(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// boolInt stores a bool.
func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
