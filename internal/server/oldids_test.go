package server

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/datadir"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/postgres"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
	"github.com/outpost-sh/outpost/internal/store/sqlite"
)

// oldIDs is what a database holds in the id shapes minted before
// "devin-…" and "outpost_env-…": an outpost named legacy, its sessions
// (oldest first) and the secret of a machine token limited to it.
type oldIDs struct {
	OutpostID    string   `json:"outpost_id"`
	SessionIDs   []string `json:"session_ids"`
	MachineToken string   `json:"machine_token"`
}

// The secret key and admin token the databases of testdata/olddb were
// written with.
var (
	oldDBKey   = bytes.Repeat([]byte{7}, 32)
	oldDBAdmin = "opt_olddbfixtureadmin"
)

// loadOldDump returns the ids of testdata/olddb/fixture.json for dialect.
func loadOldDump(t *testing.T, dialect string) oldIDs {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "olddb", "fixture.json"))
	if err != nil {
		t.Fatal(err)
	}
	var all map[string]oldIDs
	if err := json.Unmarshal(raw, &all); err != nil {
		t.Fatal(err)
	}
	return all[dialect]
}

// readDump reads testdata/olddb/name without psql's meta-commands (lines
// starting with a backslash), which are no SQL.
func readDump(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "olddb", name))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for line := range strings.Lines(string(raw)) {
		if !strings.HasPrefix(line, `\`) {
			b.WriteString(line)
		}
	}
	return b.String()
}

// restoreSQLite writes the SQLite dump into a new database file of a new
// data directory and returns the directory.
func restoreSQLite(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	db, err := sql.Open("sqlite", filepath.Join(dir, datadir.Database))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), readDump(t, "sqlite.sql")); err != nil {
		t.Fatalf("restore sqlite.sql: %v", err)
	}
	return dir
}

// restorePostgres writes the PostgreSQL dump into a new database and
// returns its URL. One connection runs it all: the dump empties its
// search_path.
func restorePostgres(t *testing.T) string {
	t.Helper()
	dbURL := pgtest.Shared(t).Database(t)
	c, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(t.Context(), readDump(t, "postgres.sql")); err != nil {
		t.Fatalf("restore postgres.sql: %v", err)
	}
	return dbURL
}

// seedOldIDs writes, through the store, an outpost, three sessions and a
// machine token with explicit ids of the old shapes, created an hour ago.
func seedOldIDs(t *testing.T, st store.Store) oldIDs {
	t.Helper()
	ctx := t.Context()
	defer st.Close()
	ids := oldIDs{OutpostID: "outpost_abcdefghij23", SessionIDs: []string{"ses_abcdefghij23", "ses_abcdefghij24", "ses_abcdefghij25"},
		MachineToken: "opt_oldshapedmachinetoken"}
	then := time.Now().Add(-time.Hour).Truncate(time.Millisecond).UTC()
	if err := st.CreateOutpost(ctx, store.Outpost{ID: ids.OutpostID, Name: "legacy", Platform: api.PlatformLinux, CreatedAt: then}); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids.SessionIDs {
		at := then.Add(time.Duration(i) * time.Second)
		sess := store.Session{ID: id, OutpostID: ids.OutpostID, Status: api.StatusNew, Reason: "Waiting in the queue of outpost legacy.",
			Spec: api.SessionSpec{Outpost: "legacy", Title: "old", Agent: api.Agent{Kind: api.AgentScript,
				Steps: []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"true"}`)}}}},
			CreatedAt: at, UpdatedAt: at}
		e := &store.QueueEntry{SessionID: id, OutpostID: ids.OutpostID, Kind: api.KindNew, Platform: api.PlatformLinux,
			Phase: api.PhasePending, SessionStatus: api.QueueSessionPending, CreatedAt: at, UpdatedAt: at, MaxAttempts: api.DefaultMaxAttempts}
		if err := st.CreateSession(ctx, sess, e, []api.Event{lifecycle.StatusEvent(sess, at)}); err != nil {
			t.Fatal(err)
		}
	}
	tok := store.Token{ID: "tok_abcdefghij23", Name: "legacy-machines", Hash: hashSecret(ids.MachineToken),
		Scopes: []string{api.ScopeMachine}, OutpostID: ids.OutpostID, CreatedAt: then}
	if err := st.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestOldDatabase starts today's server on databases that hold ids of the
