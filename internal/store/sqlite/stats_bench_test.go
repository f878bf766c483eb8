package sqlite

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// BenchmarkFleetStats measures the dashboard's query and bucketing
// (store.FleetStats) for each window over 100,000 sessions: spread over
// 30 days (a busy fleet's month), and all within the last week (the
// week's window then reads every one of them).
func BenchmarkFleetStats(b *testing.B) {
	const n = 100_000
	now := time.Now().UTC()
	for _, spread := range []struct {
		name string
		span time.Duration
	}{{"month", 30 * 24 * time.Hour}, {"week", 7 * 24 * time.Hour}} {
		path := filepath.Join(b.TempDir(), "outpost.db")
		s, err := Open(b.Context(), path)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		db, err := sql.Open("sqlite", path+"?_busy_timeout=10000")
		if err != nil {
			b.Fatal(err)
		}
		tx, err := db.Begin()
		if err != nil {
			b.Fatal(err)
		}
		ins, err := tx.Prepare(`INSERT INTO sessions (id, outpost_id, title_fold, spec_json, secrets_json, status, status_detail, reason,
			last_seq, created_at, updated_at, started_at, ended_at) VALUES (?, ?, '', '{}', '{}', ?, '', '', 0, ?, ?, ?, ?)`)
		if err != nil {
			b.Fatal(err)
		}
		for i := range n {
			created := now.Add(-spread.span + spread.span/n*time.Duration(i))
			started := created.Add(time.Duration(i%300) * time.Second)
			ended := started.Add(time.Duration(i%1800) * time.Second)
			status := []string{api.StatusExit, api.StatusError}[i%5/4]
			if _, err := ins.Exec(fmt.Sprint("ses_", i), fmt.Sprint("op_", i%4), status, created.UnixMilli(), ended.UnixMilli(), started.UnixMilli(), ended.UnixMilli()); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		db.Close()
		for _, w := range api.StatsWindows {
			for _, outpost := range []string{"", "op_1"} {
				name := spread.name + "/" + w.Name + "/every"
				if outpost != "" {
					name = spread.name + "/" + w.Name + "/one"
				}
				b.Run(name, func(b *testing.B) {
					for b.Loop() {
						if _, err := store.FleetStats(b.Context(), s, store.StatsQuery{OutpostID: outpost, Window: w, Now: now}); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
