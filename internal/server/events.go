package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
)

func (s *Server) sessionEvents(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	sess, err := s.sessionFor(ctx, r.PathValue("session"))
	if err != nil {
		return err
	}
	q := r.URL.Query()
	after := int64(0)
	if v := q.Get("after"); v != "" {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil || after < 0 {
			return errBadRequest("after must be a non-negative event sequence number.")
		}
	}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		if v := r.Header.Get("Last-Event-ID"); v != "" {
			if id, err := strconv.ParseInt(v, 10, 64); err == nil && id > after {
				after = id
			}
		}
		return s.followEvents(w, r, sess.ID, after)
	}
	if v := q.Get("tail"); v != "" {
		return s.tailEvents(w, r, sess.ID, v)
	}
	limit, err := parseFirst(q.Get("limit"), 500, 1000)
	if err != nil {
		return err
	}
	evs, err := s.store.ListEvents(ctx, sess.ID, after, limit+1)
	if err != nil {
		return fmt.Errorf("list events: %w", err)
	}
	list := api.EventList{Items: evs, Next: after}
	if len(evs) > limit {
		list.Items, list.HasNextPage = evs[:limit], true
	}
	writeEventList(w, list)
	return nil
}

// writeEventList answers list, its Next the last event's seq (where a
// reader picks up) when it holds any, and its items [] rather than null.
func writeEventList(w http.ResponseWriter, list api.EventList) {
	if list.Items == nil {
		list.Items = []api.Event{}
	}
	if n := len(list.Items); n > 0 {
		list.Next = list.Items[n-1].Seq
	}
	writeJSON(w, http.StatusOK, list)
}

// tailEvents answers ?tail=N: the newest N (1–1000) events, in order; Next
// is the last one's seq, where a follower picks up.
func (s *Server) tailEvents(w http.ResponseWriter, r *http.Request, sessionID, v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		return errBadRequest("tail must be a number of events from 1 to 1000.")
	}
	if r.URL.Query().Get("after") != "" || r.URL.Query().Get("limit") != "" {
		return errBadRequest("tail cannot be combined with after or limit.")
	}
	evs, err := s.store.TailEvents(r.Context(), sessionID, n)
	if err != nil {
		return fmt.Errorf("tail events: %w", err)
	}
	writeEventList(w, api.EventList{Items: evs})
	return nil
}

// followEvents streams a session's transcript after a sequence number,
// then its live events, until the end event. Live output past the
// transcript cap arrives with seq 0 and is not replayed.
func (s *Server) followEvents(w http.ResponseWriter, r *http.Request, sessionID string, after int64) error {
	ctx := r.Context()
	flusher, ok := w.(http.Flusher)
	if !ok {
		return errors.New("response writer cannot flush")
	}
	release, err := s.streams.acquire(w, r)
	if err != nil {
		return err
	}
	defer release()
	sub := s.topics.follow(sessionID) // before replay, so nothing slips between
	defer s.topics.unsubscribe(sessionID, sub)

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()

	// One buffer for the whole stream. api.AppendEventJSON writes what
	// encoding/json would, without HTML escaping (output is text, not
	// markup), and much faster for output events.
	var buf []byte
	send := func(ev api.Event) (ended bool, err error) {
		buf = buf[:0]
		if ev.Seq != 0 {
			if ev.Seq <= after {
				return false, nil
			}
			after = ev.Seq
			buf = append(buf, "id: "...)
			buf = strconv.AppendInt(buf, ev.Seq, 10)
			buf = append(buf, '\n')
		}
		buf = append(buf, "data: "...)
		if buf, err = api.AppendEventJSON(buf, &ev); err != nil {
			return false, err
		}
		buf = append(buf, '\n', '\n')
		_, err = w.Write(buf)
		return ev.Type == api.EventEnd, err
	}

	// replay sends stored events after the last one sent, up to and
	// including upTo (0: all). Events are published after they commit, and
	// not always in order, so a live event past a gap first replays the gap.
	replay := func(upTo int64) (ended bool, err error) {
		for {
			evs, err := s.store.ListEvents(ctx, sessionID, after, 500)
			if err != nil {
				return false, err
			}
			for _, ev := range evs {
				if upTo > 0 && ev.Seq > upTo {
					return false, nil
				}
				if ended, err := send(ev); err != nil || ended {
					return ended, err
				}
			}
			if len(evs) < 500 {
				return false, nil
			}
		}
	}
	deliver := func(ev api.Event) (bool, error) {
		if ev.Seq > after+1 {
			if ended, err := replay(ev.Seq - 1); err != nil || ended {
				return ended, err
			}
		}
		return send(ev)
	}

	if ended, err := replay(0); err != nil || ended {
		flusher.Flush()
		return nil
	}
	flusher.Flush()
	keepalive := time.NewTicker(s.opts.KeepaliveInterval)
	defer keepalive.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sub.lagged:
			return nil // the client resumes from its last id
		case ev := <-sub.ch:
			ended, err := deliver(ev)
			// Drain what is already queued before flushing.
			for !ended && err == nil && len(sub.ch) > 0 {
				ended, err = deliver(<-sub.ch)
			}
			flusher.Flush()
			if err != nil || ended {
				return nil
			}
		case <-sub.poked:
			// Another replica committed events (fanout.go).
			ended, err := replay(sub.pokedUpTo())
			flusher.Flush()
			if err != nil || ended {
				return nil
			}
		case <-keepalive.C:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
				return nil
			}
			flusher.Flush()
		}
	}
}
