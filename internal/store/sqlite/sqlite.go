// Package sqlite is the embedded implementation of store.Store, on the
// pure-Go SQLite driver modernc.org/sqlite.
//
// The database runs in WAL mode with synchronous=FULL, so a write is on disk
// before its method returns. Every write transaction runs on one dedicated
// connection and begins IMMEDIATE, which serialises writers without
// SQLITE_BUSY upgrades; the transactions that queue up while one commits
// share the next commit, each in its own savepoint (group commit, see
// writer). Queries use a separate pool of read-only connections. Every
// connection keeps the statements it prepared (see cachingConnector).
// Times are kept as Unix milliseconds and come back in UTC. Most methods of
// store.Store are package sqlstore's core, written once for both
// databases; this package is its plugin (plugin.go) and keeps what only
// SQLite has: the writer, the statement cache, backups, migrations.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"sync"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/outpost-sh/outpost/internal/audit"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sealed"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// busyTimeoutMS bounds how long a connection waits for a lock another
// process (or the WAL checkpointer) holds.
const busyTimeoutMS = 10000

// Store is a store.Store backed by one SQLite database file.
type Store struct {
	// Store is what both databases share: most methods of store.Store.
	sqlstore.Store

	w *sql.DB // the single writer connection
	r *sql.DB // read-only pool

	// keys seal session secrets; nil keeps them as plaintext JSON.
	keys *sealed.Keyring

	// migrated lists the migration versions this Open applied.
	migrated []int
	// resealed counts the sessions whose secrets this Open sealed anew.
	resealed int

	// locks are Lock's (locks.go).
	locks namedLocks

	// writer runs every write transaction on w (writer.go).
	writer    *writer
	closeOnce sync.Once
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
	// Group commit puts each caller's transaction in a savepoint, and
	// SQLite journals the pages a savepoint changes to a temporary file
	// unless temporary storage is memory (they are a batch's few pages).
	wq.Set("_pragma", "temp_store(MEMORY)")
	w, err := openDB(path+"?"+wq.Encode(), true)
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
	r, err := openDB(path+"?"+rq.Encode(), false)
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
		r.Close()
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s.writer = newWriter(w)
	s.Store = sqlstore.NewStore("sqlite", plugin{s}, &dialect, s.keys)
	if s.resealed, err = sqlstore.OpenKeys(ctx, &s.Store); err != nil {
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

// Close closes the database, once the writes already queued are done.
func (s *Store) Close() error {
	s.closeOnce.Do(s.writer.close)
	return errors.Join(s.r.Close(), s.w.Close())
}

// write runs fn in an IMMEDIATE transaction on the writer and returns once
// it is durable; it may share its commit with other callers' (see writer).
// An error from fn rolls back fn's writes and is returned unchanged. fn
// runs on the writer's goroutine and must not call the Store's write
// methods.
//
// Every write of the store passes here: the audit entry ctx carries (see
// package audit) is appended in the transaction, after fn and only when
// fn succeeded, so the change and its entry commit or roll back together.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	e, committed := audit.Pending(ctx)
	if e == nil {
		return s.writer.do(ctx, fn)
	}
	err := s.writer.do(ctx, func(tx *sql.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		return sqlstore.AppendAudit(ctx, sqlTx{tx}, dialect.Lock.Row, e)
	})
	if err == nil && !e.Skip {
		committed()
	}
	return err
}

// openDB opens a pool on dsn whose connections keep their prepared
// statements (see cachingConnector).
func openDB(dsn string, uncancelable bool) (*sql.DB, error) {
	c, err := sqlite.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(cachingConnector{Connector: c, uncancelable: uncancelable}), nil
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

// dialect is how SQLite spells what sqlstore leaves to the store.
var dialect = sqlstore.Dialect{
	Greatest:   "MAX",
	NotDeleted: "deleted = 0",
	Contains:   func(col, arg string) string { return "instr(" + col + ", " + arg + ") > 0" },
	// Spelled out rather than as a row value, as the sessions_created
	// index is used for it.
	Before: func(c, id string) string {
		return "(created_at < " + c + " OR (created_at = " + c + " AND id < " + id + "))"
	},
	OutpostCols: outpostCols,
	ScanOutpost: scanOutpost,
	Tombstone:   "q.deleted = 1",
	// A statement is a call in process, and QueueNotify reads no seq.
	SeqOnDemand: true,
	CountIf:     func(cond string) string { return "COALESCE(SUM(" + cond + "), 0)" },
	MinIf:       func(col, cond string) string { return "MIN(CASE WHEN " + cond + " THEN " + col + " END)" },
	NoLimit:     int64(-1),
	IndexedBy:   func(index string) string { return " INDEXED BY " + index },
	In: func(w *sqlstore.Where, col string, ids []string) string {
		var b strings.Builder
		b.WriteString(col + " IN (")
		for i, id := range ids {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(w.Arg(id))
		}
		b.WriteString(")")
		return b.String()
	},
	IsUniqueViolation: func(err error) bool {
		var se *sqlite.Error
		if !errors.As(err, &se) {
			return false
		}
		c := se.Code()
		return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	},
}

// mapErr turns driver errors into store errors: unique and primary key
// violations become store.ErrConflict, sql.ErrNoRows store.ErrNotFound.
func mapErr(err error) error { return dialect.MapErr(err) }

// mustAffect turns a result that touched no row into sql.ErrNoRows.
func mustAffect(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return sql.ErrNoRows
	}
	return nil
}

// collect reads every row of rows with scan and closes rows.
func collect[T any](rows *sql.Rows, err error, scan func(sqlstore.Scanner) (T, error)) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return sqlstore.Collect(rows, scan)
}

// Resealed is how many sessions' secrets Open sealed under the current key.
func (s *Store) Resealed() int { return s.resealed }
