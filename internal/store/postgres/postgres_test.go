package postgres

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
	"github.com/outpost-sh/outpost/internal/store/sealed"
	"github.com/outpost-sh/outpost/internal/store/storetest"
)

// The tests share one server (fsync off); each opens its own database.
func TestMain(m *testing.M) { pgtest.Main(m) }

func openTemp(tb testing.TB) (*Store, string) {
	tb.Helper()
	url := pgtest.Shared(tb).Database(tb)
	s, err := Open(context.Background(), url)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	return s, url
}

// The suite runs with secrets sealed, as a server keeps them.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		k, err := sealed.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		keys, err := sealed.NewKeyring(k)
		if err != nil {
			t.Fatal(err)
		}
		s, err := Open(t.Context(), pgtest.Shared(t).Database(t), WithKeyring(keys))
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	})
}

// sealedDB is one database for storetest.RunSealed; the raw column is read
// and written over a connection of its own, past the store.
type sealedDB struct{ url string }

func (d sealedDB) Open(t *testing.T, keys *sealed.Keyring) (store.Store, error) {
	return Open(t.Context(), d.url, WithKeyring(keys))
}

func (d sealedDB) conn(t *testing.T) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(t.Context(), d.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func (d sealedDB) RawSecrets(t *testing.T, id string) string {
	t.Helper()
	var v string
	if err := d.conn(t).QueryRow(t.Context(), `SELECT secrets_json FROM sessions WHERE id = $1`, id).Scan(&v); err != nil {
		t.Fatalf("read raw secrets of %s: %v", id, err)
	}
	return v
}

func (d sealedDB) SetRawSecrets(t *testing.T, id, text string) {
	t.Helper()
	if _, err := d.conn(t).Exec(t.Context(), `UPDATE sessions SET secrets_json = $1 WHERE id = $2`, text, id); err != nil {
		t.Fatalf("write raw secrets of %s: %v", id, err)
	}
}

func (d sealedDB) RawOutpostSecret(t *testing.T, outpostID, name string) string {
	t.Helper()
	var v string
	if err := d.conn(t).QueryRow(t.Context(), `SELECT value FROM outpost_secrets WHERE outpost_id = $1 AND name = $2`, outpostID, name).Scan(&v); err != nil {
		t.Fatalf("read raw secret %s of %s: %v", name, outpostID, err)
	}
	return v
}

func (d sealedDB) SetRawOutpostSecret(t *testing.T, outpostID, name, text string) {
	t.Helper()
	if _, err := d.conn(t).Exec(t.Context(), `UPDATE outpost_secrets SET value = $1 WHERE outpost_id = $2 AND name = $3`, text, outpostID, name); err != nil {
		t.Fatalf("write raw secret %s of %s: %v", name, outpostID, err)
	}
}

func TestSealed(t *testing.T) {
	storetest.RunSealed(t, func(t *testing.T) storetest.SealedDB {
		return sealedDB{url: pgtest.Shared(t).Database(t)}
	})
}

func TestReopen(t *testing.T) {
	s, url := openTemp(t)
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
	s.Close()

	s, err = Open(t.Context(), url)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if len(s.migrated) != 0 {
		t.Errorf("reopen applied migrations %v", s.migrated)
	}
	var recorded int
	if err := s.pool.QueryRow(t.Context(), `SELECT COUNT(*) FROM schema_migrations`).Scan(&recorded); err != nil {
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

// TestConcurrentOpen starts several stores on one new database at once:
// the migrations apply once, and every Open succeeds.
func TestConcurrentOpen(t *testing.T) {
	url := pgtest.Shared(t).Database(t)
	const n = 6
	stores := make([]*Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = Open(t.Context(), url) })
	}
	wg.Wait()
	applied := 0
	for i := range n {
		if errs[i] != nil {
			t.Errorf("Open %d: %v", i, errs[i])
			continue
		}
		applied += len(stores[i].migrated)
		stores[i].Close()
	}
	all, _ := migrations()
	if applied != len(all) {
		t.Errorf("%d migrations applied across concurrent opens, want %d", applied, len(all))
	}
}

func TestNewerSchema(t *testing.T) {
	s, url := openTemp(t)
	if _, err := s.pool.Exec(t.Context(), `INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_future', 0)`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err := Open(t.Context(), url)
	if err == nil {
		s.Close()
		t.Fatal("Open of a database from a newer version succeeded")
	}
	if !strings.Contains(err.Error(), "newer version") {
		t.Errorf("error %q does not say the database is newer", err)
	}
}

// TestUnreachable checks the error names the host and port and the
// driver's reason, and never the password.
func TestUnreachable(t *testing.T) {
	ln, err := newClosedPort()
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("postgres://alice:hunter2secret@127.0.0.1:%d/outpost?sslmode=disable&connect_timeout=5", ln)
	_, err = Open(t.Context(), url)
	if err == nil {
		t.Fatal("Open of an unreachable database succeeded")
	}
	msg := err.Error()
	for _, want := range []string{fmt.Sprintf("127.0.0.1:%d", ln), "refused", `"outpost"`, `"alice"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	if strings.Contains(msg, "hunter2secret") {
		t.Errorf("error %q shows the password", msg)
	}
	_, err = Open(t.Context(), "postgres://alice:hunter2secret@127.0.0.1:notaport/outpost")
	if err == nil || strings.Contains(err.Error(), "hunter2secret") {
		t.Errorf("Open of a bad URL: %v", err)
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
	if _, err := s.GetOutpost(t.Context(), "op"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("canceled CreateOutpost: get = %v, want not found", err)
	}
}

// TestCrash crashes the server (immediate shutdown, no checkpoint) while a
// writer commits outposts, restarts it, and checks every acknowledged write
// survived the WAL replay. The server runs with fsync on.
func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own PostgreSQL server")
	}
	srv := pgtest.StartT(t, pgtest.Options{Fsync: true})
	url := srv.Database(t)
	s, err := Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	acked := -1
	done := make(chan struct{})
	crashed := make(chan error, 1)
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			if err := s.CreateOutpost(context.Background(), store.Outpost{ID: fmt.Sprint("op", i), Name: fmt.Sprint("n", i)}); err != nil {
				return // the server is gone
			}
			acked = i
			if i == 200 {
				go func() { crashed <- srv.Crash() }()
			}
		}
	}()
	<-done
	s.Close()
	if acked < 200 {
		t.Fatalf("only %d writes acknowledged before the crash", acked+1)
	}
	// The writer stops at the first failed write, which can come before
	// the postmaster has exited: restart only once it has.
	if err := <-crashed; err != nil {
		t.Fatalf("crash: %v", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatalf("restart after crash: %v", err)
	}
	s, err = Open(t.Context(), url)
	if err != nil {
		t.Fatalf("open after crash: %v", err)
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
	t.Logf("%d writes acknowledged before the crash, %d rows after recovery", acked+1, len(list))
}

// TestRevsCommitOrder races writers against a watcher that follows the
// queue by rev cursor, as queue watches do: were a rev visible before a
// smaller one committed, the cursor would pass the smaller one and the
// watcher would miss that entry's last write.
func TestRevsCommitOrder(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	const sessions, writers, each = 40, 16, 25
	for i := range sessions {
		e := &store.QueueEntry{OutpostID: "op", Phase: api.PhasePending}
		if err := s.CreateSession(t.Context(), store.Session{ID: fmt.Sprint("s", i), OutpostID: "op"}, e, nil); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[int64]string{}
	var cursor int64
	poll := func() {
		got, _, err := s.ListQueue(t.Context(), store.QueueFilter{AfterRev: cursor, IncludeDeleted: true})
		if err != nil {
			t.Error(err)
			return
		}
		for _, e := range got {
			seen[e.Rev] = e.SessionID
			cursor = e.Rev
		}
	}
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			default:
				poll()
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for j := range each {
				id := fmt.Sprint("s", (w*7+j)%sessions)
				if _, err := s.UpdateSession(t.Context(), id, func(_ store.Session, e store.QueueEntry) (store.Mutation, error) {
					e.Epoch++
					return store.Mutation{Entry: &e, Events: []api.Event{{Type: api.EventStatus}}}, nil
				}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-watched
	poll()
	for i := range sessions {
		e, err := s.GetQueueEntry(t.Context(), fmt.Sprint("s", i))
		if err != nil {
			t.Fatal(err)
		}
		if seen[e.Rev] != e.SessionID {
			t.Errorf("the watcher missed rev %d of %s (cursor %d)", e.Rev, e.SessionID, cursor)
		}
	}
}
