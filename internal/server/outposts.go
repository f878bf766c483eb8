package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/approval"
	"github.com/outpost-sh/outpost/internal/audit"
	"github.com/outpost-sh/outpost/internal/budget"
	"github.com/outpost-sh/outpost/internal/lazyregexp"
	"github.com/outpost-sh/outpost/internal/netpolicy"
	"github.com/outpost-sh/outpost/internal/store"
)

// dnsLabel is what an outpost name must be.
var dnsLabel = lazyregexp.New(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// resolveOutpost finds an outpost by name or id and checks the caller may
// see it. An outpost outside the caller's token answers as a missing one.
func (s *Server) resolveOutpost(ctx context.Context, ref string) (store.Outpost, error) {
	o, err := s.store.GetOutpost(ctx, ref)
	if err == nil && !principalFrom(ctx).allowsOutpost(o.ID) {
		err = store.ErrNotFound
	}
	if errors.Is(err, store.ErrNotFound) {
		return store.Outpost{}, errNotFound("Outpost %q does not exist.", ref)
	}
	if err != nil {
		return store.Outpost{}, fmt.Errorf("get outpost %s: %w", ref, err)
	}
	return o, nil
}

func (s *Server) apiOutpost(ctx context.Context, o store.Outpost) (api.Outpost, error) {
	depth, claims, err := s.store.OutpostStats(ctx, o.ID, s.now())
	if err != nil {
		return api.Outpost{}, fmt.Errorf("outpost stats %s: %w", o.ID, err)
	}
	ao := toAPIOutpost(o, depth, claims)
	if ao.Spec.Budget, ao.Status.BudgetUsage, err = s.outpostBudget(ctx, o.ID); err != nil {
		return api.Outpost{}, fmt.Errorf("outpost budget %s: %w", o.ID, err)
	}
	return ao, nil
}

// listOutposts answers one page of the outposts the caller may see, in
// name order. The page cursor is given as after (the public fleet API's
// name) or cursor; the answer carries it as end_cursor and cursor.
func (s *Server) listOutposts(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	first, err := parseFirst(q.Get("first"), 100, 200)
	if err != nil {
		return err
	}
	after, cursor := q.Get("after"), q.Get("cursor")
	if after != "" && cursor != "" && after != cursor {
		return errBadRequest("Give the page cursor as after or as cursor, not both.")
	}
	if after == "" {
		after = cursor
	}
	afterName, err := parseOutpostCursor(after)
	if err != nil {
		return err
	}
	p := principalFrom(r.Context())
	all, err := s.store.ListOutposts(r.Context())
	if err != nil {
		return fmt.Errorf("list outposts: %w", err)
	}
	visible := all[:0]
	for _, o := range all {
		if p.allowsOutpost(o.ID) {
			visible = append(visible, o)
		}
	}
	// The store orders by name, bytewise; names are unique, so the page
	// starts after the cursor's name even when that outpost is gone.
	start := slices.IndexFunc(visible, func(o store.Outpost) bool { return o.Name > afterName })
	if start < 0 {
		start = len(visible)
	}
	page := visible[start:]
	list := api.OutpostList{Items: []api.Outpost{}, Total: len(visible)}
	if len(page) > first {
		page, list.HasNextPage = page[:first], true
	}
	for _, o := range page {
		ao, err := s.apiOutpost(r.Context(), o)
		if err != nil {
			return err
		}
		list.Items = append(list.Items, ao)
	}
	if len(page) > 0 {
		c := formatOutpostCursor(page[len(page)-1].Name)
		list.Cursor, list.EndCursor = c, &c
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// Outpost list cursors are the last name of a page, base64url-encoded so
// clients treat them as opaque.
func formatOutpostCursor(name string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(name))
}

func parseOutpostCursor(c string) (string, error) {
	if c == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || !dnsLabel.Match(b) {
		return "", errBadRequest("The outposts cursor %q is not one this server issued; list from the start without it.", c)
	}
	return string(b), nil
}

// validOrgID is what one entry of allowed_org_ids must be.
var validOrgID = lazyregexp.New(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// checkOrgIDs validates allowed_org_ids. Like the public fleet API it
// answers 422 with a detail that names organizations, which its clients
// read as "allowed_org_ids was rejected".
func checkOrgIDs(ids []string) error {
	if len(ids) > api.MaxAllowedOrgIDs {
		return errUnprocessable("allowed_org_ids lists %d organization ids; at most %d are allowed.", len(ids), api.MaxAllowedOrgIDs)
	}
	seen := make(map[string]bool, len(ids))
	for i, id := range ids {
		if len(id) > 128 {
			return errUnprocessable("allowed_org_ids[%d] is longer than 128 characters, too long for an organization id.", i)
		}
		if !validOrgID.MatchString(id) {
			return errUnprocessable("allowed_org_ids[%d] %q is not a valid organization id: use 1-128 letters, digits, '.', '_', ':' and '-', starting with a letter or digit.", i, id)
		}
		if seen[id] {
			return errUnprocessable("allowed_org_ids lists organization id %q twice.", id)
		}
		seen[id] = true
	}
	return nil
}

func (s *Server) createOutpost(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateOutpostRequest
	if err := decodeWithPolicy(w, r, &req); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && (typeErr.Field == "allowed_org_ids" || strings.HasPrefix(typeErr.Field, "allowed_org_ids.")) {
			return errUnprocessable("allowed_org_ids must be null or a list of organization ids (strings).")
		}
		return err
	}
	if !dnsLabel.MatchString(req.Name) {
		return errBadRequest("Outpost name %q is not a DNS label: use 1-63 lower-case letters, digits and '-', starting and ending with a letter or digit.", req.Name)
	}
	if req.Platform == "" {
		req.Platform = api.PlatformLinux
	}
	switch req.Platform {
	case api.PlatformLinux, api.PlatformMacOS, api.PlatformWindows:
	default:
		return errBadRequest("Platform %q is not one of linux, macos, windows.", req.Platform)
	}
	if len(req.Description) > 1024 {
		return errBadRequest("The description is longer than 1024 characters.")
	}
	if err := checkOrgIDs(req.AllowedOrgIDs); err != nil {
		return err
	}
	if err := checkRemoteBinarySHA(req.RemoteBinarySHA); err != nil {
		return err
	}
	if err := checkOutpostLimits(req.MaxRunning, req.MaxAttempts); err != nil {
		return err
	}
	if err := s.checkSnapshotLimit(req.MaxSnapshotBytes); err != nil {
		return err
	}
	policy, err := checkPolicy(req.NetworkPolicy)
	if err != nil {
		return err
	}
	desk, err := checkOutpostDesktop(req.Desktop)
	if err != nil {
		return err
	}
	if err := req.Requirements.Validate(); err != nil {
		return errBadRequest("%s.", err)
	}
	rules, err := approval.Validate("approval_rules", req.ApprovalRules)
	if err != nil {
		return errBadRequest("%s.", err)
	}
	if req.Budget != nil {
		if err := budget.CheckOutpostBudget(*req.Budget); err != nil {
			return errBadRequest("%s.", err)
		}
	}
	if p := principalFrom(r.Context()); p.limited() {
		return errForbidden("A token limited to one outpost cannot create outposts.")
	}
	o := store.Outpost{ID: newOutpostID(), Name: req.Name, Platform: req.Platform, Description: req.Description,
		AllowedOrgIDs: req.AllowedOrgIDs, RemoteBinarySHA: req.RemoteBinarySHA, MaxRunning: req.MaxRunning,
		MaxAttempts: req.MaxAttempts, MaxSnapshotBytes: req.MaxSnapshotBytes, NetworkPolicy: policy, Desktop: desk,
		Requirements: effectiveRequirements(req.Requirements), ApprovalRules: rules, CreatedAt: s.now()}
	details := outpostDetails(o)
	if req.Budget != nil {
		details["budget"] = req.Budget
	}
	actx := s.audited(r.Context(), audit.OutpostCreate, audit.Object{Kind: audit.ObjectOutpost, ID: o.ID}, details, nil)
	if err := s.store.CreateOutpost(actx, o); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return errConflict("An outpost named %q already exists.", req.Name)
		}
		return fmt.Errorf("create outpost: %w", err)
	}
	if req.Budget != nil && !req.Budget.IsZero() {
		if err := s.store.SetOutpostBudget(r.Context(), o.ID, req.Budget); err != nil {
			return fmt.Errorf("create outpost %s budget: %w", o.ID, err)
		}
	}
	s.log.Info("outpost created", "outpost", o.Name, "id", o.ID, "platform", o.Platform)
	ao, err := s.apiOutpost(r.Context(), o)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, ao)
	return nil
}

