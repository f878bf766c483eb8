package storetest

import (
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// Batches checks how a sqlstore.Plugin runs a batch, on a store just
// opened: statements in the order queued, each callback after its own
// statement and before the next, the first failing check ending the
// transaction and rolling back what the batch wrote, and a transaction
// whose first batch and later batches all commit together.
func Batches(t *testing.T, p sqlstore.Plugin) {
	ctx := t.Context()
	ids := func() []string {
		t.Helper()
		var out []string
		err := p.Read(ctx, func(tx sqlstore.Tx) error {
			rows, err := sqlstore.QueryAll(ctx, tx, sqlstore.ScanReplica, sqlstore.ListReplicasSQL, 0)
			for _, r := range rows {
				out = append(out, r.ID)
			}
			return err
		})
		if err != nil {
			t.Fatalf("read replicas: %v", err)
		}
		return out
	}

	// A check that fails ends the transaction: nothing it wrote stays,
	// and no statement after it runs.
	var seen []string
	err := p.Write(ctx, func(b *sqlstore.Batch) {
		seen = nil
		b.Exec(sqlstore.UpsertReplicaSQL, "r1", "http://127.0.0.1:1", 1, 1)
		b.QueryRow(func(row sqlstore.Scanner) error {
			var url string
			err := row.Scan(&url)
			seen = append(seen, "read "+url)
			return err
		}, `SELECT url FROM replicas WHERE id = $1`, "r1")
		b.MustAffect(sqlstore.DeleteReplicaSQL, "absent")
		b.QueryRow(func(row sqlstore.Scanner) error {
			seen = append(seen, "after the failed check")
			return nil
		}, `SELECT 1`)
	}, func(sqlstore.Tx) error {
		seen = append(seen, "fn")
		return nil
	})
	if !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("a batch whose check fails: %v, want sql.ErrNoRows", err)
	}
	if want := []string{"read http://127.0.0.1:1"}; !slices.Equal(seen, want) {
		t.Fatalf("callbacks %q, want %q", seen, want)
	}
	if got := ids(); len(got) != 0 {
		t.Fatalf("a failed transaction left %q", got)
	}

	// The first batch, fn's statements and fn's batch commit together,
	// callbacks in order.
	seen = nil
	err = p.Write(ctx, func(b *sqlstore.Batch) {
		seen = nil
		b.Exec(sqlstore.UpsertReplicaSQL, "r1", "http://127.0.0.1:1", 1, 1)
		b.MustAffect(`UPDATE replicas SET seen_at = 2 WHERE id = $1`, "r1")
	}, func(tx sqlstore.Tx) error {
		var seenAt int64
		if err := tx.QueryRow(ctx, `SELECT seen_at FROM replicas WHERE id = $1`, "r1").Scan(&seenAt); err != nil {
			return err
		}
		seen = append(seen, "fn")
		if seenAt != 2 {
			t.Errorf("fn saw seen_at %d, want the first batch's 2", seenAt)
		}
		b := &sqlstore.Batch{}
		for _, id := range []string{"r2", "r3"} {
			b.Exec(sqlstore.UpsertReplicaSQL, id, "http://127.0.0.1:1", 1, 1)
			b.QueryRow(func(row sqlstore.Scanner) error {
				var n int
				err := row.Scan(&n)
				seen = append(seen, fmt.Sprintf("%s %d", id, n))
				return err
			}, `SELECT COUNT(*) FROM replicas`)
		}
		return tx.Send(ctx, b)
	})
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	if want := []string{"fn", "r2 2", "r3 3"}; !slices.Equal(seen, want) {
		t.Fatalf("callbacks %q, want %q", seen, want)
	}
	if got, want := ids(), []string{"r1", "r2", "r3"}; !slices.Equal(got, want) {
		t.Fatalf("replicas %q, want %q", got, want)
	}

	// An error of fn is returned as is and rolls back the first batch.
	errFn := errors.New("fn failed")
	err = p.Write(ctx, func(b *sqlstore.Batch) {
		b.Exec(sqlstore.DeleteReplicaSQL, "r1")
	}, func(sqlstore.Tx) error { return errFn })
	if err != errFn {
		t.Fatalf("fn's error came back as %v", err)
	}
	if got, want := ids(), []string{"r1", "r2", "r3"}; !slices.Equal(got, want) {
		t.Fatalf("after fn failed: replicas %q, want %q", got, want)
	}
}
