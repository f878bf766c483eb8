package storetest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// fullSession returns a session with every field set.
func fullSession(id string) store.Session {
	return store.Session{
		ID:        id,
		OutpostID: "op",
		Spec: api.SessionSpec{
			Outpost: "op",
			Title:   "Fix the build",
			Prompt:  "make it green",
			Repos:   []api.Repo{{URL: "https://example.com/r.git", Name: "r", Ref: "main"}},
			Agent: api.Agent{Kind: api.AgentScript, StopOnError: ptr(false), Steps: []api.Step{
				{Tool: "shell", Args: json.RawMessage(`{"cmd":"make test"}`), ContinueOnError: true},
			}},
			Env:         map[string]string{"GOFLAGS": "-mod=mod"},
			SecretNames: []string{"TOKEN"},
			Limits:      api.Limits{MaxDurationS: 3600},
		},
		Secrets:      map[string]string{"TOKEN": "s3cr3t"},
		Status:       api.StatusRunning,
		StatusDetail: api.DetailWorking,
		Reason:       "running",
		LastSeq:      7,
		Usage:        api.Usage{PromptTokens: 1200, CompletionTokens: 340, ModelCalls: 3},
		Capabilities: &api.Capabilities{OS: "linux", Arch: "amd64", CPUs: 8, MemoryBytes: 1 << 34,
			Hostname: "h", Git: "2.45", Tools: []string{"shell", "read"}, RemoteVersion: "1.2.3"},
		CreatedAt: base,
		UpdatedAt: at(time.Minute),
		StartedAt: ptr(at(time.Second)),
		EndedAt:   ptr(at(2 * time.Minute)),
	}
}

func testSessionRoundTrip(t *testing.T, s store.Store) {
	full := fullSession("full")
	bare := newSession("min", "op", "", 0) // nil secrets, capabilities and times
	for _, sess := range []store.Session{full, bare} {
		must(t, "create "+sess.ID, s.CreateSession(ctx(t), sess, newEntry(sess), nil))
		got, err := s.GetSession(ctx(t), sess.ID)
		must(t, "get "+sess.ID, err)
		equal(t, "session "+sess.ID, got, sess)
	}
	_, err := s.GetSession(ctx(t), "nope")
	wantErr(t, "get missing", err, store.ErrNotFound)
	wantErr(t, "create duplicate", s.CreateSession(ctx(t), bare, newEntry(bare), nil), store.ErrConflict)
}

func testCreateSessionAssigns(t *testing.T, s store.Store) {
	sess := newSession("s1", "op", "t", 0)
	e := newEntry(sess)
	e.SessionID = "" // the store binds the entry to the session
	events := []api.Event{
		{Time: 1, Type: api.EventStatus, Status: api.StatusNew},
		{Time: 2, Type: api.EventStatus, Status: api.StatusNew, Reason: "queued"},
	}
	must(t, "create", s.CreateSession(ctx(t), sess, e, events))
	if e.Rev <= 0 || e.SessionID != "s1" {
		t.Errorf("entry after create: rev %d, session %q; want rev > 0, session s1", e.Rev, e.SessionID)
	}
	for i, ev := range events {
		if ev.Seq != int64(i+1) || ev.SessionID != "s1" {
			t.Errorf("event %d after create: seq %d, session %q", i, ev.Seq, ev.SessionID)
		}
	}
	got, err := s.GetQueueEntry(ctx(t), "s1")
	must(t, "get entry", err)
	equal(t, "entry", got, *e)
	evs, err := s.ListEvents(ctx(t), "s1", 0, 0)
	must(t, "list events", err)
	equal(t, "events", evs, events)
	rev, err := s.MaxRev(ctx(t))
	must(t, "max rev", err)
	if rev != e.Rev {
		t.Errorf("MaxRev = %d, want %d", rev, e.Rev)
	}
	_, err = s.GetQueueEntry(ctx(t), "nope")
	wantErr(t, "get missing entry", err, store.ErrNotFound)
}