// checkOutpostLimits validates max_running and max_attempts.
func checkOutpostLimits(maxRunning, maxAttempts int) error {
	if maxRunning < 0 || maxRunning > api.MaxRunningLimit {
		return errBadRequest("max_running must be from 0 (no cap) to %d.", api.MaxRunningLimit)
	}
	if maxAttempts < 0 || maxAttempts > api.MaxAttemptsLimit {
		return errBadRequest("max_attempts must be from 0 (the default, %d) to %d.", api.DefaultMaxAttempts, api.MaxAttemptsLimit)
	}
	return nil
}

// checkSnapshotLimit validates max_snapshot_bytes: the server's limit caps
// every outpost's.
func (s *Server) checkSnapshotLimit(n int64) error {
	if n < 0 || n > s.opts.MaxSnapshotBytes {
		return errBadRequest("max_snapshot_bytes must be from 0 (this server's limit) to this server's limit of %d bytes (%s; outpost server --max-snapshot-bytes).",
			s.opts.MaxSnapshotBytes, api.ByteSize(s.opts.MaxSnapshotBytes))
	}
	return nil
}

// updateOutpost changes an outpost's max_running, max_attempts,
// max_snapshot_bytes, network policy and desktop setting (PATCH /v1/outposts/{outpost}); fields left out keep their values.
func (s *Server) updateOutpost(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	var req api.UpdateOutpostRequest
	if err := decodeWithPolicy(w, r, &req); err != nil {
		return err
	}
	if p := principalFrom(ctx); p.limited() {
		return errForbidden("A token limited to one outpost cannot change outposts.")
	}
	o, unlock, err := s.lockOutpost(ctx, r.PathValue("outpost"), false)
	if err != nil {
		return err
	}
	defer unlock()
	if req.MaxRunning != nil {
		o.MaxRunning = *req.MaxRunning
	}
	if req.MaxAttempts != nil {
		o.MaxAttempts = *req.MaxAttempts
	}
	if req.MaxSnapshotBytes != nil {
		o.MaxSnapshotBytes = *req.MaxSnapshotBytes
		// Checked only when given: an outpost's limit stored under a
		// larger server limit does not block changing its other fields.
		if err := s.checkSnapshotLimit(o.MaxSnapshotBytes); err != nil {
			return err
		}
	}
	if err := checkOutpostLimits(o.MaxRunning, o.MaxAttempts); err != nil {
		return err
	}
	policyChanged := false
	if req.NetworkPolicy != nil {
		policy, err := checkPolicy(req.NetworkPolicy)
		if err != nil {
			return err
		}
		policyChanged = !samePolicy(netpolicy.Effective(o.NetworkPolicy, nil), netpolicy.Effective(policy, nil))
		if policyChanged {
			if err := checkOutpostWidening(ctx, o, policy); err != nil {
				return err
			}
			if err := s.checkOutpostNarrowing(ctx, o, policy); err != nil {
				return err
			}
		}
		o.NetworkPolicy = policy
	}
	if req.Desktop != nil {
		if o.Desktop, err = checkOutpostDesktop(req.Desktop); err != nil {
			return err
		}
	}
	if req.ApprovalRules != nil {
		// Checked before anything is written: a bad rule changes nothing.
		if o.ApprovalRules, err = approval.Validate("approval_rules", *req.ApprovalRules); err != nil {
			return errBadRequest("%s.", err)
		}
	}
	if req.Budget != nil {
		if err := budget.CheckOutpostBudget(*req.Budget); err != nil {
			return errBadRequest("%s.", err)
		}
	}
	l := store.OutpostLimits{MaxRunning: o.MaxRunning, MaxAttempts: o.MaxAttempts, MaxSnapshotBytes: o.MaxSnapshotBytes,
		NetworkPolicy: o.NetworkPolicy, Desktop: o.Desktop}
	details := outpostDetails(o)
	if req.Budget != nil {
		// Who raised or lifted a cap is on the log with the new budget.
		details["budget"] = req.Budget
	}
	actx := s.audited(ctx, audit.OutpostUpdate, audit.Object{Kind: audit.ObjectOutpost, ID: o.ID}, details, nil)
	if err := s.store.SetOutpostLimits(actx, o.ID, l); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return errNotFound("Outpost %q does not exist.", r.PathValue("outpost"))
		}
		return fmt.Errorf("update outpost %s: %w", o.ID, err)
	}
	if req.ApprovalRules != nil {
		if err := s.store.SetOutpostApprovalRules(ctx, o.ID, o.ApprovalRules); err != nil {
			return fmt.Errorf("update outpost %s approval rules: %w", o.ID, err)
		}
	}
	if req.Budget != nil {
		if err := s.store.SetOutpostBudget(ctx, o.ID, req.Budget); err != nil {
			return fmt.Errorf("update outpost %s budget: %w", o.ID, err)
		}
	}
	s.log.Info("outpost updated", "outpost", o.Name, "max_running", o.MaxRunning, "max_attempts", o.MaxAttempts,
		"max_snapshot_bytes", o.MaxSnapshotBytes, "network_policy_changed", policyChanged, "desktop", o.Desktop)
	if policyChanged {
		// The outpost's policy is stored; an error here leaves some entries
		// behind, which the next change of the policy brings up to date.
		if err := s.spreadOutpostPolicy(ctx, o); err != nil {
			return err
		}
	}
	ao, err := s.apiOutpost(ctx, o)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ao)
	return nil
}