// shapes minted before "devin-…" and "outpost_env-…" — made by the
// previous release (testdata/olddb, migrated on open) and written through
// the store with explicit old ids — on SQLite and PostgreSQL, and checks
// that the old ids work everywhere next to new ones.
func TestOldDatabase(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		open func(t *testing.T) (Options, oldIDs)
	}{
		{"sqlite/previous-release", func(t *testing.T) (Options, oldIDs) {
			return Options{DataDir: restoreSQLite(t)}, loadOldDump(t, "sqlite")
		}},
		{"postgres/previous-release", func(t *testing.T) (Options, oldIDs) {
			return Options{DatabaseURL: restorePostgres(t)}, loadOldDump(t, "postgres")
		}},
		{"sqlite/store", func(t *testing.T) (Options, oldIDs) {
			dir := t.TempDir()
			st, err := sqlite.Open(t.Context(), filepath.Join(dir, datadir.Database))
			if err != nil {
				t.Fatal(err)
			}
			return Options{DataDir: dir}, seedOldIDs(t, st)
		}},
		{"postgres/store", func(t *testing.T) (Options, oldIDs) {
			dbURL := pgtest.Shared(t).Database(t)
			st, err := postgres.Open(t.Context(), dbURL)
			if err != nil {
				t.Fatal(err)
			}
			return Options{DatabaseURL: dbURL}, seedOldIDs(t, st)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts, old := tc.open(t)
			opts.SecretKey, opts.AdminToken = oldDBKey, oldDBAdmin
			checkOldIDs(t, startServer(t, opts), old)
		})
	}
}

