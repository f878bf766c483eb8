package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/outpost-sh/outpost/internal/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// parseCursor reads a fleet API cursor ("" means the beginning).
func parseCursor(c string) (int64, error) {
	if c == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(c, 10, 64)
	if err != nil || v < 0 {
		return 0, errBadRequest("The cursor %q is not one this server issued.", c)
	}
	return v, nil
}

func formatCursor(rev int64) string { return strconv.FormatInt(rev, 10) }

// parseFirst reads a page size bounded by [1, max].
func parseFirst(v string, def, max int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		return 0, errBadRequest("first must be a number from 1 to %d.", max)
	}
	return n, nil
}

// queueOutpostFilter resolves the outpost query parameter, defaulting to
// the token's own outpost.
func (s *Server) queueOutpostFilter(ctx context.Context, ref string) (string, error) {
	if ref == "" {
		return principalFrom(ctx).outpostID, nil
	}
	o, err := s.resolveOutpost(ctx, ref)
	if err != nil {
		return "", err
	}
	return o.ID, nil
}

func (s *Server) listQueue(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	q := r.URL.Query()
	outpostID, err := s.queueOutpostFilter(ctx, q.Get("outpost"))
	if err != nil {
		return err
	}
	after, err := parseCursor(q.Get("cursor"))
	if err != nil {
		return err
	}
	if q.Get("watch") == "true" {
		return s.watchQueue(w, r, outpostID, after)
	}
	first, err := parseFirst(q.Get("first"), 100, 200)
	if err != nil {
		return err
	}
	phase := q.Get("phase")
	if phase != "" && phase != api.PhasePending && phase != api.PhaseClaimed {
		return errBadRequest("phase must be pending or claimed.")
	}
	maxRev, err := s.store.MaxRev(ctx)
	if err != nil {
		return fmt.Errorf("max rev: %w", err)
	}
	rows, total, err := s.store.ListQueue(ctx, store.QueueFilter{
		OutpostID: outpostID, Phase: phase, AcceptorID: q.Get("acceptor_id"), AfterRev: after, Limit: first + 1,
	})
	if err != nil {
		return fmt.Errorf("list queue: %w", err)
	}
	list := api.QueueList{Items: []api.QueueEntry{}, Total: total, Cursor: formatCursor(after)}
	if len(rows) > first {
		rows, list.HasNextPage = rows[:first], true
	}
	for _, e := range rows {
		list.Items = append(list.Items, toAPIEntry(e))
	}
	switch {
	case len(rows) > 0:
		list.Cursor = formatCursor(rows[len(rows)-1].Rev)
	case after == 0:
		// Nothing matched and the caller saw nothing yet: a watch may
		// start from now without replaying history.
		list.Cursor = formatCursor(maxRev)
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// entryFor loads an entry the caller may see; 404 when gone.
func (s *Server) entryFor(ctx context.Context, sessionID string) (store.QueueEntry, error) {
	e, err := s.store.GetQueueEntry(ctx, sessionID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && e.Deleted) {
		return store.QueueEntry{}, errNotFound("Session %s is not in any queue.", sessionID)
	}
	if err != nil {
		return store.QueueEntry{}, fmt.Errorf("get queue entry %s: %w", sessionID, err)
	}
	if err := principalFrom(ctx).checkOutpost(e.OutpostID); err != nil {
		return store.QueueEntry{}, err
	}
	return e, nil
}

func (s *Server) getQueueEntry(w http.ResponseWriter, r *http.Request) error {
	e, err := s.entryFor(r.Context(), r.PathValue("session"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toAPIEntry(e))
	return nil
}

func decodeAcceptor(w http.ResponseWriter, r *http.Request) (api.ClaimRequest, error) {
	var req api.ClaimRequest
	if err := decode(w, r, &req); err != nil {
		return req, err
	}
	if req.AcceptorID == "" || len(req.AcceptorID) > 200 {
		return req, errBadRequest("acceptor_id is required (at most 200 characters).")
	}
	if len(req.Reason) > 1000 {
		return req, errBadRequest("reason is at most 1,000 characters.")
	}
	return req, nil
}

func (s *Server) claimHandler(w http.ResponseWriter, r *http.Request) error {
	return s.claimAction(w, r, func(ctx context.Context, id string, req api.ClaimRequest) (api.QueueEntry, error) {
		res, err := s.claim(ctx, id, req.AcceptorID)
		if err != nil {
			return api.QueueEntry{}, err
		}
		out := toAPIEntry(res.entry)
		out.Status.ConnectToken = res.token
		out.Status.GatewayURL = s.gatewayURL
		return out, nil
	})
}

func (s *Server) releaseHandler(w http.ResponseWriter, r *http.Request) error {
	return s.claimAction(w, r, func(ctx context.Context, id string, req api.ClaimRequest) (api.QueueEntry, error) {
		e, err := s.release(ctx, id, req.AcceptorID, req.Reason)
		return toAPIEntry(e), err
	})
}

// claimAction decodes {"acceptor_id"}, checks the caller may see the entry
// and runs act, answering 404 when the entry is gone meanwhile.
func (s *Server) claimAction(w http.ResponseWriter, r *http.Request, act func(ctx context.Context, id string, req api.ClaimRequest) (api.QueueEntry, error)) error {
	ctx := r.Context()
	id := r.PathValue("session")
	req, err := decodeAcceptor(w, r)
	if err != nil {
		return err
	}
	if _, err := s.entryFor(ctx, id); err != nil {
		return err
	}
	out, err := act(ctx, id, req)
	if errors.Is(err, errGone) {
		return errNotFound("Session %s is not in any queue.", id)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// watchQueue streams queue changes after a cursor as server-sent events,
// ending the stream within WatchMaxDuration so clients reconnect.
func (s *Server) watchQueue(w http.ResponseWriter, r *http.Request, outpostID string, after int64) error {
	flusher, ok := w.(http.Flusher)
	if !ok {
		return errors.New("response writer cannot flush")
	}
	release, err := s.streams.acquire(w, r)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.WatchMaxDuration)
	defer cancel()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": watching\n\n")
	flusher.Flush()
	keepalive := time.NewTicker(s.opts.KeepaliveInterval)
	defer keepalive.Stop()
	for {
		wake := s.queueChanged.wait() // before reading, so no change slips between
		rows, _, err := s.store.ListQueue(ctx, store.QueueFilter{OutpostID: outpostID, AfterRev: after, Limit: 500, IncludeDeleted: true})
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("watch queue", "err", err)
			}
			return nil
		}
		for _, e := range rows {
			ev := api.WatchEvent{Type: api.WatchModified, Object: toAPIEntry(e), Cursor: formatCursor(e.Rev)}
			if e.Deleted {
				ev.Type = api.WatchDeleted
			}
			b, _ := json.Marshal(ev)
			if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
				return nil
			}
			after = e.Rev
		}
		if len(rows) > 0 {
			flusher.Flush()
		}
		if len(rows) == 500 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-keepalive.C:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
				return nil
			}
			flusher.Flush()
		}
	}
}
