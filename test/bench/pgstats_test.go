//go:build !windows

package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// With OUTPOST_BENCH_PG_STATEMENTS=1 (and OUTPOST_BENCH_DATABASE=postgres)
// the benchmark's PostgreSQL server loads pg_stat_statements, and the
// benchmarks that call pgStats print the statements a phase ran per
// operation, the most frequent first, and its transactions per operation.

// pgStatsOn reports whether statements are counted.
func pgStatsOn() bool {
	return os.Getenv("OUTPOST_BENCH_PG_STATEMENTS") == "1" && os.Getenv("OUTPOST_BENCH_DATABASE") == "postgres"
}

// pgStatsSettings are the server settings that count statements.
func pgStatsSettings() []string {
	if !pgStatsOn() {
		return nil
	}
	return []string{"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=all",
		"pg_stat_statements.track_utility=on"}
}

// pgStats starts counting the statements of the last database started;
// the function it returns prints them per op (ops operations in the
// phase, named what). Without counting it does nothing.
func pgStats(b *testing.B) func(what string, ops int) {
	b.Helper()
	if !pgStatsOn() || benchPG.url == "" {
		return func(string, int) {}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, benchPG.url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(context.Background())
	var commits0 int64 // transactions committed
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		b.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT pg_stat_get_db_xact_commit(oid) FROM pg_database WHERE datname = current_database()`).Scan(&commits0); err != nil {
		b.Fatal(err)
	}
	return func(what string, ops int) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, benchPG.url)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close(context.Background())
		// The statistics collector reports commits with a delay.
		time.Sleep(time.Second)
		var commits int64
		if err := conn.QueryRow(ctx, `SELECT pg_stat_get_db_xact_commit(oid) FROM pg_database WHERE datname = current_database()`).Scan(&commits); err != nil {
			b.Fatal(err)
		}
		rows, err := conn.Query(ctx, `SELECT calls, total_exec_time, query FROM pg_stat_statements
			WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND query NOT LIKE '%pg_stat%' ORDER BY calls DESC`)
		if err != nil {
			b.Fatal(err)
		}
		defer rows.Close()
		var total int64
		var lines []string
		for rows.Next() {
			var calls int64
			var ms float64
			var q string
			if err := rows.Scan(&calls, &ms, &q); err != nil {
				b.Fatal(err)
			}
			total += calls
			if float64(calls)/float64(ops) >= 0.05 {
				q = strings.Join(strings.Fields(q), " ")
				if len(q) > 110 {
					q = q[:110] + "…"
				}
				lines = append(lines, fmt.Sprintf("    %5.2f/op %6.1f µs/call  %s", float64(calls)/float64(ops), 1000*ms/float64(calls), q))
			}
		}
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		// Every statement outside a transaction block is a transaction
		// of its own, and counted.
		b.Logf("PGSTATS %s: %.2f statements and %.2f transactions per op (%d ops)\n%s", what, float64(total)/float64(ops),
			float64(commits-commits0)/float64(ops), ops, strings.Join(lines, "\n"))
	}
}
