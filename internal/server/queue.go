package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/queuefeed"
	"github.com/outpost-sh/outpost/internal/store"
)

// parseCursor reads a fleet API cursor ("" means the beginning). maxRev is
// the store's highest rev: every cursor this server issued is at most it,
// so a higher one comes from elsewhere (another deployment, a database
// that was reset). ok is false for a cursor this server did not issue.
func parseCursor(c string, maxRev int64) (rev int64, ok bool) {
	if c == "" {
		return 0, true
	}
	v, err := strconv.ParseInt(c, 10, 64)
	if err != nil || v < 0 || v > maxRev {
		return 0, false
	}
	return v, true
}

func errForeignCursor(c string) error {
	return errBadRequest("The cursor %q is not one this server issued; list without a cursor to start again.", c)
}

func formatCursor(rev int64) string { return queuefeed.FormatCursor(rev) }

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
		p := principalFrom(ctx)
		if p.outpostID == "" && p.limited() {
			return s.onlyOutpost(p)
		}
		return p.outpostID, nil
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
	ref := q.Get("outpost")
	if ref == "" {
		ref = q.Get("pool") // the parameter's name in older fleet API clients
	}
	outpostID, err := s.queueOutpostFilter(ctx, ref)
	if err != nil {
		return err
	}
	maxRev, err := s.store.MaxRev(ctx)
	if err != nil {
		return fmt.Errorf("max rev: %w", err)
	}
	after, ok := parseCursor(q.Get("cursor"), maxRev)
	if q.Get("watch") == "true" {
		heldBy := q.Get(api.QueryHeldBy)
		if q.Has(api.QueryHeldBy) && api.ValidateAcceptorID(heldBy) != nil {
			return errBadRequest("%s must be the acceptor id whose entries to watch: use %s.", api.QueryHeldBy, api.AcceptorIDRule)
		}
		if q.Get("cursor") == "" {
			// No cursor: the current state, then live changes. A replay
			// from the first change would open with the DELETED events of
			// sessions that ended before the watch, which a client that
			// knew nothing of them has no use for.
			return s.watchQueue(w, r, outpostID, watchFrom{From: queuefeed.From{Relist: true, MaxRev: maxRev, HeldBy: heldBy}, fresh: true})
		}
		if !ok {
			return s.watchQueue(w, r, outpostID, watchFrom{From: queuefeed.From{Relist: true, MaxRev: maxRev, HeldBy: heldBy}})
		}
		if after > 0 {
			// Tombstones up to the horizon are pruned (queuefeed.Prune):
			// a replay from below it could miss a deletion.
			horizon, err := s.store.QueueHorizon(ctx, outpostID)
			if err != nil {
				return fmt.Errorf("queue horizon: %w", err)
			}
			if after < horizon {
				return s.watchQueue(w, r, outpostID, watchFrom{From: queuefeed.From{Relist: true, MaxRev: maxRev, HeldBy: heldBy}, stale: true})
			}
		}
		return s.watchQueue(w, r, outpostID, watchFrom{From: queuefeed.From{After: after, HeldBy: heldBy}})
	}
	if q.Has(api.QueryHeldBy) {
		return errBadRequest("%s narrows a watch (watch=true); to list the entries one acceptor holds, use acceptor_id.", api.QueryHeldBy)
	}
	if !ok {
		return errForeignCursor(q.Get("cursor"))
	}
	first, err := parseFirst(q.Get("first"), 100, 200)
	if err != nil {
		return err
	}
	phase := q.Get("phase")
	if phase != "" && phase != api.PhasePending && phase != api.PhaseClaimed {
		return errBadRequest("phase must be pending or claimed.")
	}
	if a := q.Get("acceptor_id"); a != "" {
		if err := checkAcceptorID(a); err != nil {
			return err
		}
	}
	byPriority := false
	switch q.Get("order") {
	case "", "rev":
	case "priority":
		// The claim order is a view of the queue as it is now, not a
		// change feed: it has one page, and its cursor starts a watch.
		if after != 0 {
			return errBadRequest("order=priority lists the queue as it is now, from the top: give no cursor.")
		}
		byPriority = true
	default:
		return errBadRequest("order must be rev (the default: oldest change first, pages by cursor) or priority (the claim order: higher priority first, then oldest).")
	}
	rows, total, err := s.store.ListQueue(ctx, store.QueueFilter{
		OutpostID: outpostID, Phase: phase, AcceptorID: q.Get("acceptor_id"), AfterRev: after, Limit: first + 1,
		ByPriority: byPriority,
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
	case byPriority:
		list.Cursor = formatCursor(maxRev)
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

// entryFor loads an entry the caller may see; 404 when gone, and when
// outside the caller's token, as if missing.
func (s *Server) entryFor(ctx context.Context, sessionID string) (store.QueueEntry, error) {
	e, err := s.store.GetQueueEntry(ctx, sessionID)
	if err == nil && (e.Deleted || !principalFrom(ctx).allowsOutpost(e.OutpostID)) {
		err = store.ErrNotFound
	}
	if errors.Is(err, store.ErrNotFound) {
		return store.QueueEntry{}, errNotQueued(sessionID)
	}
	if err != nil {
		return store.QueueEntry{}, fmt.Errorf("get queue entry %s: %w", sessionID, err)
	}
	return e, nil
}

// errNotQueued is the 404 of a session with no queue entry the caller may
// see.
func errNotQueued(sessionID string) error {
	return errNotFound("Session %s is not in any queue.", sessionID)
}

func (s *Server) getQueueEntry(w http.ResponseWriter, r *http.Request) error {
	e, err := s.entryFor(r.Context(), r.PathValue("session"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toAPIEntry(e))
	return nil
}

// checkAcceptorID answers 400 unless id is a valid acceptor id
// (api.ValidateAcceptorID), the one rule of claims, releases, machine
// events, queue filters and presence.
func checkAcceptorID(id string) error {
	if id == "" {
		return errBadRequest("acceptor_id is required: use %s.", api.AcceptorIDRule)
	}
	if api.ValidateAcceptorID(id) != nil {
		shown := id
		if len(shown) > 64 {
			shown = shown[:64] + "..."
		}
		return errBadRequest("acceptor_id %q is not valid: use %s.", shown, api.AcceptorIDRule)
	}
	return nil
}

func decodeAcceptor(w http.ResponseWriter, r *http.Request) (api.ClaimRequest, error) {
	var req api.ClaimRequest
	if err := decode(w, r, &req); err != nil {
		return req, err
	}
	if err := checkAcceptorID(req.AcceptorID); err != nil {
		return req, err
	}
	if len(req.Reason) > 1000 {
		return req, errBadRequest("reason is at most 1,000 characters.")
	}
	return req, nil
}

// errFitUnchecked aborts a claim of an entry with requirements that the
// claimer's machine was not checked against yet.
var errFitUnchecked = errors.New("the entry's requirements are not checked yet")

func (s *Server) claimHandler(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id := r.PathValue("session")
	req, err := decodeAcceptor(w, r)
	if err != nil {
		return err
	}
	// The entry is read once, in the claim's transaction: whether the
	// caller may see it is checked there, before anything is written.
	// Requirements never change after creation, so an entry that has
	// some is checked against the claimer's machine (which reads the
	// store) outside it, and claimed again.
	p := principalFrom(ctx)
	visible := visibleEntry(ctx, id)
	var unfit store.QueueEntry
	check := func(fitted bool) func(e store.QueueEntry) error {
		return func(e store.QueueEntry) error {
			if err := visible(e); err != nil {
				return err
			}
			if !fitted && !e.Requirements.IsZero() {
				unfit = e
				return errFitUnchecked
			}
			return nil
		}
	}
	res, err := s.life.ClaimIf(ctx, id, req.AcceptorID, p.tokenID, check(false))
	if errors.Is(err, errFitUnchecked) {
		if err := s.checkFits(ctx, unfit, req.AcceptorID); err != nil {
			return err
		}
		res, err = s.life.ClaimIf(ctx, id, req.AcceptorID, p.tokenID, check(true))
	}
	if errors.Is(err, store.ErrNotFound) {
		return errNotQueued(id) // no such session
	}
	if err != nil {
		return err
	}
	out := toAPIEntry(res.Entry)
	out.Status.ConnectToken = res.Token
	out.Status.GatewayURL = s.gatewayURL
	// The claimer starts the remote with a desktop when the outpost says
	// so (as the claim's transaction read it); a claim by id is the
	// contract's and takes any entry.
	out.Spec.Desktop = outpostWantsDesktop(store.Outpost{Desktop: res.Desktop})
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) releaseHandler(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id := r.PathValue("session")
	req, err := decodeAcceptor(w, r)
	if err != nil {
		return err
	}
	e, err := s.life.ReleaseIf(ctx, id, req.AcceptorID, req.Reason, req.Shutdown, visibleEntry(ctx, id))
	if errors.Is(err, store.ErrNotFound) {
		return errNotQueued(id) // no such session
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toAPIEntry(e))
	return nil
}

// visibleEntry is the check, run in a claim's or a release's transaction
// on the entry it read, that the caller may see the entry: 404, as if
// missing, for one gone or outside the caller's token.
func visibleEntry(ctx context.Context, sessionID string) func(e store.QueueEntry) error {
	p := principalFrom(ctx)
	return func(e store.QueueEntry) error {
		if e.OutpostID == "" || e.Deleted || !p.allowsOutpost(e.OutpostID) {
			return errNotQueued(sessionID)
		}
		return nil
	}
}

// watchFrom is where a watch stream starts.
type watchFrom struct {
	queuefeed.From
	// stale says the re-list is for a cursor of this server older than
	// the outpost's pruned tombstones, rather than a foreign one.
	stale bool
	// fresh says the watch has no cursor: it starts from the current state
	// like a re-list, but there is nothing for the client to forget, so it
	// gets no re-list header.
	fresh bool
}

// checkQueueOrder validates a new session's priority,
// limits.max_attempts and desktop size.
func checkQueueOrder(req *api.CreateSessionRequest) error {
	if req.Priority < api.MinPriority || req.Priority > api.MaxPriority {
		return errBadRequest("priority must be from %d to %d.", api.MinPriority, api.MaxPriority)
	}
	if req.Limits.MaxAttempts < 0 || req.Limits.MaxAttempts > api.MaxAttemptsLimit {
		return errBadRequest("limits.max_attempts must be from 0 (the outpost's) to %d.", api.MaxAttemptsLimit)
	}
	if d := req.Desktop; d != nil {
		if d.Width < api.MinDesktopSize || d.Width > api.MaxDesktopSize || d.Height < api.MinDesktopSize || d.Height > api.MaxDesktopSize {
			return errBadRequest("desktop.width and desktop.height must each be from %d to %d pixels; omit desktop for the default 1280×800.",
				api.MinDesktopSize, api.MaxDesktopSize)
		}
	}
	return nil
}
