package sqlstore

import (
	"context"
	"time"

	"github.com/outpost-sh/outpost/internal/store"
)

// Statements of the fleet's series, the same in both dialects.
const (
	// sessionTimesSQL lists the sessions of outpost $1 (every outpost when
	// $1 is '') created before $3 and not ended before $2: those ended in
	// the window through sessions_ended, and those not ended yet.
	sessionTimesSQL = `SELECT outpost_id, status, created_at, started_at, ended_at FROM sessions
		WHERE ended_at >= $2 AND created_at < $3 AND ($1 = '' OR outpost_id = $1)
		UNION ALL
		SELECT outpost_id, status, created_at, started_at, ended_at FROM sessions
		WHERE ended_at IS NULL AND created_at < $3 AND ($1 = '' OR outpost_id = $1)`
	// workerSamplesSQL lists the samples of outpost $1 (every outpost when
	// $1 is '') taken at or after $2 and before $3.
	workerSamplesSQL = `SELECT outpost_id, at, workers, capacity, busy FROM worker_samples
		WHERE at >= $2 AND at < $3 AND ($1 = '' OR outpost_id = $1) ORDER BY at, outpost_id`
	// insertWorkerSampleSQL writes a sample unless that outpost's minute
	// has one: the first server to sample a minute is its only writer.
	insertWorkerSampleSQL = `INSERT INTO worker_samples (outpost_id, at, workers, capacity, busy)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (outpost_id, at) DO NOTHING`
	pruneWorkerSamplesSQL = `DELETE FROM worker_samples WHERE at < $1`
)

// SessionTimes returns the moments of the sessions of outpostID ("":
// every outpost) created before to and not ended before from.
func (s *Store) SessionTimes(ctx context.Context, outpostID string, from, to time.Time) ([]store.SessionTimes, error) {
	out, err := QueryAll(ctx, s.db, scanSessionTimes, sessionTimesSQL, outpostID, MS(from), MS(to))
	if err != nil {
		return nil, s.errorf(err, "list session times")
	}
	return out, nil
}

func scanSessionTimes(sc Scanner) (store.SessionTimes, error) {
	var t store.SessionTimes
	var created int64
	var started, ended nullInt64
	if err := sc.Scan(&t.OutpostID, &t.Status, &created, &started, &ended); err != nil {
		return store.SessionTimes{}, err
	}
	t.CreatedAt = FromMS(created)
	t.StartedAt, t.EndedAt = started.timePtr(), ended.timePtr()
	return t, nil
}

// WorkerSamples returns the samples of outpostID ("": every outpost) in
// [from, to), by time.
func (s *Store) WorkerSamples(ctx context.Context, outpostID string, from, to time.Time) ([]store.WorkerSample, error) {
	out, err := QueryAll(ctx, s.db, func(sc Scanner) (store.WorkerSample, error) {
		var w store.WorkerSample
		var at int64
		err := sc.Scan(&w.OutpostID, &at, &w.Workers, &w.Capacity, &w.Busy)
		w.At = FromMS(at)
		return w, err
	}, workerSamplesSQL, outpostID, MS(from), MS(to))
	if err != nil {
		return nil, s.errorf(err, "list worker samples")
	}
	return out, nil
}

// PutWorkerSamples writes samples, keeping those already written for an
// outpost's minute, and deletes the samples taken before pruneBefore, in
// one transaction. It returns how many it wrote.
func (s *Store) PutWorkerSamples(ctx context.Context, samples []store.WorkerSample, pruneBefore time.Time) (int, error) {
	var written int
	err := s.db.Write(ctx, nil, func(tx Tx) error {
		written = 0
		if _, err := tx.Exec(ctx, pruneWorkerSamplesSQL, MS(pruneBefore)); err != nil {
			return err
		}
		for _, w := range samples {
			n, err := tx.Exec(ctx, insertWorkerSampleSQL, w.OutpostID, MS(w.At), w.Workers, w.Capacity, w.Busy)
			if err != nil {
				return err
			}
			written += int(n)
		}
		return nil
	})
	if err != nil {
		return 0, s.errorf(err, "put worker samples")
	}
	return written, nil
}