// checkOldIDs checks the old ids of a database through the API, next to
// new sessions created on the old outpost: get, list paging over both
// shapes, claim and release, and a watch from a list cursor.
func checkOldIDs(t *testing.T, ts *testServer, old oldIDs) {
	machine := old.MachineToken // limited to the old outpost
	var o api.Outpost
	ts.mustDo(200, "GET", "/v1/outposts/legacy", ts.admin, nil, &o)
	if o.Metadata.OutpostID != old.OutpostID {
		t.Fatalf("outpost legacy has id %q, want %q", o.Metadata.OutpostID, old.OutpostID)
	}
	ts.mustDo(200, "GET", "/opbeta/outposts/outposts/"+old.OutpostID, ts.admin, nil, nil)
	for _, id := range old.SessionIDs {
		var s api.Session
		ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &s)
		var e api.QueueEntry
		ts.mustDo(200, "GET", "/opbeta/outposts/devins/"+id, machine, nil, &e)
		if s.Metadata.SessionID != id || s.Metadata.OutpostID != old.OutpostID || e.Metadata.SessionID != id || e.Metadata.OutpostID != old.OutpostID {
			t.Errorf("session %s answers as %+v, its entry as %+v", id, s.Metadata, e.Metadata)
		}
	}

	// New sessions on the old outpost, named by its name and by its id.
	var fresh []string
	for _, ref := range []string{"legacy", old.OutpostID, "legacy"} {
		var s api.Session
		ts.mustDo(201, "POST", "/v1/sessions", ts.admin, map[string]any{"outpost": ref, "title": "new",
			"agent": map[string]any{"kind": "script", "steps": []any{map[string]any{"tool": "exec", "args": map[string]any{"command": "true"}}}}}, &s)
		if !sessionIDShape.MatchString(s.Metadata.SessionID) || s.Metadata.OutpostID != old.OutpostID {
			t.Fatalf("new session %q of outpost %q", s.Metadata.SessionID, s.Metadata.OutpostID)
		}
		fresh = append(fresh, s.Metadata.SessionID)
		// Lists order by creation time, then id: a millisecond apart, the
		// creation order is the listed one.
		time.Sleep(2 * time.Millisecond)
	}
	all := append(slices.Clone(old.SessionIDs), fresh...)

	// The queue in pages of two: the changes' order, old and new mixed on
	// the middle page.
	var listed []string
	mixed := false
	q := url.Values{"outpost": {old.OutpostID}, "first": {"2"}}
	var cursor string
	for range 10 {
		var page api.QueueList
		ts.mustDo(200, "GET", "/opbeta/outposts/devins?"+q.Encode(), machine, nil, &page)
		if page.Total != len(all) || len(page.Items) > 2 {
			t.Fatalf("queue page of %d items, total %d; want at most 2 of %d", len(page.Items), page.Total, len(all))
		}
		shapes := map[bool]bool{}
		for _, e := range page.Items {
			if !slices.Contains(listed, e.Metadata.SessionID) {
				listed = append(listed, e.Metadata.SessionID)
			}
			shapes[sessionIDShape.MatchString(e.Metadata.SessionID)] = true
		}
		mixed = mixed || len(shapes) == 2
		cursor = page.Cursor
		if !page.HasNextPage {
			break
		}
		q.Set("cursor", page.Cursor)
	}
	if !slices.Equal(listed, all) || !mixed {
		t.Errorf("queue pages listed %v (a page of both shapes: %t), want %v", listed, mixed, all)
	}

	// The sessions list in pages of two, newest first.
	listed = nil
	q = url.Values{"outpost": {old.OutpostID}, "first": {"2"}}
	for range 10 {
		var page api.SessionList
		ts.mustDo(200, "GET", "/v1/sessions?"+q.Encode(), ts.admin, nil, &page)
		for _, s := range page.Items {
			listed = append(listed, s.Metadata.SessionID)
		}
		if !page.HasNextPage {
			break
		}
		q.Set("cursor", page.Cursor)
	}
	newestFirst := slices.Clone(all)
	slices.Reverse(newestFirst)
	if !slices.Equal(listed, newestFirst) {
		t.Errorf("session pages listed %v, want %v", listed, newestFirst)
	}

	// A claim and a release of an old session, seen by a watch from the
	// list's cursor.
	lw := openWatch(t, ts, machine, "/opbeta/outposts/devins?watch=true&outpost="+url.QueryEscape(old.OutpostID)+"&cursor="+url.QueryEscape(cursor))
	target := old.SessionIDs[0]
	var claim api.QueueEntry
	ts.mustDo(200, "POST", "/opbeta/outposts/devins/"+target+"/claim", machine, api.ClaimRequest{AcceptorID: "old-db-worker"}, &claim)
	if claim.Status.ConnectToken == "" || claim.Metadata.SessionID != target {
		t.Fatalf("claim of %s answered %+v", target, claim)
	}
	ts.mustDo(409, "POST", "/opbeta/outposts/devins/"+target+"/claim", ts.admin, api.ClaimRequest{AcceptorID: "another"}, nil)
	// The stream shows an entry as it is when read, so the release waits
	// for the claim's event.
	wantEvent := func(phase string) {
		t.Helper()
		ev := lw.next(t)
		if ev.Type != api.WatchModified || ev.Object.Metadata.SessionID != target || ev.Object.Status.Phase != phase {
			t.Fatalf("watch event %s %s %s, want MODIFIED %s %s", ev.Type, ev.Object.Metadata.SessionID, ev.Object.Status.Phase, target, phase)
		}
	}
	wantEvent(api.PhaseClaimed)
	ts.mustDo(200, "POST", "/opbeta/outposts/devins/"+target+"/release", machine, api.ClaimRequest{AcceptorID: "old-db-worker"}, nil)
	wantEvent(api.PhasePending)
}
