package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/audit"
	"github.com/outpost-sh/outpost/internal/store"
)

// entry is an audit entry of action by actor at base+d.
func entry(action, actor string, d time.Duration) *audit.Entry {
	return &audit.Entry{CreatedAt: at(d), Action: action, Actor: audit.Actor{Kind: audit.ActorToken, ID: actor, Name: actor + "-name"},
		SourceIP: "127.0.0.1", Object: audit.Object{Kind: audit.ObjectToken, ID: "t-" + action}, Data: json.RawMessage(`{"k":"v"}`)}
}

// auditTotal is the number of entries in s's log.
func auditTotal(t *testing.T, s store.Store) int {
	t.Helper()
	_, n, err := s.ListAudit(ctx(t), store.AuditFilter{})
	must(t, "list audit", err)
	return n
}

// wantVerified fails t unless s's chain holds.
func wantVerified(t *testing.T, s store.Store, what string) {
	t.Helper()
	v, err := s.VerifyAudit(ctx(t))
	must(t, what+": verify", err)
	if !v.OK {
		t.Errorf("%s: chain does not hold: %+v", what, v)
	}
}

// testAuditInTransaction checks that an entry a context carries commits
// with the change it records and only then: every write path appends it,
// a change that fails or changes nothing leaves none, and one entry is
// written once however many writes its context then makes.
func testAuditInTransaction(t *testing.T, s store.Store) {
	wantVerified(t, s, "empty log")
	e := entry(audit.TokenCreate, "t-admin", 0)
	c := audit.With(ctx(t), e)
	must(t, "create token", s.CreateToken(c, store.Token{ID: "t-a", Name: "a", Hash: "ha", Scopes: []string{}, CreatedAt: base}))
	if !audit.Committed(c) || e.ID != "audit-1" || e.Hash == "" {
		t.Fatalf("entry after its change: committed %v, %+v", audit.Committed(c), e)
	}
	// The same context writing again adds nothing.
	must(t, "second write, same context", s.CreateToken(c, store.Token{ID: "t-b", Name: "b", Hash: "hb", Scopes: []string{}, CreatedAt: base}))
	got, n, err := s.ListAudit(ctx(t), store.AuditFilter{})
	must(t, "list", err)
	if n != 1 || len(got) != 1 {
		t.Fatalf("entries after two writes of one context: %d", n)
	}
	equal(t, "stored entry", got[0], *e)

	// Changes that fail leave no entry, on every kind of write path.
	failures := []struct {
		what string
		fn   func(context.Context) error
	}{
		{"duplicate token (one statement)", func(c context.Context) error {
			return s.CreateToken(c, store.Token{ID: "t-a", Name: "a", Hash: "ha", CreatedAt: base})
		}},
		{"revoke missing token", func(c context.Context) error { return s.RevokeToken(c, "nope", base) }},
		{"limits of a missing outpost", func(c context.Context) error { return s.SetOutpostLimits(c, "nope", store.OutpostLimits{}) }},
		{"delete missing outpost", func(c context.Context) error { return s.DeleteOutpost(c, "nope") }},
		{"update whose fn fails", func(c context.Context) error {
			_, err := s.UpdateSession(c, "s1", func(store.Session, store.QueueEntry) (store.Mutation, error) { return store.Mutation{}, errBoom })
			return err
		}},
	}
	must(t, "create outpost", s.CreateOutpost(ctx(t), newOutpost("op", "linux")))
	create(t, s, newSession("s1", "op", "one", 0))
	failures = append(failures, struct {
		what string
		fn   func(context.Context) error
	}{"duplicate outpost name", func(c context.Context) error { return s.CreateOutpost(c, newOutpost("op2", "linux")) }})
	for _, f := range failures {
		c := audit.With(ctx(t), entry(audit.OutpostUpdate, "t-admin", time.Minute))
		if err := f.fn(c); err == nil {
			t.Errorf("%s: no error", f.what)
		}
		if audit.Committed(c) {
			t.Errorf("%s: entry committed", f.what)
		}
	}
	if n := auditTotal(t, s); n != 1 {
		t.Errorf("entries after failed changes: %d, want 1", n)
	}

	// Each successful kind of write has its entry.
	successes := []struct {
		what string
		fn   func(context.Context) error
	}{
		{"create outpost", func(c context.Context) error { return s.CreateOutpost(c, newOutpost("op3", "mac")) }},
		{"outpost limits", func(c context.Context) error {
			return s.SetOutpostLimits(c, "op3", store.OutpostLimits{MaxRunning: 2})
		}},
		{"delete outpost", func(c context.Context) error { return s.DeleteOutpost(c, "op3") }},
		{"revoke token", func(c context.Context) error { return s.RevokeToken(c, "t-a", at(time.Hour)) }},
		{"create session", func(c context.Context) error {
			sess := newSession("s2", "op", "two", time.Second)
			return s.CreateSession(c, sess, newEntry(sess), []api.Event{{Type: api.EventStatus}})
		}},
		{"update session", func(c context.Context) error {
			_, err := s.UpdateSession(c, "s2", func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
				sess.Status = api.StatusExit
				return store.Mutation{Session: &sess}, nil
			})
			return err
		}},
		{"record alone", s.RecordAudit},
	}
	for i, f := range successes {
		e := entry(fmt.Sprintf("action.%d", i), "t-admin", time.Duration(i)*time.Second)
		c := audit.With(ctx(t), e)
		must(t, f.what, f.fn(c))
		if !audit.Committed(c) {
			t.Errorf("%s: entry not committed", f.what)
		}
		if want := audit.IDFor(int64(i + 2)); e.ID != want {
			t.Errorf("%s: entry id %s, want %s", f.what, e.ID, want)
		}
	}
	if n := auditTotal(t, s); n != 1+len(successes) {
		t.Errorf("entries after %d changes: %d", len(successes), n)
	}
	if err := s.RecordAudit(ctx(t)); err == nil {
		t.Error("RecordAudit without an entry: no error")
	}
	bad := entry(audit.Login, "x", 0)
	bad.Data = json.RawMessage(`{not json`)
	if err := s.RecordAudit(audit.With(ctx(t), bad)); err == nil {
		t.Error("entry with invalid data: no error")
	}
	wantVerified(t, s, "after changes")
}

