//go:build !windows

package bench

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/datadir"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sealed"
	"github.com/outpost-sh/outpost/internal/store/sqlite"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// OUTPOST_BENCH_HISTORY=N starts every benchmark's server (SQLite only) on
// a database that already holds N ended sessions of the benchmarked outpost,
// each with what a real one-step script session leaves: its row (ended,
// artifacts pruned), a deleted queue entry, seven events and one call. It
// shows whether the numbers stay flat as history grows.
//
// The database is made once per N and schema (a hash of the SQLite
// migrations) in one bulk transaction, and kept under the user's cache dir
// (outpost-bench/history-N-HASH/, with the secret key its sessions' secrets
// are sealed under); each cluster starts on a copy of it.
const historySeedVersion = 1 // bump when what is seeded changes

// historySessions is OUTPOST_BENCH_HISTORY, 0 when unset.
func historySessions() int { return envInt("OUTPOST_BENCH_HISTORY", 0) }

// seedHistory puts a copy of the history database for
// OUTPOST_BENCH_HISTORY into dataDir, and reports whether it did (the
// outpost then exists already).
func seedHistory(b *testing.B, dataDir string) bool {
	b.Helper()
	n := historySessions()
	if n == 0 {
		return false
	}
	if v := os.Getenv("OUTPOST_BENCH_DATABASE"); v != "" && v != "sqlite" {
		b.Fatalf("OUTPOST_BENCH_HISTORY seeds the SQLite database only, not OUTPOST_BENCH_DATABASE=%s", v)
	}
	dir, err := historyTemplate(b, n)
	if err != nil {
		b.Fatalf("seed %d sessions of history: %v", n, err)
	}
	t := time.Now()
	for _, name := range []string{datadir.Database, datadir.SecretKey} {
		if err := copyFile(filepath.Join(dir, name), filepath.Join(dataDir, name)); err != nil {
			b.Fatalf("copy the history database: %v", err)
		}
	}
	b.Logf("history: %d ended sessions on outpost %q (copied in %s)", n, "bench", rd(time.Since(t)))
	return true
}

// historyTemplate returns the cache dir of the history database of n
// sessions, making it first when it is missing.
func historyTemplate(b *testing.B, n int) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	schema, err := schemaHash()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "outpost-bench", fmt.Sprintf("history-%d-v%d-%s", n, historySeedVersion, schema))
	if _, err := os.Stat(filepath.Join(dir, datadir.Database)); err == nil {
		return dir, nil
	}
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return "", err
	}
	t := time.Now()
	if err := writeHistory(b.Context(), tmp, n); err != nil {
		return "", err
	}
	b.Logf("history: seeded %d sessions into %s in %s", n, dir, rd(time.Since(t)))
	return dir, os.Rename(tmp, dir)
}

