package server

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"

	"github.com/outpost-sh/outpost/internal/blob"
	"github.com/outpost-sh/outpost/internal/gateway"
)

// getSpilledOutput serves GET /v1/sessions/{session}/output/{seq}: the
// output of call seq past the transcript's cap, as text, its parts in
// order. It is there once the call ended (or its connection did).
func (s *Server) getSpilledOutput(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	sess, err := s.sessionFor(ctx, r.PathValue("session"))
	if err != nil {
		return err
	}
	seq, err := strconv.ParseInt(r.PathValue("seq"), 10, 64)
	if err != nil || seq <= 0 {
		return errNotFound("Session %s has no call %q: a call is a positive number (the seq of its transcript event).", sess.ID, r.PathValue("seq"))
	}
	infos, err := s.outputBlobs.List(ctx, gateway.SpillKey(sess.ID, seq, 0))
	if err != nil {
		return fmt.Errorf("list spilled output of %s call %d: %w", sess.ID, seq, err)
	}
	type part struct {
		n    int
		key  string
		size int64
	}
	var parts []part
	var total int64
	for _, in := range infos {
		if n, ok := gateway.SpillPart(in.Key, sess.ID, seq); ok {
			parts = append(parts, part{n, in.Key, in.Size})
			total += in.Size
		}
	}
	if len(parts) == 0 && sess.ArtifactsPrunedAt != nil {
		return errHTTPGone("Session %s's spilled output was deleted with its artifacts by the retention policy on %s.",
			sess.ID, sess.ArtifactsPrunedAt.UTC().Format("2006-01-02 15:04 UTC"))
	}
	if len(parts) == 0 {
		return errNotFound("Session %s has no spilled output of call %d: a call's output past the transcript's cap is kept once the call ends.", sess.ID, seq)
	}
	slices.SortFunc(parts, func(a, b part) int { return cmp.Compare(a.n, b.n) })
	// Open every part before the first byte, so a part deleted meanwhile
	// is an error rather than a short answer.
	var bodies []io.Reader
	for _, p := range parts {
		rd, _, err := s.outputBlobs.Get(ctx, p.key)
		if errors.Is(err, blob.ErrNotExist) {
			return errHTTPGone("The spilled output of session %s call %d was deleted while it was being read.", sess.ID, seq)
		}
		if err != nil {
			return fmt.Errorf("open spilled output %s: %w", p.key, err)
		}
		defer rd.Close()
		bodies = append(bodies, rd)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.FormatInt(total, 10))
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, io.MultiReader(bodies...)); err != nil && ctx.Err() == nil {
		s.log.Warn("send spilled output", "session", sess.ID, "seq", seq, "err", err)
	}
	return nil
}
