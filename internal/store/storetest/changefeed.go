package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// testChangeFeed (cross-replica fan-out) runs for a store that is
// a store.ChangeFeed: Listen starts with a Resync; then, with writers
// racing on several sessions, every rev a queue write took is told of
// once, with its session and epoch, and each session's last change tells
// its final seq. A store without a feed skips it.
func testChangeFeed(t *testing.T, s store.Store) {
	feed, ok := s.(store.ChangeFeed)
	if !ok {
		t.Skip("the store has no change feed")
	}
	changes := make(chan store.Change, 10000)
	lctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- feed.Listen(lctx, func(c store.Change) { changes <- c }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Listen returned %v, want context.Canceled", err)
		}
	})
	next := func() store.Change {
		t.Helper()
		select {
		case c := <-changes:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("no change within 10s")
			return store.Change{}
		}
	}
	if c := next(); !c.Resync {
		t.Fatalf("first change %+v, want a Resync", c)
	}

	const sessions, rounds = 4, 10
	var mu sync.Mutex
	revs := map[int64]store.Change{} // rev → the change that took it
	var wg sync.WaitGroup
	for i := range sessions {
		id := fmt.Sprint("s", i)
		e := create(t, s, newSession(id, "op", "t", 0))
		mu.Lock() // the sessions created before this one already write revs
		revs[e.Rev] = store.Change{SessionID: id, OutpostID: "op", Rev: e.Rev}
		mu.Unlock()
		wg.Go(func() {
			for r := range rounds {
				if err := s.AppendEvents(ctx(t), id, []api.Event{{Type: api.EventOutput, Text: "x"}}); err != nil {
					t.Errorf("append: %v", err)
					return
				}
				m, err := s.UpdateSession(ctx(t), id, func(_ store.Session, e store.QueueEntry) (store.Mutation, error) {
					e.Epoch++
					return store.Mutation{Entry: &e, Events: []api.Event{{Type: api.EventOutput, Text: fmt.Sprint(r)}}}, nil
				})
				if err != nil {
					t.Errorf("update: %v", err)
					return
				}
				mu.Lock()
				revs[m.Entry.Rev] = store.Change{SessionID: id, OutpostID: "op", Rev: m.Entry.Rev, Epoch: m.Entry.Epoch, Seq: m.Events[0].Seq}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	const final = 2 * rounds
	last := map[string]int64{}
	for told := map[int64]bool{}; len(told) < len(revs) || len(last) < sessions || !allAt(last, final); {
		c := next()
		if c.Resync {
			t.Fatalf("a Resync while the feed was connected")
		}
		last[c.SessionID] = max(last[c.SessionID], c.Seq)
		if c.Rev == 0 {
			continue
		}
		want, ok := revs[c.Rev]
		if !ok || told[c.Rev] {
			t.Fatalf("change %+v: rev %d was not taken, or was told of twice", c, c.Rev)
		}
		told[c.Rev] = true
		c.Origin = ""
		if c != want {
			t.Fatalf("change %+v, want %+v", c, want)
		}
	}
}

// allAt reports whether every value of m is seq.
func allAt(m map[string]int64, seq int64) bool {
	for _, v := range m {
		if v != seq {
			return false
		}
	}
	return true
}
