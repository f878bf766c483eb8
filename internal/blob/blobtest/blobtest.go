// Package blobtest is the conformance suite every blob.Store passes: round
// trips with checksums, a 50 MiB blob streamed with bounded memory, the
// size limit, cancelled uploads, one key put and read concurrently, and
// listing and deleting by prefix.
package blobtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/blob"
)

// Options describe the Store under test.
type Options struct {
	// New returns an empty Store.
	New func(t *testing.T) blob.Store
	// Leftovers counts what a Store keeps besides its blobs (partial
	// uploads, replaced versions not yet swept); the suite checks a
	// failed Put adds none. nil skips the check.
	Leftovers func(t *testing.T, s blob.Store) int
}

// Run runs the suite.
func Run(t *testing.T, o Options) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, Options)
	}{
		{"RoundTrip", testRoundTrip},
		{"Keys", testKeys},
		{"Large", testLarge},
		{"Limit", testLimit},
		{"Cancel", testCancel},
		{"Concurrent", testConcurrent},
		{"Prefix", testPrefix},
		{"Seek", testSeek},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, o) })
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func get(t *testing.T, s blob.Store, key string) []byte {
	t.Helper()
	r, info, err := s.Get(ctx(t), key)
	if err != nil {
		t.Fatalf("Get %s: %v", key, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	if info.Key != key || info.Size != int64(len(b)) {
		t.Fatalf("Get %s: info %+v for %d bytes", key, info, len(b))
	}
	if info.SHA256 != "" && info.SHA256 != sum(b) {
		t.Fatalf("Get %s: SHA256 %s, bytes hash to %s", key, info.SHA256, sum(b))
	}
	return b
}

func put(t *testing.T, s blob.Store, key string, b []byte) {
	t.Helper()
	n, h, err := s.Put(ctx(t), key, bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatalf("Put %s: %v", key, err)
	}
	if n != int64(len(b)) || h != sum(b) {
		t.Fatalf("Put %s = %d, %s; want %d, %s", key, n, h, len(b), sum(b))
	}
}

func absent(t *testing.T, s blob.Store, key string) {
	t.Helper()
	if r, _, err := s.Get(ctx(t), key); !errors.Is(err, blob.ErrNotExist) {
		if r != nil {
			r.Close()
		}
		t.Fatalf("Get %s: %v, want ErrNotExist", key, err)
	}
}

// pattern is n bytes of a sequence that repeats only every 251 bytes, so a
// chunk out of place shows.
type pattern struct{ i, n int64 }

func (p *pattern) Read(b []byte) (int, error) {
	if p.i >= p.n {
		return 0, io.EOF
	}
	k := int(min(int64(len(b)), p.n-p.i))
	for j := range k {
		b[j] = byte((p.i + int64(j)) % 251)
	}
	p.i += int64(k)
	return k, nil
}

func testRoundTrip(t *testing.T, o Options) {
	s := o.New(t)
	absent(t, s, "a/x")
	for _, b := range [][]byte{{}, []byte("hello"), bytes.Repeat([]byte("0123456789abcdef"), 300_000)} {
		put(t, s, "a/x", b)
		if got := get(t, s, "a/x"); !bytes.Equal(got, b) {
			t.Fatalf("Get after Put of %d bytes: %d bytes, different", len(b), len(got))
		}
	}
	if err := s.Delete(ctx(t), "a/x"); err != nil {
		t.Fatal(err)
	}
	absent(t, s, "a/x")
	if err := s.Delete(ctx(t), "a/x"); err != nil {
		t.Fatalf("Delete of an absent blob: %v", err)
	}
}

func testKeys(t *testing.T, o Options) {
	s := o.New(t)
	for _, k := range []string{"", "/a", "a/", "a//b", "../a", "a/../b", "a/./b", "a b", "a\\b", ".upload-x", "a/.upload-1", strings.Repeat("a", 513)} {
		if _, _, err := s.Put(ctx(t), k, strings.NewReader("x"), 10); err == nil {
			t.Errorf("Put accepted key %q", k)
		}
		if _, _, err := s.Get(ctx(t), k); err == nil || errors.Is(err, blob.ErrNotExist) {
			t.Errorf("Get of key %q: %v, want an invalid key", k, err)
		}
	}
	put(t, s, "artifacts/s1/.meta/x.json", []byte("{}"))
	get(t, s, "artifacts/s1/.meta/x.json")
}

// heapPeak samples the heap while fn runs and returns how far above the
// heap before fn it went.
func heapPeak(fn func()) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	fn()
	close(done)
	wg.Wait()
	if peak.Load() < base {
		return 0
	}
	return peak.Load() - base
}

// largeSize is the blob testLarge streams; maxHeap is how much the heap
// may grow meanwhile (a third of it, garbage not yet collected included:
// a few chunks and the driver's buffers, never the blob).
const (
	largeSize = 50 << 20
	maxHeap   = largeSize / 3
)

func testLarge(t *testing.T, o Options) {
	s := o.New(t)
	var n int64
	var h string
	var err error
	start := time.Now()
	putHeap := heapPeak(func() {
		n, h, err = s.Put(ctx(t), "big/one", &pattern{n: largeSize}, largeSize)
	})
	putTook := time.Since(start)
	if err != nil || n != largeSize {
		t.Fatalf("Put 50 MiB = %d, %v", n, err)
	}
	want := sha256.New()
	_, _ = io.Copy(want, &pattern{n: largeSize})
	if h != hex.EncodeToString(want.Sum(nil)) {
		t.Fatal("Put's SHA-256 is not the bytes'")
	}
	got := sha256.New()
	start = time.Now()
	getHeap := heapPeak(func() {
		var r io.ReadCloser
		if r, _, err = s.Get(ctx(t), "big/one"); err != nil {
			return
		}
		defer r.Close()
		n, err = io.Copy(got, r)
	})
	getTook := time.Since(start)
	if err != nil || n != largeSize {
		t.Fatalf("Get 50 MiB = %d, %v", n, err)
	}
	if !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatal("the 50 MiB read back differ from those put")
	}
	mbs := func(d time.Duration) float64 { return float64(largeSize) / (1 << 20) / d.Seconds() }
	t.Logf("50 MiB: put %.0f MB/s (heap +%.1f MiB), get %.0f MB/s (heap +%.1f MiB)",
		mbs(putTook), float64(putHeap)/(1<<20), mbs(getTook), float64(getHeap)/(1<<20))
	if putHeap > maxHeap || getHeap > maxHeap {
		t.Errorf("streaming 50 MiB grew the heap by %d (put) and %d (get) bytes; want at most %d", putHeap, getHeap, maxHeap)
	}
}

