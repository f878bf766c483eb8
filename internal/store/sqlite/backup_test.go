package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// TestSnapshotUnderWrites copies the database while a writer creates
// sessions (each with its queue entry and events, in one transaction): the
// copy passes its integrity check, opens, and holds every session committed
// before the copy began, each whole — a session never without its entry or
// its events.
func TestSnapshotUnderWrites(t *testing.T) {
	keys := testKeys(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "outpost.db")
	s, err := Open(t.Context(), path, WithKeyring(keys))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	ctx, stop := context.WithCancel(t.Context())
	var created atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			now := time.Now()
			sess := store.Session{ID: fmt.Sprint("s", i), OutpostID: "op", Status: api.StatusNew, CreatedAt: now, UpdatedAt: now,
				Secrets: map[string]string{"API_TOKEN": fmt.Sprint("value-", i)}}
			e := &store.QueueEntry{OutpostID: "op", Kind: api.KindNew, Platform: api.PlatformLinux, Phase: api.PhasePending}
			evs := []api.Event{{Type: api.EventStatus}, {Type: api.EventStatus}}
			if err := s.CreateSession(context.WithoutCancel(ctx), sess, e, evs); err != nil {
				t.Errorf("create session: %v", err)
				return
			}
			created.Add(1)
		}
	}()
	waitCreated := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for created.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("the writer created %d sessions in 30 s", created.Load())
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitCreated(20)
	before := created.Load()
	copyPath := filepath.Join(dir, "copy.db")
	if err := Snapshot(t.Context(), path, copyPath); err != nil {
		t.Fatal(err)
	}
	waitCreated(before + 20) // the writer went on during and after the copy
	stop()
	wg.Wait()

	info, err := Inspect(t.Context(), copyPath)
	if err != nil {
		t.Fatal(err)
	}
	if info.Sessions < int(before) || info.Sessions >= int(created.Load()) {
		t.Errorf("copy holds %d sessions; %d were committed before it began and %d at the end", info.Sessions, before, created.Load())
	}
	if len(info.Unknown) != 0 || !slices.Equal(info.SecretKeyIDs, []string{keys.ID()}) {
		t.Errorf("copy: unknown migrations %v, key ids %v (want [%s])", info.Unknown, info.SecretKeyIDs, keys.ID())
	}
	if _, err := os.Stat(copyPath + "-wal"); err == nil {
		t.Error("the copy left a -wal file")
	}
	c, err := Open(t.Context(), copyPath, WithKeyring(keys))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range info.Sessions {
		id := fmt.Sprint("s", i)
		sess, err := c.GetSession(t.Context(), id)
		if err != nil {
			t.Fatalf("session %s of %d in the copy: %v", id, info.Sessions, err)
		}
		if sess.Secrets["API_TOKEN"] != fmt.Sprint("value-", i) {
			t.Errorf("session %s: secret %q", id, sess.Secrets["API_TOKEN"])
		}
		if _, err := c.GetQueueEntry(t.Context(), id); err != nil {
			t.Errorf("session %s without its queue entry: %v", id, err)
		}
		if evs, err := c.ListEvents(t.Context(), id, 0, 0); err != nil || len(evs) != 2 {
			t.Errorf("session %s: %d events, %v; want 2", id, len(evs), err)
		}
	}
	if _, err := c.GetSession(t.Context(), fmt.Sprint("s", info.Sessions)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("session past the copy's count: %v", err)
	}
}

// TestSnapshotRefusals: no copy over an existing file, and no database is
// created where there is none.
func TestSnapshotRefusals(t *testing.T) {
	s, path := openTemp(t)
	s.Close()
	dst := filepath.Join(t.TempDir(), "copy.db")
	if err := os.WriteFile(dst, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Snapshot(t.Context(), path, dst); err == nil {
		t.Error("Snapshot over an existing file succeeded")
	}
	if b, _ := os.ReadFile(dst); string(b) != "keep" {
		t.Errorf("Snapshot changed the existing file: %q", b)
	}
	missing := filepath.Join(t.TempDir(), "outpost.db")
	if err := Snapshot(t.Context(), missing, filepath.Join(t.TempDir(), "x.db")); err == nil {
		t.Error("Snapshot of a missing database succeeded")
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Snapshot created %s: %v", missing, err)
	}
}

// TestInspectNewerAndDamaged: a database of a newer version lists the
// migrations this build does not know; a file that is not a database fails.
func TestInspectNewerAndDamaged(t *testing.T) {
	s, path := openTemp(t)
	if _, err := s.w.ExecContext(t.Context(), `INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_future', 0)`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	info, err := Inspect(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(info.Unknown, []int{9999}) {
		t.Errorf("unknown migrations %v, want [9999]", info.Unknown)
	}
	junk := filepath.Join(t.TempDir(), "junk.db")
	if err := os.WriteFile(junk, []byte("this is not a database, not even close to one............................................................"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Inspect(t.Context(), junk); err == nil {
		t.Error("Inspect of a file that is not a database succeeded")
	}
}
