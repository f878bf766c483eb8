//go:build linux

package postgres

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/store"
)

// BenchmarkClaimSessionParallel measures claims through the store, as the
// server makes them (the combiner groups them), from 25×GOMAXPROCS
// goroutines (50 on two cores), each of another pending session (b.N of
// them), on a server of its own with fsync on. Besides claims/s it
// reports the CPU a claim took in PostgreSQL (every process of the
// server) and in this process (the store, pgx and the goroutines): the
// database path of a claim without HTTP around it, the figure to compare
// before and after a change to it.
func BenchmarkClaimSessionParallel(b *testing.B) {
	n := max(b.N, 1)
	s, srv := benchServer(b, n)
	var tokens, next atomic.Int64
	pgBefore, selfBefore := treeCPU(srv.PID()), selfCPU()
	b.SetParallelism(25)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := fmt.Sprint("s", next.Add(1)%int64(n))
			fn := claimFn("acc", &tokens)
			if _, err := s.ClaimSession(b.Context(), id, time.Now(), "", func(sess store.Session, e store.QueueEntry, _ store.OutpostLoad) (store.Mutation, error) {
				return fn(sess, e)
			}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	pg, self := treeCPU(srv.PID())-pgBefore, selfCPU()-selfBefore
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
	b.ReportMetric(pg.Seconds()*1000/float64(b.N), "pg-cpu-ms/claim")
	b.ReportMetric(self.Seconds()*1000/float64(b.N), "client-cpu-ms/claim")
}

// treeCPU is the CPU time of process pid, its children and the children
// it reaped.
func treeCPU(pid int) time.Duration {
	var total time.Duration
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f := procStat(p)
		if len(f) < 17 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		switch {
		case p == pid:
			total += ticks(f[11]) + ticks(f[12]) + ticks(f[13]) + ticks(f[14])
		case ppid == pid:
			total += ticks(f[11]) + ticks(f[12])
		}
	}
	return total
}

// procStat is the fields of /proc/pid/stat after the command's name,
// from the state on (state is [0], ppid [1], utime [11]).
func procStat(pid int) []string {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// ticks is a count of clock ticks (100 a second on Linux) as a duration.
func ticks(s string) time.Duration {
	n, _ := strconv.ParseInt(s, 10, 64)
	return time.Duration(n) * 10 * time.Millisecond
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
