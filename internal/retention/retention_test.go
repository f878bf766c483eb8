package retention_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/blob"
	"github.com/outpost-sh/outpost/internal/deptest"
	"github.com/outpost-sh/outpost/internal/retention"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlite"
)

var t0 = time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)

// session creates a session of outpost o1, ended at ended unless nil.
func session(t *testing.T, st *sqlite.Store, id string, ended *time.Time) {
	t.Helper()
	ctx := t.Context()
	sess := store.Session{ID: id, OutpostID: "o1", Status: api.StatusNew, CreatedAt: t0, UpdatedAt: t0}
	e := &store.QueueEntry{SessionID: id, OutpostID: "o1", Kind: api.KindNew, Platform: api.PlatformLinux, Phase: api.PhasePending,
		SessionStatus: api.QueueSessionPending, Epoch: 1, CreatedAt: t0, UpdatedAt: t0}
	if err := st.CreateSession(ctx, sess, e, nil); err != nil {
		t.Fatal(err)
	}
	if ended == nil {
		return
	}
	if _, err := st.UpdateSession(ctx, id, func(s store.Session, _ store.QueueEntry) (store.Mutation, error) {
		s.Status, s.UpdatedAt, s.EndedAt = api.StatusExit, *ended, ended
		return store.Mutation{Session: &s}, nil
	}); err != nil {
		t.Fatal(err)
	}
}

func put(t *testing.T, b blob.Store, key, data string) {
	t.Helper()
	if _, _, err := b.Put(t.Context(), key, strings.NewReader(data), 1<<20); err != nil {
		t.Fatal(err)
	}
}

func keys(t *testing.T, b blob.Store, prefix string) []string {
	t.Helper()
	infos, err := b.List(t.Context(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, in := range infos {
		out = append(out, in.Key)
	}
	return out
}

// TestSweep: a sweep deletes the artifacts, their metadata and the
// spilled output of a session that ended before the retention, under its
// artifact lock, counts them, and marks the session so the next sweep
// finds nothing; a session that ended later, or runs, keeps its files.
func TestSweep(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "outpost.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.CreateOutpost(ctx, store.Outpost{ID: "o1", Name: "o1", Platform: api.PlatformLinux, CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	arts, out := blob.FS{Dir: t.TempDir()}, blob.FS{Dir: t.TempDir()}
	old, recent := t0.Add(time.Hour), t0.Add(47*time.Hour)
	session(t, st, "old", &old)
	session(t, st, "recent", &recent)
	session(t, st, "running", nil)
	for _, id := range []string{"old", "recent", "running"} {
		put(t, arts, id+"/a.txt", "12345")
		put(t, arts, id+"/.meta/a.txt.json", "{}")
		put(t, out, id+"/3", "spilled")
	}
	var locked []string
	var pruned []int
	sw := retention.New(retention.Options{Store: st, Artifacts: arts, Output: out, Retention: 24 * time.Hour,
		Now: func() time.Time { return t0.Add(48 * time.Hour) },
		Lock: func(_ context.Context, id string) (func(), error) {
			locked = append(locked, id)
			return func() {}, nil
		},
		Pruned: func(n int, _ int64) { pruned = append(pruned, n) }})
	stats, err := sw.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (retention.Stats{Sessions: 1, Artifacts: 1, Bytes: 7, Output: 7}); stats != want {
		t.Errorf("stats %+v, want %+v", stats, want)
	}
	if !slices.Equal(locked, []string{"old"}) || !slices.Equal(pruned, []int{1}) {
		t.Errorf("locked %q and counted %v, want the old session's lock and its one artifact", locked, pruned)
	}
	if k := append(keys(t, arts, "old/"), keys(t, out, "old/")...); len(k) != 0 {
		t.Errorf("the old session's files %q are still there", k)
	}
	for _, id := range []string{"recent", "running"} {
		if len(keys(t, arts, id+"/")) != 2 || len(keys(t, out, id+"/")) != 1 {
			t.Errorf("session %s lost files", id)
		}
	}
	if sess, err := st.GetSession(ctx, "old"); err != nil || sess.ArtifactsPrunedAt == nil {
		t.Errorf("the old session is not marked: %+v, %v", sess.ArtifactsPrunedAt, err)
	}
	if stats, err := sw.Sweep(ctx); err != nil || stats != (retention.Stats{}) {
		t.Errorf("a second sweep = %+v, %v, want nothing", stats, err)
	}
}

// TestZeroRetentionKeeps: without a retention nothing is swept and Run
// returns at once.
func TestZeroRetentionKeeps(t *testing.T) {
	t.Parallel()
	sw := retention.New(retention.Options{})
	if stats, err := sw.Sweep(t.Context()); err != nil || stats != (retention.Stats{}) {
		t.Fatalf("Sweep = %+v, %v", stats, err)
	}
	sw.Run(t.Context()) // would block until the test's end with a retention
}

// TestRetentionImportsNothingAbove: the sweep sits below the server, which
// runs it and counts what it deleted.
func TestRetentionImportsNothingAbove(t *testing.T) {
	t.Parallel()
	deptest.Check(t, "github.com/outpost-sh/outpost/internal/retention",
		deptest.Prefix("github.com/outpost-sh/outpost/internal/server", "the server runs the sweep"),
		deptest.Prefix("github.com/prometheus", "the server counts what the sweep deleted"),
	)
}