func leftovers(t *testing.T, o Options, s blob.Store) int {
	if o.Leftovers == nil {
		return 0
	}
	return o.Leftovers(t, s)
}

func testLimit(t *testing.T, o Options) {
	s := o.New(t)
	put(t, s, "l/kept", []byte("before"))
	before := leftovers(t, o, s)
	// Exactly the limit is fine.
	if n, _, err := s.Put(ctx(t), "l/exact", &pattern{n: 3 << 20}, 3<<20); err != nil || n != 3<<20 {
		t.Fatalf("Put of exactly the limit = %d, %v", n, err)
	}
	for _, key := range []string{"l/new", "l/kept"} {
		_, _, err := s.Put(ctx(t), key, &pattern{n: 3<<20 + 1}, 3<<20)
		if !errors.Is(err, blob.ErrTooLarge) {
			t.Fatalf("Put past the limit: %v, want ErrTooLarge", err)
		}
	}
	absent(t, s, "l/new")
	if got := get(t, s, "l/kept"); string(got) != "before" {
		t.Fatalf("a Put past the limit replaced the blob: %q", got)
	}
	if after := leftovers(t, o, s); after != before {
		t.Errorf("failed Puts left %d things behind", after-before)
	}
	infos, err := s.List(ctx(t), "l/")
	if err != nil || len(infos) != 2 {
		t.Fatalf("List after failed Puts = %+v, %v; want l/exact and l/kept", infos, err)
	}
}

// failing reads n bytes of pattern, then calls fn and fails.
type failing struct {
	p  pattern
	fn func()
}

func (f *failing) Read(b []byte) (int, error) {
	if f.p.i >= f.p.n {
		if f.fn != nil {
			f.fn()
		}
		return 0, errors.New("the uploader went away")
	}
	return f.p.Read(b)
}

func testCancel(t *testing.T, o Options) {
	s := o.New(t)
	before := leftovers(t, o, s)
	c, cancel := context.WithCancel(ctx(t))
	_, _, err := s.Put(c, "c/x", &failing{p: pattern{n: 5 << 20}, fn: cancel}, 1<<30)
	if err == nil {
		t.Fatal("Put of a reader that failed succeeded")
	}
	absent(t, s, "c/x")
	_, _, err = s.Put(ctx(t), "c/y", &failing{p: pattern{n: 2<<20 + 7}}, 1<<30)
	if err == nil || !strings.Contains(err.Error(), "went away") {
		t.Fatalf("Put of a failing reader: %v", err)
	}
	absent(t, s, "c/y")
	if after := leftovers(t, o, s); after != before {
		t.Errorf("failed Puts left %d things behind", after-before)
	}
}

