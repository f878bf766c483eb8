//go:build !windows

package bench

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/snapshot"
)

// BenchmarkSnapshot measures internal/snapshot in process: Write of a
// generated workspace into an archive file, then Restore of that file into
// an empty directory, both on the same disk.
//
// The workspace (OUTPOST_BENCH_SNAPSHOT_MIB, default 256 and 1024) is a
// quarter small files (1–16 KiB of generated text, 500 to a directory) and
// four big files: two of generated text (compressible, about 3:1) and two
// of random bytes (incompressible). Generation writes through a 1 MiB
// buffer and is not timed.
//
// Memory is the process's peak RSS (VmHWM, reset through
// /proc/self/clear_refs before each phase) and the peak Go heap in use
// (runtime.MemStats sampled every 20 ms) during each phase: flat means the
// same at both sizes.
func BenchmarkSnapshot(b *testing.B) {
	sizes := []int{256, 1024}
	if n := envInt("OUTPOST_BENCH_SNAPSHOT_MIB", 0); n > 0 {
		sizes = []int{n}
	}
	for _, size := range sizes {
		b.Run(fmt.Sprintf("%dMiB", size), func(b *testing.B) {
			for range b.N {
				benchSnapshot(b, int64(size)<<20)
			}
		})
	}
}

func benchSnapshot(b *testing.B, size int64) {
	ctx := context.Background()
	ws := filepath.Join(b.TempDir(), "ws")
	files := genWorkspace(b, ws, size)
	archive := filepath.Join(b.TempDir(), "ws.tar.zst")

	f, err := os.Create(archive)
	if err != nil {
		b.Fatal(err)
	}
	var info api.SnapshotInfo
	w := measure(b, func() error {
		var err error
		info, err = snapshot.Write(ctx, f, ws, snapshot.Options{})
		if err == nil {
			err = f.Close()
		}
		return err
	})
	if info.Files != files {
		b.Fatalf("Write archived %d files, want %d", info.Files, files)
	}

	dst := filepath.Join(b.TempDir(), "restored")
	var got api.SnapshotInfo
	r := measure(b, func() error {
		f, err := os.Open(archive)
		if err != nil {
			return err
		}
		defer f.Close()
		got, err = snapshot.Restore(ctx, f, dst, info, snapshot.Options{})
		return err
	})
	if got.Files != info.Files || got.Bytes != info.Bytes {
		b.Fatalf("Restore = %+v, want %+v", got, info)
	}

	mb := float64(info.Bytes) / 1e6
	b.ReportMetric(mb/w.d.Seconds(), "write-MB/s")
	b.ReportMetric(mb/r.d.Seconds(), "restore-MB/s")
	b.ReportMetric(float64(info.Size)/float64(info.Bytes), "ratio")
	b.ReportMetric(mib(w.hwm), "write-peak-RSS-MiB")
	b.ReportMetric(mib(r.hwm), "restore-peak-RSS-MiB")
	b.Logf("SUMMARY snapshot %d MiB, %d files: archive %.1f MiB (%.2f of the bytes); Write %.1f s, %.0f MB/s, peak RSS %.1f MiB, peak heap %.1f MiB; Restore %.1f s, %.0f MB/s, peak RSS %.1f MiB, peak heap %.1f MiB (RSS before each phase: %.1f / %.1f MiB)",
		size>>20, info.Files, mib(info.Size), float64(info.Size)/float64(info.Bytes),
		w.d.Seconds(), mb/w.d.Seconds(), mib(w.hwm), mib(w.heap),
		r.d.Seconds(), mb/r.d.Seconds(), mib(r.hwm), mib(r.heap), mib(w.rss0), mib(r.rss0))
}

// phase is the time and memory of one measured phase.
type phase struct {
	d         time.Duration
	hwm, rss0 int64
	heap      int64
}

// measure runs fn after a GC and a reset of the peak RSS, sampling the heap.
func measure(b *testing.B, fn func() error) phase {
	b.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Logf("cannot reset VmHWM (%v): the peak RSS includes what came before", err)
	}
	var p phase
	_, p.rss0, _ = procMem(os.Getpid())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			p.heap = max(p.heap, int64(ms.HeapInuse))
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	start := time.Now()
	err := fn()
	p.d = time.Since(start)
	close(stop)
	wg.Wait()
	if err != nil {
		b.Fatal(err)
	}
	p.hwm, _, _ = procMem(os.Getpid())
	return p
}

// genWorkspace fills dir with about size bytes (see BenchmarkSnapshot) and
// returns the number of files.
func genWorkspace(b *testing.B, dir string, size int64) int64 {
	b.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 1<<20)
	var files int64
	small := size / 4
	for d := 0; small > 0; d++ {
		sub := filepath.Join(dir, "src", fmt.Sprintf("pkg%04d", d))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		for i := 0; i < 500 && small > 0; i++ {
			n := min(int64(1<<10+rng.IntN(15<<10)), small)
			genText(rng, buf[:n])
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%03d.go", i)), buf[:n], 0o644); err != nil {
				b.Fatal(err)
			}
			small -= n
			files++
		}
	}
	big := (size - size/4) / 4
	for i := range 4 {
		random := i%2 == 1
		name := filepath.Join(dir, "data", fmt.Sprintf("big%d.%s", i, map[bool]string{true: "bin", false: "log"}[random]))
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			b.Fatal(err)
		}
		f, err := os.Create(name)
		if err != nil {
			b.Fatal(err)
		}
		bw := bufio.NewWriterSize(f, len(buf))
		for left := big; left > 0; {
			n := min(left, int64(len(buf)))
			if random {
				fillRandom(rng, buf[:n])
			} else {
				genText(rng, buf[:n])
			}
			if _, err := bw.Write(buf[:n]); err != nil {
				b.Fatal(err)
			}
			left -= n
		}
		if err := bw.Flush(); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		files++
	}
	return files
}

var words = []string{"func", "return", "err", "nil", "if", "for", "range", "context", "session",
	"workspace", "snapshot", "remote", "gateway", "the", "a", "of", "to", "and", "ctx", "string",
	"int64", "struct", "type", "package", "import", "var", "const", ":=", "{", "}", "(", ")", "\n", "\t"}

// genText fills p with words and numbers drawn from rng: text that zstd
// compresses about 3:1, not a repeated block it would shrink to nothing.
func genText(rng *rand.Rand, p []byte) {
	p = p[:0:len(p)]
	for len(p) < cap(p) {
		var w string
		if rng.IntN(6) == 0 {
			w = fmt.Sprint(rng.IntN(100000))
		} else {
			w = words[rng.IntN(len(words))]
		}
		n := min(len(w)+1, cap(p)-len(p))
		p = append(p, (w + " ")[:n]...)
	}
}

func fillRandom(rng *rand.Rand, p []byte) {
	for i := 0; i+8 <= len(p); i += 8 {
		v := rng.Uint64()
		for j := range 8 {
			p[i+j] = byte(v >> (8 * j))
		}
	}
}

// mib is n bytes in MiB.
func mib(n int64) float64 { return float64(n) / (1 << 20) }
