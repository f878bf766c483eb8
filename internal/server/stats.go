package server

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// workerSampleInterval spaces the samples of live acceptors the fleet's
// worker series are made of.
const workerSampleInterval = time.Minute

// stats is GET /v1/stats: the fleet's series over a window, of one
// outpost (?outpost=) or of every outpost the caller may see; an
// outpost-limited token sees its own outpost's.
func (s *Server) stats(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	win, err := api.ParseStatsWindow(q.Get("window"))
	if err != nil {
		return errBadRequest("The %s.", err)
	}
	outpostID, err := s.queueOutpostFilter(r.Context(), q.Get("outpost"))
	if err != nil {
		return err
	}
	out, err := store.FleetStats(r.Context(), s.store, store.StatsQuery{OutpostID: outpostID, Window: win, Now: s.now()})
	if err != nil {
		return fmt.Errorf("fleet stats: %w", err)
	}
	if outpostID != "" {
		o, err := s.store.GetOutpost(r.Context(), outpostID)
		if err != nil {
			return fmt.Errorf("get outpost %s: %w", outpostID, err)
		}
		out.Outpost, out.MaxRunning = o.Name, o.MaxRunning
	} else {
		os, err := s.store.ListOutposts(r.Context())
		if err != nil {
			return fmt.Errorf("list outposts: %w", err)
		}
		out.MaxRunning = sumMaxRunning(os)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// sumMaxRunning is the cap on running sessions of os together: 0 (none)
// as soon as one of them has none.
func sumMaxRunning(os []store.Outpost) int {
	sum := 0
	for _, o := range os {
		if o.MaxRunning == 0 {
			return 0
		}
		sum += o.MaxRunning
	}
	return sum
}

// sampleWorkers writes, every workerSampleInterval until ctx ends, how
// many acceptors each outpost has live and how busy they are. Every
// server samples; the store keeps the first sample of an outpost's
// minute, so replicas on one database write each minute once without a
// lock, and a minute is still sampled while any one of them runs.
func (s *Server) sampleWorkers(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.sampleWorkersOnce(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("sample live workers", "err", err)
		}
		now := s.now()
		t.Reset(now.Truncate(workerSampleInterval).Add(workerSampleInterval).Sub(now))
	}
}

// sampleWorkersOnce writes the samples of the current minute.
func (s *Server) sampleWorkersOnce(ctx context.Context) error {
	now := s.now()
	live, err := s.store.RecentWorkers(ctx, "", now)
	if err != nil {
		return err
	}
	_, err = s.store.PutWorkerSamples(ctx, workerSamples(live, now.Truncate(workerSampleInterval)), now.Add(-store.WorkerSampleKeep))
	return err
}

// workerSamples sums live acceptors per outpost into samples taken at at.
func workerSamples(live []store.Worker, at time.Time) []store.WorkerSample {
	var out []store.WorkerSample
	for _, w := range live {
		if len(out) == 0 || out[len(out)-1].OutpostID != w.OutpostID {
			out = append(out, store.WorkerSample{OutpostID: w.OutpostID, At: at})
		}
		sm := &out[len(out)-1]
		sm.Workers++
		sm.Capacity += max(w.Info.MaxSessions, 1)
		busy := w.Info.ActiveSessions
		if busy == 0 && w.Info.SessionID != "" {
			busy = 1
		}
		sm.Busy += busy
	}
	return out
}