// testConcurrent puts versions of one key while readers read it: each
// read is one whole version (every byte its number, its length its
// size), never a mix or a part.
func testConcurrent(t *testing.T, o Options) {
	s := o.New(t)
	size := func(v byte) int { return (2 << 20) + int(v)*4099 }
	put(t, s, "k/one", bytes.Repeat([]byte{0}, size(0)))
	c := ctx(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var reads atomic.Int64
	errs := make(chan error, 8)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := readWhole(c, s, size); err != nil {
					errs <- err
					return
				}
				reads.Add(1)
			}
		}()
	}
	for v := byte(1); v <= 12; v++ {
		if _, _, err := s.Put(c, "k/one", bytes.NewReader(bytes.Repeat([]byte{v}, size(v))), 1<<30); err != nil {
			t.Errorf("Put version %d: %v", v, err)
		}
	}
	// Let the readers see the last version too.
	for deadline := time.Now().Add(time.Minute); reads.Load() < 6 && time.Now().Before(deadline); {
		runtime.Gosched()
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := get(t, s, "k/one"); len(got) != size(12) || got[0] != 12 {
		t.Fatalf("after the Puts the blob is %d bytes of %d", len(got), got[0])
	}
	t.Logf("%d whole reads during 12 puts", reads.Load())
}

func readWhole(ctx context.Context, s blob.Store, size func(byte) int) error {
	r, info, err := s.Get(ctx, "k/one")
	if err != nil {
		return fmt.Errorf("get during Puts: %w", err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("read during Puts: %w", err)
	}
	if len(b) == 0 || len(b) != size(b[0]) || int64(len(b)) != info.Size {
		return fmt.Errorf("read %d bytes of version %d (info %d), want %d", len(b), b[0], info.Size, size(b[0]))
	}
	if i := bytes.IndexFunc(b, func(r rune) bool { return byte(r) != b[0] }); i >= 0 && bytes.Count(b, b[:1]) != len(b) {
		return fmt.Errorf("read a mix of versions: version %d, another at byte %d", b[0], i)
	}
	return nil
}

func testPrefix(t *testing.T, o Options) {
	s := o.New(t)
	keys := []string{"a/1", "a/2", "a/b/3", "a/b/c/4", "ab/5", "b/6"}
	for _, k := range keys {
		put(t, s, k, []byte(k))
	}
	list := func(prefix string) string {
		infos, err := s.List(ctx(t), prefix)
		if err != nil {
			t.Fatalf("List %q: %v", prefix, err)
		}
		var ks []string
		for _, in := range infos {
			if in.Size != int64(len(in.Key)) {
				t.Errorf("List %q: %s has size %d", prefix, in.Key, in.Size)
			}
			ks = append(ks, in.Key)
		}
		return strings.Join(ks, " ")
	}
	for prefix, want := range map[string]string{
		"":      "a/1 a/2 a/b/3 a/b/c/4 ab/5 b/6",
		"a/":    "a/1 a/2 a/b/3 a/b/c/4",
		"a":     "a/1 a/2 a/b/3 a/b/c/4 ab/5",
		"a/b/":  "a/b/3 a/b/c/4",
		"a/b/c": "a/b/c/4",
		"c/":    "",
	} {
		if got := list(prefix); got != want {
			t.Errorf("List %q = %q, want %q", prefix, got, want)
		}
	}
	if err := s.DeletePrefix(ctx(t), "a/b/"); err != nil {
		t.Fatal(err)
	}
	if got := list(""); got != "a/1 a/2 ab/5 b/6" {
		t.Fatalf("after DeletePrefix a/b/: %q", got)
	}
	if err := s.DeletePrefix(ctx(t), "a"); err != nil {
		t.Fatal(err)
	}
	if got := list(""); got != "b/6" {
		t.Fatalf("after DeletePrefix a: %q", got)
	}
	absent(t, s, "a/1")
	if err := s.DeletePrefix(ctx(t), "nothing/"); err != nil {
		t.Fatalf("DeletePrefix of nothing: %v", err)
	}
	if _, err := s.List(ctx(t), "../"); err == nil {
		t.Error("List accepted prefix ../")
	}
	// A key deleted by prefix can be put again.
	put(t, s, "a/b/3", []byte("again"))
	if got := get(t, s, "a/b/3"); string(got) != "again" {
		t.Fatalf("put after DeletePrefix: %q", got)
	}
}

func testSeek(t *testing.T, o Options) {
	s := o.New(t)
	const n = 3<<20 + 123
	if _, _, err := s.Put(ctx(t), "s/x", &pattern{n: n}, n); err != nil {
		t.Fatal(err)
	}
	r, _, err := s.Get(ctx(t), "s/x")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, off := range []int64{n - 10, 1<<20 - 3, 0, 2<<20 + 5} {
		if _, err := r.Seek(off, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 10)
		k, err := io.ReadFull(r, b)
		if err != nil || k != 10 {
			t.Fatalf("read 10 at %d: %d, %v", off, k, err)
		}
		for i := range b {
			if b[i] != byte((off+int64(i))%251) {
				t.Fatalf("byte %d is %d, want %d", off+int64(i), b[i], (off+int64(i))%251)
			}
		}
	}
	if end, err := r.Seek(0, io.SeekEnd); err != nil || end != n {
		t.Fatalf("Seek to end = %d, %v", end, err)
	}
	if k, err := r.Read(make([]byte, 1)); k != 0 || err != io.EOF {
		t.Fatalf("Read at the end = %d, %v", k, err)
	}
}
