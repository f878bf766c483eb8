package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/store"
)

// machineEvent records a provisioning step reported by the holder of a
// session's claim (POST /v1/queue/{session}/events), so a stuck or failed
// session says why, and the network decisions of its egress policy, one
// transcript event each. While the session waits for its remote, the
// step's message also becomes the session's reason. The answer is the
// step's event, or the last network event when no step was given.
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
	if len(req.Network) > api.MaxNetworkDecisions {
		return errBadRequest("network holds %d decisions; at most %d may be posted at once.", len(req.Network), api.MaxNetworkDecisions)
	}
	for i, d := range req.Network {
		if err := validNetworkDecision(d); err != nil {
			return errBadRequest("network[%d]: %v.", i, err)
		}
	}
	if req.Step == "" && len(req.Network) > 0 && req.Machine == "" && req.Backend == "" && req.Message == "" && req.ExitCode == nil {
		return nil
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

// validNetworkDecision checks one reported decision.
func validNetworkDecision(d api.NetworkDecision) error {
	switch {
	case d.Decision != api.DecisionAllow && d.Decision != api.DecisionDeny:
		return fmt.Errorf("decision must be %q or %q, not %q", api.DecisionAllow, api.DecisionDeny, d.Decision)
	case d.Protocol != api.ProtocolTCP && d.Protocol != api.ProtocolUDP && d.Protocol != api.ProtocolDNS:
		return fmt.Errorf("protocol must be %q, %q or %q, not %q", api.ProtocolTCP, api.ProtocolUDP, api.ProtocolDNS, d.Protocol)
	case d.Port < 0 || d.Port > 65535:
		return fmt.Errorf("port %d is not between 0 and 65535", d.Port)
	case len(d.Host) > 253:
		return errors.New("host is longer than 253 characters")
	case len(d.Rule) > 500:
		return errors.New("rule is longer than 500 characters")
	case d.BytesOut < 0 || d.BytesIn < 0 || d.Count < 0 || d.Time < 0:
		return errors.New("time_ms, bytes_out, bytes_in and count cannot be negative")
	}
	if d.Address != "" {
		if _, err := netip.ParseAddr(d.Address); err != nil {
			return fmt.Errorf("address %q is not an IP address", d.Address)
		}
	}
	return nil
}

// networkEvent is the transcript event of a reported decision.
func networkEvent(d api.NetworkDecision, acceptor string, now int64) api.Event {
	return api.Event{Type: api.EventNetwork, Time: cmp.Or(d.Time, now), AcceptorID: acceptor, Decision: d.Decision,
		Host: strings.ToLower(strings.TrimSuffix(d.Host, ".")), Address: d.Address, Port: d.Port, Protocol: d.Protocol,
		Rule: d.Rule, BytesOut: d.BytesOut, BytesIn: d.BytesIn, Count: d.Count}
}

func (s *Server) recordMachineEvent(ctx context.Context, id string, req api.MachineEventRequest) (api.Event, error) {
	now := s.now()
	var events []api.Event
	if req.Step != "" {
		events = append(events, api.Event{Type: api.EventMachine, Time: now.UnixMilli(), AcceptorID: req.AcceptorID, Step: req.Step,
			Machine: req.Machine, Backend: req.Backend, Reason: strings.TrimSpace(req.Message), ExitCode: req.ExitCode})
	}
	for _, d := range req.Network {
		events = append(events, networkEvent(d, req.AcceptorID, now.UnixMilli()))
	}
	var outpostID string
	m, err := s.store.UpdateSession(ctx, id, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		if err := lifecycle.CheckHolder(e, now, req.AcceptorID); err != nil {
			return store.Mutation{}, err
		}
		outpostID = e.OutpostID
		m := store.Mutation{Events: events}
		if ev := events[0]; ev.Type == api.EventMachine && ev.Reason != "" && (sess.Status == api.StatusClaimed || sess.Status == api.StatusResuming) {
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
	if len(req.Network) > 0 {
		name := s.outpostName(ctx, outpostID)
		for _, d := range req.Network {
			s.metrics.networkConnections.WithLabelValues(name, d.Decision).Add(float64(max(d.Count, 1)))
		}
	}
	if req.Step != "" {
		return m.Events[0], nil
	}
	return m.Events[len(m.Events)-1], nil
}

func orUnnamed(name string) string {
	if name == "" {
		return "(unnamed)"
	}
	return name
}