// schemaHash is a short hash of the SQLite migrations, so a schema change
// makes a new database.
func schemaHash() (string, error) {
	dir := filepath.Join("..", "..", "internal", "store", "sqlite", "migrations")
	names, err := fs.Glob(os.DirFS(dir), "*.sql")
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	h := sha256.New()
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// writeHistory makes the database and secret key of n ended sessions in dir.
func writeHistory(ctx context.Context, dir string, n int) error {
	key, err := sealed.GenerateKey()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, datadir.SecretKey), []byte(sealed.EncodeKey(key)+"\n"), 0o600); err != nil {
		return err
	}
	keys, err := sealed.NewKeyring(key)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, datadir.Database)
	st, err := sqlite.Open(ctx, path, sqlite.WithKeyring(keys))
	if err != nil {
		return err
	}
	const outpostID = "op_benchhistory"
	err = st.CreateOutpost(ctx, store.Outpost{ID: outpostID, Name: "bench", Platform: api.PlatformLinux, CreatedAt: time.Now()})
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}

	// A bulk load of a file thrown away if it fails: no journal, no sync.
	db, err := sql.Open("sqlite", path+"?_pragma=journal_mode(OFF)&_pragma=synchronous(OFF)&_pragma=foreign_keys(0)")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	prep := func(q string) (*sql.Stmt, error) { return tx.PrepareContext(ctx, q) }
	// The sessions' artifacts are pruned already, as the retention sweep
	// leaves sessions that ended long ago.
	insSession, err := prep(strings.Replace(strings.Replace(sqlstore.InsertSessionSQL,
		"secrets_key)", "secrets_key, artifacts_pruned_at)", 1), "$16)", "$16, $14)", 1))
	if err != nil {
		return err
	}
	insEntry, err := prep(`INSERT INTO queue (` + sqlstore.EntryCols + `)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $20, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)`)
	if err != nil {
		return err
	}
	insEvent, err := prep(`INSERT INTO events (session_id, seq, body_json) VALUES ($1, $2, $3)`)
	if err != nil {
		return err
	}
	insCall, err := prep(sqlstore.UpsertCallSQL)
	if err != nil {
		return err
	}

	// Oldest first, one every 50 ms, ending an hour ago.
	start := time.Now().Add(-time.Hour - time.Duration(n)*50*time.Millisecond)
	args := json.RawMessage(`{"command":"echo done"}`)
	value := json.RawMessage(`{"exit_code":0,"output":"done\n"}`)
	caps := &api.Capabilities{}
	for i := range n {
		id := fmt.Sprintf("ses_hist%010d", i)
		created := start.Add(time.Duration(i) * 50 * time.Millisecond)
		claimed, connected := created.Add(2*time.Millisecond), created.Add(14*time.Millisecond)
		called, ended := created.Add(16*time.Millisecond), created.Add(25*time.Millisecond)
		sess := store.Session{
			ID: id, OutpostID: outpostID,
			Spec: api.SessionSpec{Outpost: "bench", Title: fmt.Sprintf("history %d", i),
				Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: args}}}},
			Status: api.StatusExit, Reason: "The script finished.", LastSeq: 1, Capabilities: caps,
			CreatedAt: created, UpdatedAt: ended, StartedAt: &connected, EndedAt: &ended,
		}
		sargs, err := sqlstore.SessionArgs(&sess, keys)
		if err != nil {
			return err
		}
		if _, err := insSession.ExecContext(ctx, sargs...); err != nil {
			return fmt.Errorf("session %d: %w", i, err)
		}
		e := store.QueueEntry{SessionID: id, OutpostID: outpostID, Kind: api.KindNew, Platform: api.PlatformLinux,
			Phase: api.PhasePending, Epoch: 2, SessionStatus: api.QueueSessionTerminated, Deleted: true,
			CreatedAt: created, UpdatedAt: ended, MaxAttempts: api.DefaultMaxAttempts}
		if _, err := insEntry.ExecContext(ctx, append(sqlstore.EntryArgs(&e), int64(i+1))...); err != nil {
			return fmt.Errorf("queue entry %d: %w", i, err)
		}
		acc, ok := "bench-worker", true
		evs := []api.Event{
			{Type: api.EventStatus, Status: api.StatusNew, Time: created.UnixMilli()},
			{Type: api.EventClaim, AcceptorID: acc, Time: claimed.UnixMilli(), Reason: "Claimed by " + acc + "."},
			{Type: api.EventStatus, Status: api.StatusClaimed, Time: claimed.UnixMilli(), Reason: "Claimed by " + acc + "; waiting for its remote to connect."},
			{Type: api.EventRemoteConnected, Time: connected.UnixMilli(), Capabilities: caps},
			{Type: api.EventCall, Time: called.UnixMilli(), CallSeq: 1, Tool: api.ToolExec, Args: args},
			{Type: api.EventResult, Time: ended.UnixMilli(), CallSeq: 1, OK: &ok, Value: value},
			{Type: api.EventStatus, Status: api.StatusExit, Time: ended.UnixMilli(), Reason: "The script finished."},
		}
		for j := range evs {
			evs[j].Seq, evs[j].SessionID = int64(j+1), id
			body, err := sqlstore.Marshal(evs[j])
			if err != nil {
				return err
			}
			if _, err := insEvent.ExecContext(ctx, id, j+1, body); err != nil {
				return fmt.Errorf("event %d of %d: %w", j, i, err)
			}
		}
		c := store.Call{SessionID: id, Seq: 1, Tool: api.ToolExec, Args: args, Done: true, OK: true, Value: value,
			CreatedAt: called, DoneAt: &ended}
		if _, err := insCall.ExecContext(ctx, sqlstore.CallArgs(&c)...); err != nil {
			return fmt.Errorf("call of %d: %w", i, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE counters SET value = $1 WHERE name = 'rev'`, n); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `PRAGMA journal_mode = WAL`); err != nil {
		return err
	}
	return db.Close()
}

// copyFile copies src to a new file dst.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
