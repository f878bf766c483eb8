package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultChunkSize is the size of the chunks Postgres stores a blob in.
const DefaultChunkSize = 1 << 20

// DefaultGrace is how long Postgres keeps a replaced or deleted blob's
// chunks for readers still streaming it, and how long an upload may go
// without writing a chunk before a sweep takes it for abandoned.
const DefaultGrace = time.Hour

// sweepEvery spaces the sweeps Postgres runs on its own.
const sweepEvery = time.Minute

// PostgresOptions configure a Postgres store. Zero values mean the
// documented default.
type PostgresOptions struct {
	// ChunkSize is the length of each stored chunk; 0 means
	// DefaultChunkSize.
	ChunkSize int
	// Grace is DefaultGrace's; 0 means DefaultGrace.
	Grace time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Postgres is a Store in the tables blob_versions and blob_chunks of a
// PostgreSQL database (created by the postgres store's migration 0011). A
// Put writes its chunks one statement each, so it borrows a pool
// connection only briefly at a time, and makes the blob live in one short
// transaction at the end; a Get reads one chunk at a time. Neither holds
// more than one chunk in memory.
type Postgres struct {
	pool  *pgxpool.Pool
	chunk int
	grace time.Duration
	now   func() time.Time

	// lastSweep is when the latest sweep started, Unix milliseconds.
	lastSweep atomic.Int64
}

var _ Store = (*Postgres)(nil)

// NewPostgres returns the Store in pool's database, whose schema the
// postgres store's migrations made.
func NewPostgres(pool *pgxpool.Pool, o PostgresOptions) *Postgres {
	p := &Postgres{pool: pool, chunk: o.ChunkSize, grace: o.Grace, now: o.Now}
	if p.chunk <= 0 {
		p.chunk = DefaultChunkSize
	}
	if p.grace <= 0 {
		p.grace = DefaultGrace
	}
	if p.now == nil {
		p.now = time.Now
	}
	return p
}

// Pool is the pool the store reads and writes through.
func (p *Postgres) Pool() *pgxpool.Pool { return p.pool }

func (p *Postgres) ms() int64 { return p.now().UnixMilli() }

// lockSpace is the first key of the advisory locks that order the
// commits of one blob key ("blob").
const lockSpace = 0x626c6f62

// Put implements Store.
func (p *Postgres) Put(ctx context.Context, key string, r io.Reader, limit int64) (size int64, sum string, err error) {
	if err := ValidKey(key); err != nil {
		return 0, "", err
	}
	var id int64
	now := p.ms()
	if err := p.pool.QueryRow(ctx, `INSERT INTO blob_versions (key, state, chunk_size, created_at, changed_at)
		VALUES ($1, 'uploading', $2, $3, $3) RETURNING id`, key, p.chunk, now).Scan(&id); err != nil {
		return 0, "", fmt.Errorf("put blob %s: begin: %w", key, err)
	}
	defer func() {
		if err != nil {
			// Nothing left behind: the version and its chunks go now
			// (or, if this fails too, with the next sweep).
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_, _ = p.pool.Exec(dctx, `DELETE FROM blob_versions WHERE id = $1`, id)
		}
	}()
	h := sha256.New()
	src := io.LimitReader(ctxReader{ctx, r}, limit+1)
	cw := p.startChunks(ctx, id)
	defer cw.finish() // on an early return; a second finish is a no-op
	for n := 0; ; n++ {
		buf := <-cw.free
		k, rerr := io.ReadFull(src, buf)
		size += int64(k)
		if size > limit {
			return size, "", ErrTooLarge
		}
		if k > 0 {
			h.Write(buf[:k])
			if err := cw.send(n, buf[:k]); err != nil {
				return size, "", fmt.Errorf("put blob %s: %w", key, err)
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return size, "", fmt.Errorf("put blob %s: read: %w", key, rerr)
		}
	}
	if err := cw.finish(); err != nil {
		return size, "", fmt.Errorf("put blob %s: %w", key, err)
	}
	sum = hex.EncodeToString(h.Sum(nil))
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, lockSpace, key); err != nil {
			return err
		}
		now := p.ms()
		if _, err := tx.Exec(ctx, `UPDATE blob_versions SET state = 'dead', changed_at = $2 WHERE key = $1 AND state = 'live'`, key, now); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE blob_versions SET state = 'live', size = $2, sha256 = $3, changed_at = $4
			WHERE id = $1 AND state = 'uploading'`, id, size, sum, now)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return errors.New("the upload was swept away as abandoned")
		}
		return nil
	})
	if err != nil {
		return size, "", fmt.Errorf("put blob %s: commit: %w", key, err)
	}
	p.maybeSweep(ctx)
	return size, sum, nil
}

// chunkWriter inserts the chunks of one upload in order in a goroutine of
// its own, so that one chunk is written while the next is read: two
// buffers go round between the reader and the writer.
type chunkWriter struct {
	jobs   chan chunkJob
	free   chan []byte   // buffers to read into
	failed chan struct{} // closed once err is set
	done   chan struct{} // closed when the goroutine has returned
	err    error
	ended  bool
}

type chunkJob struct {
	n    int
	data []byte
}

func (p *Postgres) startChunks(ctx context.Context, id int64) *chunkWriter {
	w := &chunkWriter{jobs: make(chan chunkJob), free: make(chan []byte, 2), failed: make(chan struct{}), done: make(chan struct{})}
	w.free <- make([]byte, p.chunk)
	w.free <- make([]byte, p.chunk)
	go func() {
		defer close(w.done)
		for j := range w.jobs {
			if w.err == nil {
				if _, err := p.pool.Exec(ctx, `WITH c AS (INSERT INTO blob_chunks (version, n, data) VALUES ($1, $2, $3))
					UPDATE blob_versions SET changed_at = $4 WHERE id = $1`, id, j.n, j.data, p.ms()); err != nil {
					w.err = fmt.Errorf("chunk %d: %w", j.n, err)
					close(w.failed)
				}
			}
			w.free <- j.data[:cap(j.data)]
		}
	}()
	return w
}

// send hands chunk n to the writer; it fails once a chunk failed.
func (w *chunkWriter) send(n int, data []byte) error {
	select {
	case <-w.failed:
		return w.err
	case w.jobs <- chunkJob{n, data}:
		return nil
	}
}

// finish waits for the chunks sent and returns the first error.
func (w *chunkWriter) finish() error {
	if !w.ended {
		w.ended = true
		close(w.jobs)
		<-w.done
	}
	return w.err
}

// Get implements Store.
func (p *Postgres) Get(ctx context.Context, key string) (io.ReadSeekCloser, Info, error) {
	if err := ValidKey(key); err != nil {
		return nil, Info{}, err
	}
	rd := &pgReader{ctx: ctx, pool: p.pool, key: key, cur: -1}
	info := Info{Key: key}
	err := p.pool.QueryRow(ctx, `SELECT id, size, sha256, chunk_size FROM blob_versions WHERE key = $1 AND state = 'live'`, key).
		Scan(&rd.id, &info.Size, &info.SHA256, &rd.chunk)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, Info{}, fmt.Errorf("blob %s: %w", key, ErrNotExist)
	}
	if err != nil {
		return nil, Info{}, fmt.Errorf("get blob %s: %w", key, err)
	}
	rd.size = info.Size
	return rd, info, nil
}

// pgReader reads one version of a blob, one chunk at a time.
type pgReader struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	key   string
	id    int64
	size  int64
	chunk int64
	pos   int64
	cur   int64 // the chunk in data; -1 for none
	data  []byte
}

func (r *pgReader) Read(b []byte) (int, error) {
	if r.pos >= r.size {
		return 0, io.EOF
	}
	n := r.pos / r.chunk
	if n != r.cur {
		if err := r.fetch(n); err != nil {
			return 0, err
		}
		if want := min(r.chunk, r.size-n*r.chunk); int64(len(r.data)) != want {
			return 0, fmt.Errorf("read blob %s: chunk %d is %d bytes, not %d", r.key, n, len(r.data), want)
		}
		r.cur = n
	}
	k := copy(b, r.data[r.pos-n*r.chunk:])
	r.pos += int64(k)
	return k, nil
}

// fetch reads chunk n into r.data, reusing its memory: the bytes are
// scanned as the driver's own and copied before the row is released.
func (r *pgReader) fetch(n int64) error {
	rows, err := r.pool.Query(r.ctx, `SELECT data FROM blob_chunks WHERE version = $1 AND n = $2`, r.id, n)
	if err != nil {
		return fmt.Errorf("read blob %s: chunk %d: %w", r.key, n, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read blob %s: chunk %d: %w", r.key, n, err)
		}
		return fmt.Errorf("read blob %s: it was deleted while being read: %w", r.key, io.ErrUnexpectedEOF)
	}
	var b pgtype.DriverBytes
	if err := rows.Scan(&b); err != nil {
		return fmt.Errorf("read blob %s: chunk %d: %w", r.key, n, err)
	}
	r.data = append(r.data[:0], b...)
	rows.Close()
	return rows.Err()
}

func (r *pgReader) Seek(offset int64, whence int) (int64, error) {
	pos, err := seekPos(r.pos, r.size, offset, whence)
	if err != nil {
		return 0, err
	}
	r.pos = pos
	return pos, nil
}

func (r *pgReader) Close() error {
	r.data = nil
	return nil
}

// Delete implements Store.
func (p *Postgres) Delete(ctx context.Context, key string) error {
	if err := ValidKey(key); err != nil {
		return err
	}
	if _, err := p.pool.Exec(ctx, `UPDATE blob_versions SET state = 'dead', changed_at = $2 WHERE key = $1 AND state = 'live'`, key, p.ms()); err != nil {
		return fmt.Errorf("delete blob %s: %w", key, err)
	}
	p.maybeSweep(ctx)
	return nil
}

// List implements Store.
func (p *Postgres) List(ctx context.Context, prefix string) ([]Info, error) {
	if err := validPrefix(prefix); err != nil {
		return nil, err
	}
	rows, err := p.pool.Query(ctx, `SELECT key, size, sha256 FROM blob_versions
		WHERE state = 'live' AND starts_with(key, $1) ORDER BY key`, prefix)
	if err != nil {
		return nil, fmt.Errorf("list blobs %q: %w", prefix, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Info, error) {
		var in Info
		err := row.Scan(&in.Key, &in.Size, &in.SHA256)
		return in, err
	})
	if err != nil {
		return nil, fmt.Errorf("list blobs %q: %w", prefix, err)
	}
	return out, nil
}

// DeletePrefix implements Store.
func (p *Postgres) DeletePrefix(ctx context.Context, prefix string) error {
	if err := validPrefix(prefix); err != nil {
		return err
	}
	if _, err := p.pool.Exec(ctx, `UPDATE blob_versions SET state = 'dead', changed_at = $2
		WHERE state = 'live' AND starts_with(key, $1)`, prefix, p.ms()); err != nil {
		return fmt.Errorf("delete blobs %q: %w", prefix, err)
	}
	p.maybeSweep(ctx)
	return nil
}

// Sweep removes, with their chunks, the versions replaced or deleted more
// than Grace ago and the uploads that wrote no chunk for Grace, and
// returns how many. Postgres sweeps on its own at most once a minute, after
// a Put or a Delete.
func (p *Postgres) Sweep(ctx context.Context) (int64, error) {
	p.lastSweep.Store(p.ms())
	tag, err := p.pool.Exec(ctx, `DELETE FROM blob_versions WHERE state <> 'live' AND changed_at < $1`,
		p.now().Add(-p.grace).UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("sweep blobs: %w", err)
	}
	return tag.RowsAffected(), nil
}

// maybeSweep sweeps when the latest sweep is more than sweepEvery ago.
func (p *Postgres) maybeSweep(ctx context.Context) {
	last := p.lastSweep.Load()
	if p.ms()-last < sweepEvery.Milliseconds() || !p.lastSweep.CompareAndSwap(last, p.ms()) {
		return
	}
	_, _ = p.Sweep(ctx)
}
