package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
)

// cachedStmts returns the texts the connections of db keep.
func cachedStmts(t *testing.T, db *sql.DB) map[string]bool {
	t.Helper()
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	out := map[string]bool{}
	err = conn.Raw(func(dc any) error {
		for q := range dc.(*cachedConn).byText {
			out[q] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func openCached(t *testing.T) *sql.DB {
	t.Helper()
	db, err := openDB(filepath.Join(t.TempDir(), "c.db"), false)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	if _, err := db.ExecContext(t.Context(), `CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1), (2), (3)`); err != nil {
		t.Fatal(err)
	}
	return db
}

// A statement is prepared once and kept; scripts are not kept.
func TestStmtCacheKeeps(t *testing.T) {
	t.Parallel()
	db := openCached(t)
	const q = `SELECT COUNT(*) FROM t WHERE a > $1`
	for want := range 3 {
		var n int
		if err := db.QueryRowContext(t.Context(), q, 2-want).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != want+1 {
			t.Fatalf("count = %d, want %d", n, want+1)
		}
	}
	kept := cachedStmts(t, db)
	if !kept[q] {
		t.Errorf("%q is not kept: %v", q, kept)
	}
	for k := range kept {
		if k != q {
			t.Errorf("kept %q, a script or another text", k)
		}
	}
}

// The same statement run again while rows of it are open runs uncached,
// and both result sets are right.
func TestStmtCacheBusy(t *testing.T) {
	t.Parallel()
	db := openCached(t)
	ctx := t.Context()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	const q = `SELECT a FROM t WHERE a >= $1 ORDER BY a`
	outer, err := tx.QueryContext(ctx, q, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Close()
	var got []string
	for outer.Next() {
		var a int
		if err := outer.Scan(&a); err != nil {
			t.Fatal(err)
		}
		inner, err := tx.QueryContext(ctx, q, a)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		for inner.Next() {
			n++
		}
		if err := inner.Close(); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d:%d", a, n))
	}
	if err := outer.Err(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[1:3 2:2 3:1]" {
		t.Errorf("nested runs of one statement gave %v, want [1:3 2:2 3:1]", got)
	}
}

// A kept statement sees a schema change made after it was prepared.
func TestStmtCacheSchemaChange(t *testing.T) {
	t.Parallel()
	db := openCached(t)
	ctx := t.Context()
	const q = `SELECT * FROM t WHERE a = 1`
	cols := func() int {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		c, err := rows.Columns()
		if err != nil {
			t.Fatal(err)
		}
		return len(c)
	}
	if n := cols(); n != 1 {
		t.Fatalf("%d columns, want 1", n)
	}
	if _, err := db.ExecContext(ctx, `ALTER TABLE t ADD COLUMN b TEXT NOT NULL DEFAULT 'x'`); err != nil {
		t.Fatal(err)
	}
	if n := cols(); n != 2 {
		t.Errorf("the kept statement gives %d columns after ALTER TABLE, want 2", n)
	}
}

// More distinct statements than the cache holds: the oldest go, and every
// one still runs.
func TestStmtCacheEvicts(t *testing.T) {
	t.Parallel()
	db := openCached(t)
	for i := range stmtCacheSize + 10 {
		var v int
		if err := db.QueryRowContext(context.Background(), fmt.Sprintf(`SELECT %d`, i)).Scan(&v); err != nil || v != i {
			t.Fatalf("SELECT %d = %d, %v", i, v, err)
		}
	}
	kept := cachedStmts(t, db)
	if len(kept) != stmtCacheSize || kept[`SELECT 0`] || !kept[fmt.Sprintf(`SELECT %d`, stmtCacheSize+9)] {
		t.Errorf("kept %d statements (SELECT 0 kept: %v), want the newest %d", len(kept), kept[`SELECT 0`], stmtCacheSize)
	}
}