// testAuditList checks paging (newest first, a cursor), filters and the
// total.
func testAuditList(t *testing.T, s store.Store) {
	type spec struct {
		action, actor string
		d             time.Duration
	}
	specs := []spec{
		{audit.Login, "alice", 0}, {audit.TokenCreate, "alice", time.Hour}, {audit.TokenRevoke, "bob", 2 * time.Hour},
		{audit.TokenCreate, "bob", 3 * time.Hour}, {audit.Login, "bob", 4 * time.Hour},
	}
	for _, sp := range specs {
		must(t, "record", s.RecordAudit(audit.With(ctx(t), entry(sp.action, sp.actor, sp.d))))
	}
	ids := func(es []audit.Entry) []string {
		out := []string{}
		for _, e := range es {
			out = append(out, e.ID)
		}
		return out
	}
	page, n, err := s.ListAudit(ctx(t), store.AuditFilter{Limit: 2})
	must(t, "page 1", err)
	equal(t, "page 1", ids(page), []string{"audit-5", "audit-4"})
	equal(t, "total", n, 5)
	page, n, err = s.ListAudit(ctx(t), store.AuditFilter{Limit: 2, Before: page[1].Seq})
	must(t, "page 2", err)
	equal(t, "page 2", ids(page), []string{"audit-3", "audit-2"})
	equal(t, "total with cursor", n, 5)
	page, _, err = s.ListAudit(ctx(t), store.AuditFilter{Limit: 2, Before: 2})
	must(t, "page 3", err)
	equal(t, "page 3", ids(page), []string{"audit-1"})

	page, n, err = s.ListAudit(ctx(t), store.AuditFilter{Action: audit.TokenCreate})
	must(t, "by action", err)
	equal(t, "by action", ids(page), []string{"audit-4", "audit-2"})
	equal(t, "by action total", n, 2)
	page, _, err = s.ListAudit(ctx(t), store.AuditFilter{Actor: "bob"})
	must(t, "by actor id", err)
	equal(t, "by actor id", ids(page), []string{"audit-5", "audit-4", "audit-3"})
	page, _, err = s.ListAudit(ctx(t), store.AuditFilter{Actor: "alice-name"})
	must(t, "by actor name", err)
	equal(t, "by actor name", ids(page), []string{"audit-2", "audit-1"})
	page, n, err = s.ListAudit(ctx(t), store.AuditFilter{TimeAfter: at(time.Hour), TimeBefore: at(3 * time.Hour)})
	must(t, "by window", err)
	equal(t, "by window", ids(page), []string{"audit-3", "audit-2"})
	equal(t, "by window total", n, 2)
}