func testListSessions(t *testing.T, s store.Store) {
	type spec struct {
		id, outpost, status, title string
		d                          time.Duration
	}
	// Listed newest first; c1 and c2 share a creation time, so id breaks the tie.
	specs := []spec{
		{"g", "op1", api.StatusRunning, "Refactor store", 5 * time.Minute},
		{"c2", "op2", api.StatusExit, "fix flaky TEST", 4 * time.Minute},
		{"c1", "op1", api.StatusExit, "Prefix handling", 4 * time.Minute},
		{"e", "op1", api.StatusNew, "Écrire la doc", 3 * time.Minute},
		{"b", "op2", api.StatusRunning, "", 2 * time.Minute},
		{"a", "op1", api.StatusNew, "FIX lint", time.Minute},
		{"z", "op1", api.StatusError, "old", 0},
	}
	var all []store.Session
	for _, sp := range specs {
		sess := newSession(sp.id, sp.outpost, sp.title, sp.d)
		sess.Status = sp.status
		if sp.id == "c1" || sp.id == "b" {
			sess.Worker = "worker-1"
		}
		if sp.id == "e" || sp.id == "a" {
			sess.Spec.ForkedFrom = "g"
		}
		create(t, s, sess)
		all = append(all, sess)
	}
	pick := func(ids ...string) []store.Session {
		var out []store.Session
		for _, id := range ids {
			for _, sess := range all {
				if sess.ID == id {
					out = append(out, sess)
				}
			}
		}
		return out
	}
	for _, tc := range []struct {
		f     store.SessionFilter
		ids   []string
		total int
	}{
		{store.SessionFilter{}, []string{"g", "c2", "c1", "e", "b", "a", "z"}, 7},
		{store.SessionFilter{OutpostID: "op2"}, []string{"c2", "b"}, 2},
		{store.SessionFilter{Status: api.StatusExit}, []string{"c2", "c1"}, 2},
		{store.SessionFilter{OutpostID: "op1", Status: api.StatusNew}, []string{"e", "a"}, 2},
		{store.SessionFilter{Title: "fix"}, []string{"c2", "c1", "a"}, 3},
		{store.SessionFilter{Title: "FIX", OutpostID: "op1"}, []string{"c1", "a"}, 2},
		{store.SessionFilter{Title: "écrire"}, []string{"e"}, 1},
		{store.SessionFilter{Title: "nothing"}, nil, 0},
		{store.SessionFilter{Worker: "worker-1"}, []string{"c1", "b"}, 2},
		{store.SessionFilter{Worker: "worker-1", OutpostID: "op2"}, []string{"b"}, 1},
		{store.SessionFilter{Worker: "worker-2"}, nil, 0},
		{store.SessionFilter{ForkedFrom: "g"}, []string{"e", "a"}, 2},
		{store.SessionFilter{ForkedFrom: "g", Status: api.StatusNew, OutpostID: "op2"}, nil, 0},
		{store.SessionFilter{ForkedFrom: "a"}, nil, 0},
		{store.SessionFilter{Limit: 2}, []string{"g", "c2"}, 7},
		{store.SessionFilter{BeforeCreated: at(4 * time.Minute), BeforeID: "c2"}, []string{"c1", "e", "b", "a", "z"}, 7},
		{store.SessionFilter{BeforeCreated: at(4 * time.Minute), BeforeID: "c1", Limit: 2}, []string{"e", "b"}, 7},
		{store.SessionFilter{BeforeCreated: at(3 * time.Minute), Title: "fix"}, []string{"a"}, 3},
	} {
		got, total, err := s.ListSessions(ctx(t), tc.f)
		what := fmt.Sprintf("ListSessions(%+v)", tc.f)
		must(t, what, err)
		equal(t, what, got, pick(tc.ids...))
		if total != tc.total {
			t.Errorf("%s total = %d, want %d", what, total, tc.total)
		}
	}

	// Keyset paging visits every session once, in order.
	var paged []store.Session
	f := store.SessionFilter{Limit: 3}
	for range len(all) {
		page, total, err := s.ListSessions(ctx(t), f)
		must(t, "page", err)
		if total != len(all) {
			t.Errorf("page total = %d, want %d", total, len(all))
		}
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		last := page[len(page)-1]
		f.BeforeCreated, f.BeforeID = last.CreatedAt, last.ID
	}
	equal(t, "paged", paged, all)
}
