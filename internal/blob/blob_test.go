package blob_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outpost-sh/outpost/internal/blob"
	"github.com/outpost-sh/outpost/internal/blob/blobtest"
	"github.com/outpost-sh/outpost/internal/blob/s3test"
	"github.com/outpost-sh/outpost/internal/store/postgres"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
)

func TestFS(t *testing.T) {
	blobtest.Run(t, blobtest.Options{
		New: func(t *testing.T) blob.Store { return blob.FS{Dir: t.TempDir()} },
		Leftovers: func(t *testing.T, s blob.Store) int {
			n := 0
			_ = filepath.WalkDir(s.(blob.FS).Dir, func(p string, d fs.DirEntry, err error) error {
				if err == nil && strings.HasPrefix(d.Name(), ".upload-") {
					n++
				}
				return nil
			})
			return n
		},
	})
}

// openPostgres opens a fresh database through the postgres store, so its
// migrations make the blob tables, and returns its pool.
func openPostgres(t *testing.T) *pgxpool.Pool {
	pg := pgtest.Shared(t)
	st, err := postgres.Open(t.Context(), pg.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st.Pool()
}

// pgLeftovers counts versions that are not live and chunks of no live
// version.
func pgLeftovers(t *testing.T, pool *pgxpool.Pool) int {
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT
		(SELECT count(*) FROM blob_versions WHERE state <> 'live') +
		(SELECT count(*) FROM blob_chunks c WHERE NOT EXISTS (SELECT 1 FROM blob_versions v WHERE v.id = c.version AND v.state = 'live'))`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestPostgres(t *testing.T) {
	blobtest.Run(t, blobtest.Options{
		New: func(t *testing.T) blob.Store { return blob.NewPostgres(openPostgres(t), blob.PostgresOptions{}) },
		Leftovers: func(t *testing.T, s blob.Store) int {
			return pgLeftovers(t, s.(interface{ Pool() *pgxpool.Pool }).Pool())
		},
	})
}

// TestPostgresSweep: a replaced blob stays readable by a reader that
// opened it until the grace passes, then a sweep removes its chunks; an
// upload that stopped is swept as abandoned.
func TestPostgresSweep(t *testing.T) {
	pool := openPostgres(t)
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	s := blob.NewPostgres(pool, blob.PostgresOptions{ChunkSize: 1 << 10, Grace: time.Minute, Now: clock})
	ctx := t.Context()
	if _, _, err := s.Put(ctx, "x", strings.NewReader(strings.Repeat("a", 5000)), 1<<20); err != nil {
		t.Fatal(err)
	}
	r, _, err := s.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, _, err := s.Put(ctx, "x", strings.NewReader("b"), 1<<20); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 5000)
	if n, err := r.Read(b); err != nil || n != 1<<10 || b[0] != 'a' {
		t.Fatalf("reading the replaced version: %d, %v", n, err)
	}
	if n, err := s.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep within the grace = %d, %v", n, err)
	}
	now = now.Add(2 * time.Minute)
	if n, err := s.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("Sweep past the grace = %d, %v", n, err)
	}
	if _, err := r.Read(b); err == nil {
		t.Fatal("read a swept version without an error")
	}
	if got := pgLeftovers(t, pool); got != 0 {
		t.Fatalf("%d leftovers after the sweep", got)
	}
	// An upload a crashed server left behind.
	if _, err := pool.Exec(ctx, `INSERT INTO blob_versions (key, state, chunk_size, created_at, changed_at) VALUES ('y', 'uploading', 1024, $1, $1)`,
		now.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	if n, err := s.Sweep(context.Background()); err != nil || n != 1 {
		t.Fatalf("Sweep of an abandoned upload = %d, %v", n, err)
	}
}

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestSub(t *testing.T) {
	root := blob.FS{Dir: t.TempDir()}
	blobtest.Run(t, blobtest.Options{
		New: func(t *testing.T) blob.Store { return blob.Sub(blob.FS{Dir: t.TempDir()}, "x/y/") },
	})
	s := blob.Sub(root, "snapshots/")
	if _, _, err := s.Put(t.Context(), "k", strings.NewReader("v"), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root.Dir, "snapshots", "k")); err != nil {
		t.Fatalf("Sub's blob is not where the root keeps snapshots/k: %v", err)
	}
}

func TestWriter(t *testing.T) {
	s := blob.FS{Dir: t.TempDir()}
	w := blob.NewWriter(t.Context(), s, "w/ok", 10)
	for _, p := range []string{"abc", "def"} {
		if _, err := w.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	if n, _, err := w.Commit(); err != nil || n != 6 {
		t.Fatalf("Commit = %d, %v", n, err)
	}
	w = blob.NewWriter(t.Context(), s, "w/aborted", 10)
	_, _ = w.Write([]byte("abc"))
	w.Abort(errors.New("no"))
	if _, _, err := s.Get(t.Context(), "w/aborted"); !errors.Is(err, blob.ErrNotExist) {
		t.Fatalf("an aborted Writer stored its blob: %v", err)
	}
	w = blob.NewWriter(t.Context(), s, "w/big", 4)
	if _, err := w.Write([]byte("abcdef")); !errors.Is(err, blob.ErrTooLarge) {
		t.Fatalf("Write past the limit: %v", err)
	}
	if _, _, err := w.Commit(); !errors.Is(err, blob.ErrTooLarge) {
		t.Fatalf("Commit past the limit: %v", err)
	}
}

func TestMove(t *testing.T) {
	src, dst := blob.FS{Dir: t.TempDir()}, blob.FS{Dir: t.TempDir()}
	for _, k := range []string{"artifacts/s/a", "artifacts/s/.meta/a.json", "snapshots/k", "other"} {
		if _, _, err := src.Put(t.Context(), k, strings.NewReader(k), 100); err != nil {
			t.Fatal(err)
		}
	}
	n, b, err := blob.Move(t.Context(), dst, src, "artifacts/")
	if err != nil || n != 2 || b != int64(len("artifacts/s/a")+len("artifacts/s/.meta/a.json")) {
		t.Fatalf("Move = %d, %d, %v", n, b, err)
	}
	left, _ := src.List(t.Context(), "")
	moved, _ := dst.List(t.Context(), "")
	if len(left) != 2 || len(moved) != 2 || moved[0].Key != "artifacts/s/.meta/a.json" {
		t.Fatalf("after Move: src %+v, dst %+v", left, moved)
	}
}

// benchStores runs fn against each implementation.
func benchStores(b *testing.B, fn func(b *testing.B, s blob.Store)) {
	b.Run("fs", func(b *testing.B) { fn(b, blob.FS{Dir: b.TempDir()}) })
	pgBench := func(b *testing.B, pg *pgtest.Server) {
		st, err := postgres.Open(b.Context(), pg.Database(b))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		fn(b, blob.NewPostgres(st.Pool(), blob.PostgresOptions{}))
	}
	b.Run("postgres", func(b *testing.B) { pgBench(b, pgtest.Shared(b)) })
	// With fsync on, as a production database commits (FS syncs too).
	b.Run("postgres-fsync", func(b *testing.B) { pgBench(b, pgtest.StartT(b, pgtest.Options{Fsync: true})) })
	b.Run("s3", func(b *testing.B) {
		s, err := blob.NewS3(s3test.Start(b))
		if err != nil {
			b.Fatal(err)
		}
		fn(b, s)
	})
}

// benchSize is the blob the benchmarks put and get.
const benchSize = 64 << 20

// zeros reads n zero bytes.
type zeros struct{ n int64 }

func (z *zeros) Read(p []byte) (int, error) {
	if z.n <= 0 {
		return 0, io.EOF
	}
	k := int(min(int64(len(p)), z.n))
	clear(p[:k])
	z.n -= int64(k)
	return k, nil
}

func BenchmarkPut(b *testing.B) {
	benchStores(b, func(b *testing.B, s blob.Store) {
		b.SetBytes(benchSize)
		for b.Loop() {
			if _, _, err := s.Put(b.Context(), "bench/put", &zeros{benchSize}, benchSize); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkGet(b *testing.B) {
	benchStores(b, func(b *testing.B, s blob.Store) {
		if _, _, err := s.Put(b.Context(), "bench/get", &zeros{benchSize}, benchSize); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(benchSize)
		for b.Loop() {
			r, _, err := s.Get(b.Context(), "bench/get")
			if err != nil {
				b.Fatal(err)
			}
			if n, err := io.Copy(io.Discard, r); err != nil || n != benchSize {
				b.Fatalf("read %d, %v", n, err)
			}
			r.Close()
		}
	})
}

// TestS3 runs the suite against a real S3-compatible server (package
// s3test), each store under a prefix of its own in one bucket.
func TestS3(t *testing.T) {
	o := s3test.Start(t)
	n := 0
	blobtest.Run(t, blobtest.Options{
		New: func(t *testing.T) blob.Store {
			n++
			o := o
			o.Prefix = fmt.Sprintf("t%d/", n)
			s, err := blob.NewS3(o)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Check(t.Context()); err != nil {
				t.Fatal(err)
			}
			return s
		},
		Leftovers: func(t *testing.T, s blob.Store) int {
			c := s.(*blob.S3).Client()
			k := 0
			for u := range c.ListIncompleteUploads(t.Context(), s3test.Bucket, "", true) {
				if u.Err != nil {
					t.Fatal(u.Err)
				}
				k++
			}
			return k
		},
	})
}

func TestParseS3URL(t *testing.T) {
	o, err := blob.ParseS3URL("s3://bkt/some/prefix?endpoint=127.0.0.1:9000&region=eu-west-1&insecure=true")
	if err != nil || o.Bucket != "bkt" || o.Prefix != "some/prefix/" || o.Endpoint != "127.0.0.1:9000" || o.Region != "eu-west-1" || !o.Insecure {
		t.Fatalf("ParseS3URL = %+v, %v", o, err)
	}
	if o, err := blob.ParseS3URL("s3://bkt"); err != nil || o.Prefix != "" || o.Endpoint != "" || o.Insecure {
		t.Fatalf("ParseS3URL(s3://bkt) = %+v, %v", o, err)
	}
	for _, bad := range []string{"s3://", "http://bkt", "s3://key:secret@bkt", "s3://bkt/../x", "s3://bkt?insecure=maybe", "s3://bkt?acl=public"} {
		if _, err := blob.ParseS3URL(bad); err == nil {
			t.Errorf("ParseS3URL accepted %q", bad)
		}
	}
}
