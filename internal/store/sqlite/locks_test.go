package sqlite

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// BenchmarkLock measures one uncontended lock and unlock, beside the
// sync.RWMutex the server held before locks were the store's.
func BenchmarkLock(b *testing.B) {
	s, _ := openTemp(b)
	defer s.Close()
	for _, shared := range []bool{false, true} {
		b.Run(fmt.Sprintf("shared=%v", shared), func(b *testing.B) {
			for b.Loop() {
				unlock, err := s.Lock(b.Context(), "outposts", shared)
				if err != nil {
					b.Fatal(err)
				}
				unlock()
			}
		})
	}
	b.Run("rwmutex", func(b *testing.B) {
		var mu sync.RWMutex
		for b.Loop() {
			mu.RLock()
			//lint:ignore SA2001 the cost of the pair is the point
			mu.RUnlock()
		}
	})
}

// BenchmarkPutWorker measures a worker heartbeat (one durable write
// transaction) on an outpost with 100 live workers.
func BenchmarkPutWorker(b *testing.B) {
	s, _ := openTemp(b)
	defer s.Close()
	if err := s.CreateOutpost(b.Context(), store.Outpost{ID: "op", Name: "op", Platform: api.PlatformLinux, CreatedAt: time.Now()}); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		now := time.Now()
		w := store.Worker{OutpostID: "op", AcceptorID: fmt.Sprint("w", i%100),
			Info:       api.WorkerInfo{Kind: api.WorkerKindWorker, Hostname: "box", Instance: fmt.Sprint("inst-", i%100), MaxSessions: 1},
			LastSeenAt: now, ExpiresAt: now.Add(api.WorkerTTL)}
		if _, err := s.PutWorker(b.Context(), w, 1000); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
