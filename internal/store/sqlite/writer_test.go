package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/store"
)

// holdWriter makes the writer busy with a transaction that waits until the
// returned release is called, so that what is queued meanwhile forms one
// batch. It returns once that transaction runs.
func holdWriter(t *testing.T, s *Store) (release func()) {
	t.Helper()
	running, unblock := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.write(context.Background(), func(*sql.Tx) error {
			close(running)
			<-unblock
			return nil
		})
	}()
	<-running
	var once sync.Once
	release = func() {
		once.Do(func() {
			close(unblock)
			if err := <-done; err != nil {
				t.Errorf("holding transaction: %v", err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

// waitQueued waits until n transactions wait for the writer.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.writer.mu.Lock()
		q := len(s.writer.queue)
		s.writer.mu.Unlock()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d transactions queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func insertOutpost(ctx context.Context, tx *sql.Tx, id string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO outposts (id, name, platform, description, created_at) VALUES ($1, $1, 'linux', '', 0)`, id)
	return err
}

func outpostExists(t *testing.T, s *Store, id string) bool {
	t.Helper()
	_, err := s.GetOutpost(t.Context(), id)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// Transactions queued behind a commit share the next one; one that fails
// after writing loses its own writes only.
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	defer s.Close()
	release := holdWriter(t, s)
	commits := s.writer.commits.Load()

	const n = 20
	errBoom := errors.New("boom")
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs[i] = s.write(t.Context(), func(tx *sql.Tx) error {
				if err := insertOutpost(t.Context(), tx, fmt.Sprint("op", i)); err != nil {
					return err
				}
				if i%3 == 0 {
					return errBoom // after its insert: that must be undone
				}
				return nil
			})
		})
	}
	waitQueued(t, s, n)
	release()
	wg.Wait()

	if got := s.writer.commits.Load() - commits; got != 1 {
		t.Errorf("%d transactions queued together took %d commits, want 1", n, got)
	}
	for i, err := range errs {
		want := i%3 != 0
		if want && err != nil {
			t.Errorf("write %d: %v", i, err)
		}
		if !want && !errors.Is(err, errBoom) {
			t.Errorf("write %d: %v, want its own error", i, err)
		}
		if got := outpostExists(t, s, fmt.Sprint("op", i)); got != want {
			t.Errorf("outpost %d exists: %v, want %v", i, got, want)
		}
	}
}

// A caller that gives up before its transaction starts is answered at once
// and never runs; one whose context ends while its function runs loses its
// own writes; neither touches the others' writes.
func TestGroupCommitCancel(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	defer s.Close()
	release := holdWriter(t, s)

	early, cancelEarly := context.WithCancel(t.Context())
	ranEarly := false
	earlyErr := make(chan error, 1)
	go func() {
		earlyErr <- s.write(early, func(tx *sql.Tx) error {
			ranEarly = true
			return insertOutpost(t.Context(), tx, "early")
		})
	}()
	waitQueued(t, s, 1)

	late, cancelLate := context.WithCancel(t.Context())
	lateErr := make(chan error, 1)
	go func() {
		lateErr <- s.write(late, func(tx *sql.Tx) error {
			if err := insertOutpost(late, tx, "late"); err != nil {
				return err
			}
			cancelLate()
			return insertOutpost(late, tx, "late2")
		})
	}()
	okErr := make(chan error, 1)
	go func() {
		okErr <- s.write(t.Context(), func(tx *sql.Tx) error { return insertOutpost(t.Context(), tx, "ok") })
	}()
	waitQueued(t, s, 3)

	cancelEarly()
	if err := <-earlyErr; !errors.Is(err, context.Canceled) {
		t.Errorf("write canceled while queued: %v, want context.Canceled", err)
	}
	waitQueued(t, s, 2)
	release()
	if err := <-lateErr; !errors.Is(err, context.Canceled) {
		t.Errorf("write canceled while running: %v, want context.Canceled", err)
	}
	if err := <-okErr; err != nil {
		t.Errorf("write beside the canceled ones: %v", err)
	}
	if ranEarly {
		t.Error("the write canceled while queued ran")
	}
	for id, want := range map[string]bool{"early": false, "late": false, "late2": false, "ok": true} {
		if got := outpostExists(t, s, id); got != want {
			t.Errorf("outpost %s exists: %v, want %v", id, got, want)
		}
	}
}

// A function that panics panics in its caller, with its writes undone, and
// the transactions it shared a commit with are kept.
func TestGroupCommitPanic(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	defer s.Close()
	release := holdWriter(t, s)

	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		_ = s.write(t.Context(), func(tx *sql.Tx) error {
			if err := insertOutpost(t.Context(), tx, "panic"); err != nil {
				return err
			}
			panic("kaboom")
		})
	}()
	okErr := make(chan error, 1)
	go func() {
		okErr <- s.write(t.Context(), func(tx *sql.Tx) error { return insertOutpost(t.Context(), tx, "ok") })
	}()
	waitQueued(t, s, 2)
	release()
	if v := <-panicked; v != "kaboom" {
		t.Errorf("caller recovered %v, want kaboom", v)
	}
	if err := <-okErr; err != nil {
		t.Errorf("write beside the panic: %v", err)
	}
	if outpostExists(t, s, "panic") || !outpostExists(t, s, "ok") {
		t.Error("the panicking write was kept or the other one lost")
	}
}

// After Close, writes fail with a clear error; the ones queued before it
// were run.
func TestWriteAfterClose(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	release := holdWriter(t, s)
	queued := make(chan error, 1)
	go func() {
		queued <- s.write(t.Context(), func(tx *sql.Tx) error { return insertOutpost(t.Context(), tx, "queued") })
	}()
	waitQueued(t, s, 1)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	// Close waits for the queue to drain: let it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.writer.mu.Lock()
		c := s.writer.closed
		s.writer.mu.Unlock()
		if c {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Close did not start")
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.write(t.Context(), func(*sql.Tx) error { return nil }); !errors.Is(err, errClosed) {
		t.Errorf("write after Close: %v, want %v", err, errClosed)
	}
	release()
	if err := <-queued; err != nil {
		t.Errorf("write queued before Close: %v", err)
	}
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
}