// testAuditPrune checks retention: the oldest entries go, the chain still
// verifies from its anchor, and appends continue it.
func testAuditPrune(t *testing.T, s store.Store) {
	for i := range 5 {
		must(t, "record", s.RecordAudit(audit.With(ctx(t), entry(audit.Login, "alice", time.Duration(i)*time.Hour))))
	}
	n, err := s.PruneAudit(ctx(t), at(2*time.Hour+time.Second), 0)
	must(t, "prune", err)
	equal(t, "pruned", n, 3)
	wantVerified(t, s, "after prune")
	n, err = s.PruneAudit(ctx(t), at(10*time.Hour), 1)
	must(t, "prune one", err)
	equal(t, "pruned with limit 1", n, 1)
	wantVerified(t, s, "after prune of one")
	n, err = s.PruneAudit(ctx(t), at(-time.Hour), 0)
	must(t, "prune none", err)
	equal(t, "pruned none", n, 0)
	must(t, "record after prune", s.RecordAudit(audit.With(ctx(t), entry(audit.Login, "bob", 5*time.Hour))))
	wantVerified(t, s, "append after prune")
	n, err = s.PruneAudit(ctx(t), at(10*time.Hour), 0)
	must(t, "prune all", err)
	equal(t, "pruned all", n, 2)
	wantVerified(t, s, "empty after prune")
	must(t, "record after emptying", s.RecordAudit(audit.With(ctx(t), entry(audit.Login, "bob", 6*time.Hour))))
	wantVerified(t, s, "append after emptying")
	page, total, err := s.ListAudit(ctx(t), store.AuditFilter{})
	must(t, "list", err)
	if total != 1 || page[0].ID != "audit-7" {
		t.Errorf("after pruning all and one append: %d entries, first %+v", total, page)
	}
}

// testAuditConcurrent checks that concurrent appends serialise into one
// chain without gaps.
func testAuditConcurrent(t *testing.T, s store.Store) {
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			c := audit.With(ctx(t), entry(audit.Login, fmt.Sprintf("w%d", i), time.Duration(i)*time.Second))
			errs <- s.RecordAudit(c)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, "concurrent record", err)
	}
	equal(t, "entries", auditTotal(t, s), n)
	wantVerified(t, s, "after concurrent appends")
}

// AuditDB is one database for RunAudit, whose rows a test may change past
// the store, as someone with access to the database could.
type AuditDB interface {
	// Open opens the database.
	Open(t *testing.T) (store.Store, error)
	// Exec runs a statement on the database directly.
	Exec(t *testing.T, q string, args ...any)
}

// RunAudit runs the tamper-evidence suite: verify names the first entry
// that does not hold when a row was edited or removed. newDB must return a
// new, empty database each time it is called.
func RunAudit(t *testing.T, newDB func(t *testing.T) AuditDB) {
	tests := []struct {
		name   string
		tamper string
		bad    string
	}{
		{"EditedRow", `UPDATE audit_log SET actor_name = 'mallory' WHERE seq = 3`, "audit-3"},
		{"EditedData", `UPDATE audit_log SET data_json = '{"k":"w"}' WHERE seq = 2`, "audit-2"},
		{"DeletedMiddleRow", `DELETE FROM audit_log WHERE seq = 3`, "audit-4"},
		{"DeletedLastRow", `DELETE FROM audit_log WHERE seq = 5`, "audit-5"},
		{"ForgedAnchor", `UPDATE audit_chain SET anchor_seq = 2, anchor_hash = 'x'`, "audit-3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := newDB(t)
			s, err := db.Open(t)
			must(t, "open", err)
			t.Cleanup(func() { s.Close() })
			for i := range 5 {
				must(t, "record", s.RecordAudit(audit.With(ctx(t), entry(audit.Login, "alice", time.Duration(i)*time.Hour))))
			}
			wantVerified(t, s, "before tampering")
			db.Exec(t, tc.tamper)
			v, err := s.VerifyAudit(ctx(t))
			must(t, "verify", err)
			if v.OK || v.FirstBad != tc.bad || v.Reason == "" {
				t.Errorf("verify after %q = %+v, want first bad %s", tc.tamper, v, tc.bad)
			}
		})
	}
}
