package sqlite

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sealed"
	"github.com/outpost-sh/outpost/internal/store/storetest"
)

func openTemp(tb testing.TB) (*Store, string) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "outpost.db")
	s, err := Open(context.Background(), path)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	return s, path
}

// testKeys returns a keyring of one new key.
func testKeys(tb testing.TB) *sealed.Keyring {
	tb.Helper()
	k, err := sealed.GenerateKey()
	if err != nil {
		tb.Fatal(err)
	}
	keys, err := sealed.NewKeyring(k)
	if err != nil {
		tb.Fatal(err)
	}
	return keys
}

// The suite runs with secrets sealed, as a server keeps them.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := Open(t.Context(), filepath.Join(t.TempDir(), "outpost.db"), WithKeyring(testKeys(t)))
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	})
}

// sealedDB is one database file for storetest.RunSealed; the raw column
// is read and written through database/sql, past the store.
type sealedDB struct{ path string }

func (d sealedDB) Open(t *testing.T, keys *sealed.Keyring) (store.Store, error) {
	return Open(t.Context(), d.path, WithKeyring(keys))
}

func (d sealedDB) raw(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", d.path+"?_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func (d sealedDB) RawSecrets(t *testing.T, id string) string {
	t.Helper()
	var v string
	if err := d.raw(t).QueryRowContext(t.Context(), `SELECT secrets_json FROM sessions WHERE id = ?`, id).Scan(&v); err != nil {
		t.Fatalf("read raw secrets of %s: %v", id, err)
	}
	return v
}

func (d sealedDB) SetRawSecrets(t *testing.T, id, text string) {
	t.Helper()
	if _, err := d.raw(t).ExecContext(t.Context(), `UPDATE sessions SET secrets_json = ? WHERE id = ?`, text, id); err != nil {
		t.Fatalf("write raw secrets of %s: %v", id, err)
	}
}

func (d sealedDB) RawOutpostSecret(t *testing.T, outpostID, name string) string {
	t.Helper()
	var v string
	if err := d.raw(t).QueryRowContext(t.Context(), `SELECT value FROM outpost_secrets WHERE outpost_id = ? AND name = ?`, outpostID, name).Scan(&v); err != nil {
		t.Fatalf("read raw secret %s of %s: %v", name, outpostID, err)
	}
	return v
}

func (d sealedDB) SetRawOutpostSecret(t *testing.T, outpostID, name, text string) {
	t.Helper()
	if _, err := d.raw(t).ExecContext(t.Context(), `UPDATE outpost_secrets SET value = ? WHERE outpost_id = ? AND name = ?`, text, outpostID, name); err != nil {
		t.Fatalf("write raw secret %s of %s: %v", name, outpostID, err)
	}
}

func TestSealed(t *testing.T) {
	storetest.RunSealed(t, func(t *testing.T) storetest.SealedDB {
		return sealedDB{path: filepath.Join(t.TempDir(), "outpost.db")}
	})
}

// TestSealedFile looks for a secret's bytes in the database file and its
// write-ahead log, as someone who copied them would.
func TestSealedFile(t *testing.T) {
	const value = "hunter2-in-the-file"
	path := filepath.Join(t.TempDir(), "outpost.db")
	keys := testKeys(t)
	s, err := Open(t.Context(), path, WithKeyring(keys))
	if err != nil {
		t.Fatal(err)
	}
	sess := store.Session{ID: "s1", OutpostID: "op", Status: api.StatusNew, CreatedAt: time.UnixMilli(1700000000000).UTC(),
		Secrets: map[string]string{"API_TOKEN": value}}
	if err := s.CreateSession(t.Context(), sess, nil, nil); err != nil {
		t.Fatal(err)
	}
	look := func(when string) {
		t.Helper()
		for _, f := range []string{path, path + "-wal"} {
			b, err := os.ReadFile(f)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(b, []byte(value)) {
				t.Errorf("%s: %s holds the secret's value", when, filepath.Base(f))
			}
		}
	}
	look("open")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	look("closed")
	// The value really is there, sealed: the store opens it again.
	s, err = Open(t.Context(), path, WithKeyring(keys))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.GetSession(t.Context(), "s1")
	if err != nil || got.Secrets["API_TOKEN"] != value {
		t.Fatalf("get = %v, %v", got.Secrets, err)
	}
}

func TestPragmas(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	for _, tc := range []struct {
		db           string
		pragma, want string
	}{
		{"writer", "journal_mode", "wal"},
		{"writer", "synchronous", "2"},
		{"writer", "foreign_keys", "1"},
		{"writer", "busy_timeout", strconv.Itoa(busyTimeoutMS)},
		{"writer", "temp_store", "2"},
		{"reader", "journal_mode", "wal"},
		{"reader", "foreign_keys", "1"},
		{"reader", "query_only", "1"},
	} {
		db := s.w
		if tc.db == "reader" {
			db = s.r
		}
		var got string
		if err := db.QueryRowContext(t.Context(), "PRAGMA "+tc.pragma).Scan(&got); err != nil {
			t.Fatalf("%s PRAGMA %s: %v", tc.db, tc.pragma, err)
		}
		if got != tc.want {
			t.Errorf("%s PRAGMA %s = %s, want %s", tc.db, tc.pragma, got, tc.want)
		}
	}
}

func TestReopen(t *testing.T) {
	s, path := openTemp(t)
	all, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(s.migrated) != len(all) {
		t.Errorf("fresh open applied %v, want all %d migrations", s.migrated, len(all))
	}
	o := store.Outpost{ID: "op", Name: "linux", Platform: api.PlatformLinux, CreatedAt: time.UnixMilli(1700000000123).UTC()}
	if err := s.CreateOutpost(t.Context(), o); err != nil {
		t.Fatal(err)
	}
	sess := store.Session{ID: "s1", OutpostID: "op", Status: api.StatusNew, CreatedAt: o.CreatedAt}
	e := &store.QueueEntry{OutpostID: "op", Phase: api.PhasePending}
	if err := s.CreateSession(t.Context(), sess, e, []api.Event{{Type: api.EventStatus}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(t.Context(), path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if len(s.migrated) != 0 {
		t.Errorf("reopen applied migrations %v", s.migrated)
	}
	var recorded int
	if err := s.r.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM schema_migrations`).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	if recorded != len(all) {
		t.Errorf("%d migrations recorded, want %d", recorded, len(all))
	}
	got, err := s.GetOutpost(t.Context(), "linux")
	if err != nil || !reflect.DeepEqual(got, o) {
		t.Errorf("outpost after reopen = %+v, %v; want %+v", got, err, o)
	}
	if rev, err := s.MaxRev(t.Context()); err != nil || rev != e.Rev {
		t.Errorf("MaxRev after reopen = %d, %v; want %d", rev, err, e.Rev)
	}
	if evs, err := s.ListEvents(t.Context(), "s1", 0, 0); err != nil || len(evs) != 1 {
		t.Errorf("events after reopen = %v, %v", evs, err)
	}
}

func TestNewerSchema(t *testing.T) {
	s, path := openTemp(t)
	if _, err := s.w.ExecContext(t.Context(), `INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_future', 0)`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err := Open(t.Context(), path)
	if err == nil {
		s.Close()
		t.Fatal("Open of a database from a newer version succeeded")
	}
	if !strings.Contains(err.Error(), "newer version") {
		t.Errorf("error %q does not say the database is newer", err)
	}
}

func TestOpenBadPath(t *testing.T) {
	if _, err := Open(t.Context(), filepath.Join(t.TempDir(), "missing-dir", "x.db")); err == nil {
		t.Error("Open in a missing directory succeeded")
	}
	if _, err := Open(t.Context(), "a?b.db"); err == nil {
		t.Error("Open of a path with '?' succeeded")
	}
}

func TestCanceledContext(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.CreateOutpost(ctx, store.Outpost{ID: "op", Name: "op"}); err == nil {
		t.Error("CreateOutpost with a canceled context succeeded")
	}
	if _, err := s.GetOutpost(t.Context(), "op"); err == nil {
		t.Error("canceled CreateOutpost left a row")
	}
}

const killEnv = "OUTPOST_SQLITE_KILL_DB"

// TestKillHelper is the child of TestKill9: it acknowledges each committed
// outpost on stdout until it is killed.
func TestKillHelper(t *testing.T) {
	path := os.Getenv(killEnv)
	if path == "" {
		t.Skip("helper process for TestKill9")
	}
	s, err := Open(context.Background(), path)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	for i := 0; ; i++ {
		if err := s.CreateOutpost(context.Background(), store.Outpost{ID: fmt.Sprint("op", i), Name: fmt.Sprint("n", i)}); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("ok", i)
	}
}

// TestKill9 kills a writing process and checks every acknowledged write
// survived.
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	path := filepath.Join(t.TempDir(), "outpost.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), killEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := -1
	sc := bufio.NewScanner(out)
	for acked < 200 && sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "ok" {
			acked, _ = strconv.Atoi(f[1])
		} else if len(f) > 0 && f[0] == "error" {
			t.Fatalf("helper: %s", sc.Text())
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if acked < 0 {
		t.Fatal("helper acknowledged nothing")
	}

	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatalf("open after kill: %v", err)
	}
	defer s.Close()
	list, err := s.ListOutposts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) < acked+1 {
		t.Fatalf("%d outposts survived, %d were acknowledged", len(list), acked+1)
	}
	for i := 0; i <= acked; i++ {
		if _, err := s.GetOutpost(t.Context(), fmt.Sprint("op", i)); err != nil {
			t.Errorf("acknowledged outpost %d lost: %v", i, err)
		}
	}
}

// claimFn is a claim as the control plane makes it: move the entry to a
// new holder, mark the session claimed, record the claim, mint a connect
// token.
func claimFn(acceptor string, token *atomic.Int64) func(store.Session, store.QueueEntry) (store.Mutation, error) {
	return func(s store.Session, e store.QueueEntry) (store.Mutation, error) {
		now := time.Now()
		e.Phase, e.AcceptorID, e.ClaimDeadline, e.UpdatedAt = api.PhaseClaimed, acceptor, now.Add(time.Minute), now
		e.Epoch++
		e.SessionStatus = api.QueueSessionRunning
		s.Status, s.UpdatedAt = api.StatusClaimed, now
		return store.Mutation{
			Session:       &s,
			Entry:         &e,
			Events:        []api.Event{{Time: now.UnixMilli(), Type: api.EventClaim, AcceptorID: acceptor}},
			ConnectTokens: []store.ConnectToken{{Hash: fmt.Sprintf("ct-%d", token.Add(1)), Epoch: e.Epoch, CreatedAt: now}},
		}, nil
	}
}

func benchStore(b *testing.B, n int) *Store {
	s, _ := openTemp(b)
	b.Cleanup(func() { s.Close() })
	now := time.Now()
	for i := range n {
		sess := store.Session{ID: fmt.Sprint("s", i), OutpostID: "op", Status: api.StatusNew, CreatedAt: now, UpdatedAt: now}
		e := &store.QueueEntry{OutpostID: "op", Kind: api.KindNew, Platform: api.PlatformLinux, Phase: api.PhasePending}
		if err := s.CreateSession(b.Context(), sess, e, nil); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

// BenchmarkUpdateSession measures serial claim-style updates, each one
// durable (fsync) transaction.
func BenchmarkUpdateSession(b *testing.B) {
	const n = 1000
	s := benchStore(b, n)
	var tokens atomic.Int64
	i := 0
	for b.Loop() {
		if _, err := s.UpdateSession(b.Context(), fmt.Sprint("s", i%n), claimFn("acc", &tokens)); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
}

// BenchmarkUpdateSessionNoEvents measures serial updates that move the
// queue entry and append no event (a claim's renewal, say), each one
// durable transaction: they need not read the transcript's highest seq.
func BenchmarkUpdateSessionNoEvents(b *testing.B) {
	const n = 1000
	s := benchStore(b, n)
	i := 0
	for b.Loop() {
		_, err := s.UpdateSession(b.Context(), fmt.Sprint("s", i%n), func(_ store.Session, e store.QueueEntry) (store.Mutation, error) {
			e.ClaimDeadline, e.UpdatedAt = time.Now().Add(time.Minute), time.Now()
			return store.Mutation{Entry: &e}, nil
		})
		if err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "updates/s")
}

// BenchmarkUpdateSessionParallel measures claim-style updates from many
// goroutines, which the single writer serialises.
func BenchmarkUpdateSessionParallel(b *testing.B) {
	const n = 1000
	s := benchStore(b, n)
	var tokens, next atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := fmt.Sprint("s", next.Add(1)%n)
			if _, err := s.UpdateSession(b.Context(), id, claimFn("acc", &tokens)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
}

// BenchmarkUpdateSession50 measures claim-style updates from 50 goroutines,
// as 50 claimers make them; they share commits (group commit), and
// txs/commit is the mean batch.
func BenchmarkUpdateSession50(b *testing.B) {
	const n = 1000
	s := benchStore(b, n)
	var tokens, next atomic.Int64
	commits, txs := s.writer.commits.Load(), s.writer.txs.Load()
	b.SetParallelism(max(1, 50/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := fmt.Sprint("s", next.Add(1)%n)
			if _, err := s.UpdateSession(b.Context(), id, claimFn("acc", &tokens)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
	b.ReportMetric(float64(s.writer.txs.Load()-txs)/float64(max(1, s.writer.commits.Load()-commits)), "txs/commit")
}

// The shared statements (package sqlstore) are written with $N
// placeholders; the driver must bind $N to the Nth argument whatever the
// order in which they appear and however often.
func TestNumberedPlaceholders(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	defer s.Close()
	var a, b, c string
	if err := s.r.QueryRowContext(t.Context(), `SELECT $2, $1, $2`, "one", "two").Scan(&a, &b, &c); err != nil {
		t.Fatal(err)
	}
	if a != "two" || b != "one" || c != "two" {
		t.Fatalf("SELECT $2, $1, $2 with (one, two) = %s, %s, %s; want two, one, two", a, b, c)
	}
}