func (s *Server) getOutpost(w http.ResponseWriter, r *http.Request) error {
	o, err := s.resolveOutpost(r.Context(), r.PathValue("outpost"))
	if err != nil {
		return err
	}
	ao, err := s.apiOutpost(r.Context(), o)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ao)
	return nil
}

// lockOutpost takes the outposts lock (lockOutposts) and then resolves ref
// under it: the outpost cannot be deleted, or its limits changed, until
// unlock.
func (s *Server) lockOutpost(ctx context.Context, ref string, shared bool) (o store.Outpost, unlock func(), err error) {
	unlock, err = s.lockOutposts(ctx, shared)
	if err != nil {
		return o, nil, err
	}
	if o, err = s.resolveOutpost(ctx, ref); err != nil {
		unlock()
		return o, nil, err
	}
	return o, unlock, nil
}

func (s *Server) deleteOutpost(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	o, err := s.resolveOutpost(ctx, r.PathValue("outpost"))
	if err != nil {
		return err
	}
	force := r.URL.Query().Get("force")
	if force != "" && force != "true" && force != "false" {
		return errBadRequest("force must be true or false.")
	}
	unlock, err := s.lockOutposts(ctx, false)
	if err != nil {
		return err
	}
	defer unlock()
	entries, _, err := s.store.ListQueue(ctx, store.QueueFilter{OutpostID: o.ID})
	if err != nil {
		return fmt.Errorf("list queue of %s: %w", o.ID, err)
	}
	claimed := 0
	for _, e := range entries {
		if e.Phase == api.PhaseClaimed && e.SessionStatus != api.QueueSessionTerminated {
			claimed++
		}
	}
	if claimed > 0 && force != "true" {
		if claimed == 1 {
			return errConflict("Outpost %q has 1 claimed session; end it first, or delete with force, which ends it.", o.Name)
		}
		return errConflict("Outpost %q has %d claimed sessions; end them first, or delete with force, which ends them.", o.Name, claimed)
	}
	for _, e := range entries {
		reason := fmt.Sprintf("Outpost %q was deleted.", o.Name)
		if err := s.endSession(ctx, e.SessionID, api.StatusExit, api.DetailOutpostDeleted, reason); err != nil {
			return err
		}
		// A claimed entry's holder releases it when its remote exits; the
		// outpost is gone, so drop the entry now.
		if err := s.life.Drop(ctx, e.SessionID); err != nil {
			return err
		}
	}
	actx := s.audited(ctx, audit.OutpostDelete, audit.Object{Kind: audit.ObjectOutpost, ID: o.ID},
		map[string]any{"name": o.Name, "ended_sessions": len(entries)}, nil)
	if err := s.store.DeleteOutpost(actx, o.ID); err != nil {
		return fmt.Errorf("delete outpost %s: %w", o.ID, err)
	}
	s.log.Info("outpost deleted", "outpost", o.Name, "id", o.ID, "ended_sessions", len(entries))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// lockOutposts takes the store's lock that orders outpost deletion (and
// limit changes) against session creation: a session is created under it
// shared, so a delete, holding it exclusive, never misses one and no
// session is left on a deleted outpost, whichever servers the two requests
// reach.
func (s *Server) lockOutposts(ctx context.Context, shared bool) (func(), error) {
	unlock, err := s.store.Lock(ctx, "outposts", shared)
	if err != nil {
		return nil, fmt.Errorf("take the outposts lock: %w", err)
	}
	return unlock, nil
}
