package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/store"
)

// machineEvent records a provisioning step reported by the holder of a
// session's claim (POST /v1/queue/{session}/events), so a stuck or failed
// session says why. While the session waits for its remote, the step's
// message also becomes the session's reason.
func (s *Server) machineEvent(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id := r.PathValue("session")
	var req api.MachineEventRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if err := validMachineEvent(req); err != nil {
		return err
	}
	if _, err := s.entryFor(ctx, id); err != nil {
		return err
	}
	ev, err := s.recordMachineEvent(ctx, id, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, ev)
	return nil
}

func validMachineEvent(req api.MachineEventRequest) error {
	if err := checkAcceptorID(req.AcceptorID); err != nil {
		return err
	}
	switch {
	case !slices.Contains(api.MachineSteps, req.Step):
		return errBadRequest("step must be one of %s, not %q.", strings.Join(api.MachineSteps, ", "), req.Step)
	case len(req.Machine) > 200 || len(req.Backend) > 100:
		return errBadRequest("machine is at most 200 characters and backend at most 100.")
	case len(req.Message) > 2000:
		return errBadRequest("message is at most 2,000 characters.")
	}
	return nil
}

func (s *Server) recordMachineEvent(ctx context.Context, id string, req api.MachineEventRequest) (api.Event, error) {
	now := s.now()
	ev := api.Event{Type: api.EventMachine, Time: now.UnixMilli(), AcceptorID: req.AcceptorID, Step: req.Step,
		Machine: req.Machine, Backend: req.Backend, Reason: strings.TrimSpace(req.Message), ExitCode: req.ExitCode}
	m, err := s.store.UpdateSession(ctx, id, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		if err := lifecycle.CheckHolder(e, now, req.AcceptorID); err != nil {
			return store.Mutation{}, err
		}
		m := store.Mutation{Events: []api.Event{ev}}
		if ev.Reason != "" && (sess.Status == api.StatusClaimed || sess.Status == api.StatusResuming) {
			sess.Reason = fmt.Sprintf("Machine %s: %s", orUnnamed(req.Machine), lifecycle.Sentence(ev.Reason))
			sess.UpdatedAt = now
			m.Session = &sess
		}
		return m, nil
	})
	if err != nil {
		return api.Event{}, err
	}
	s.committed(id, m)
	return m.Events[0], nil
}

func orUnnamed(name string) string {
	if name == "" {
		return "(unnamed)"
	}
	return name
}
