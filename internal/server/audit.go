package server

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/audit"
	"github.com/outpost-sh/outpost/internal/redact"
	"github.com/outpost-sh/outpost/internal/store"
)

// actor is who p is, as the audit log names it.
func (p principal) actor() audit.Actor {
	// A person's token (a sign-in or one the person made) is the person;
	// any other token is itself.
	if p.tokenID == "" {
		return audit.Actor{Kind: audit.ActorAnonymous}
	}
	if u := p.User; u != nil {
		return audit.Actor{Kind: audit.ActorUser, ID: u.ID, Name: cmp.Or(u.Email, u.Name)}
	}
	return audit.Actor{Kind: audit.ActorToken, ID: p.tokenID, Name: p.tokenName}
}

type sourceIPKey struct{}

// withSourceIP returns ctx knowing the address request r came from.
func withSourceIP(ctx context.Context, r *http.Request) context.Context {
	return context.WithValue(ctx, sourceIPKey{}, sourceIP(r))
}

// sourceIP is the address request r came from (the peer's; the server
// trusts no forwarding header).
func sourceIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// auditData is data as an entry's details: JSON with every value of
// secrets replaced by its name, so no secret reaches the log even when a
// caller put one where a detail comes from (a title, a message).
func auditData(data any, secrets map[string]string) json.RawMessage {
	if data == nil {
		return nil
	}
	raw, err := json.Marshal(data)
	if err != nil {
		// Details are maps of strings, numbers and lists built here; one
		// that cannot be encoded is a bug, recorded rather than lost.
		raw, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	if len(secrets) > 0 {
		raw = redact.NewSet(secrets).JSON(raw)
	}
	return raw
}

// audited returns ctx carrying the audit entry of action on object by the
// caller of the request ctx belongs to, for the store call that makes the
// change: the store appends it in that call's transaction (see package
// audit). data are the details, with the values of secrets redacted.
func (s *Server) audited(ctx context.Context, action string, object audit.Object, data any, secrets map[string]string) context.Context {
	ip, _ := ctx.Value(sourceIPKey{}).(string)
	return audit.With(ctx, &audit.Entry{
		CreatedAt: s.now(),
		Action:    action,
		Actor:     principalFrom(ctx).actor(),
		SourceIP:  ip,
		Object:    object,
		Data:      auditData(data, secrets),
	})
}

// actionPattern is what an action filter may be.
var actionPattern = regexp.MustCompile(`^[a-z_]+(\.[a-z_]+)*$`)

// parseUnix reads a time query parameter in Unix seconds.
func parseUnix(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, errBadRequest("%s must be a time in Unix seconds.", name)
	}
	return time.Unix(n, 0), nil
}

// auditFilter reads the query of a list of the audit log.
func (s *Server) auditFilter(r *http.Request) (store.AuditFilter, error) {
	q := r.URL.Query()
	first, err := parseFirst(q.Get("first"), 100, 200)
	if err != nil {
		return store.AuditFilter{}, err
	}
	f := store.AuditFilter{Limit: first + 1, Action: q.Get("action"), Actor: q.Get("actor")}
	if after := q.Get("after"); after != "" {
		seq, ok := audit.SeqOf(after)
		if !ok {
			return f, errBadRequest("after %q is not an audit_log_id; pass the end_cursor of the page before.", after)
		}
		f.Before = seq
	}
	if f.Action != "" && (len(f.Action) > 100 || !actionPattern.MatchString(f.Action)) {
		return f, errBadRequest("action %q is not an action's name (like outpost.create or login).", f.Action)
	}
	if len(f.Actor) > 200 {
		return f, errBadRequest("actor is longer than 200 characters.")
	}
	if f.TimeAfter, err = parseUnix("time_after", q.Get("time_after")); err != nil {
		return f, err
	}
	if f.TimeBefore, err = parseUnix("time_before", q.Get("time_before")); err != nil {
		return f, err
	}
	// A window is at most MaxAuditWindowDays long; an open end is now
	// (time_before) or that long before time_before (time_after).
	if !f.TimeAfter.IsZero() || !f.TimeBefore.IsZero() {
		const window = api.MaxAuditWindowDays * 24 * time.Hour
		before := f.TimeBefore
		if before.IsZero() {
			before = s.now()
		}
		after := f.TimeAfter
		if after.IsZero() {
			after = before.Add(-window)
		}
		if !after.Before(before) {
			return f, errBadRequest("time_after must be before time_before.")
		}
		if before.Sub(after) > window {
			return f, errBadRequest("The window from time_after to time_before is longer than %d days; ask for it in parts.", api.MaxAuditWindowDays)
		}
		f.TimeAfter, f.TimeBefore = after, before
	}
	return f, nil
}

// requireWholeAdmin refuses a token limited to an outpost: the audit log
// tells of every outpost.
func requireWholeAdmin(ctx context.Context) error {
	if principalFrom(ctx).outpostID != "" {
		return errForbidden("The audit log tells of every outpost, and this token is limited to one; use an admin token that is not.")
	}
	return nil
}

// listAuditLogs is GET /v1/audit-logs. Reading the log is not itself an
// entry.
func (s *Server) listAuditLogs(w http.ResponseWriter, r *http.Request) error {
	if err := requireWholeAdmin(r.Context()); err != nil {
		return err
	}
	f, err := s.auditFilter(r)
	if err != nil {
		return err
	}
	entries, total, err := s.store.ListAudit(r.Context(), f)
	if err != nil {
		return fmt.Errorf("list audit log: %w", err)
	}
	list := api.AuditLogList{Items: []api.AuditLog{}, Total: total}
	if len(entries) == f.Limit {
		entries, list.HasNextPage = entries[:f.Limit-1], true
	}
	for _, e := range entries {
		list.Items = append(list.Items, toAPIAudit(e))
	}
	if n := len(list.Items); n > 0 {
		c := list.Items[n-1].AuditLogID
		list.EndCursor = &c
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// toAPIAudit is e on the wire.
func toAPIAudit(e audit.Entry) api.AuditLog {
	data := e.Data
	if len(data) == 0 {
		data = json.RawMessage("{}")
	}
	return api.AuditLog{
		AuditLogID: e.ID, CreatedAt: e.CreatedAt.Unix(), Action: e.Action,
		Actor:    api.AuditActor{Kind: e.Actor.Kind, ID: e.Actor.ID, Name: e.Actor.Name},
		SourceIP: e.SourceIP, Object: api.AuditObject{Kind: e.Object.Kind, ID: e.Object.ID}, Data: data,
	}
}

// verifyAuditLog is GET /v1/audit-logs/verify: it checks the hash chain
// and answers 200 either way; ok says whether it holds.
func (s *Server) verifyAuditLog(w http.ResponseWriter, r *http.Request) error {
	if err := requireWholeAdmin(r.Context()); err != nil {
		return err
	}
	v, err := s.store.VerifyAudit(r.Context())
	if err != nil {
		return fmt.Errorf("verify audit log: %w", err)
	}
	writeJSON(w, http.StatusOK, api.AuditVerification{OK: v.OK, Checked: v.Checked, FirstBad: v.FirstBad, Reason: v.Reason})
	return nil
}

// outpostDetails are an outpost's settings as an entry's details.
func outpostDetails(o store.Outpost) map[string]any {
	return map[string]any{
		"name": o.Name, "platform": o.Platform, "max_running": o.MaxRunning, "max_attempts": o.MaxAttempts,
		"max_snapshot_bytes": o.MaxSnapshotBytes, "network_policy": o.NetworkPolicy, "desktop": o.Desktop,
		"requirements": o.Requirements, "approval_rules": o.ApprovalRules,
	}
}

// recordSignIn writes a sign-in to the web UI to the audit log: login by
// the token entered, or login.failed by an anonymous caller with the
// reason (never the token entered, which may be a secret of something
// else pasted by mistake). A failure to write is logged: the sign-in's
// answer does not wait on the log.
func (s *Server) recordSignIn(r *http.Request, token, refusal string) {
	ctx := withSourceIP(context.WithoutCancel(r.Context()), r)
	action, object, data := audit.LoginFailed, audit.Object{Kind: audit.ObjectToken}, map[string]any{"reason": refusal}
	if refusal == "" {
		p, err := s.authenticateSecret(ctx, token)
		if err != nil {
			s.log.Warn("audit: sign-in by a token that no longer authenticates", "err", err)
			return
		}
		ctx = context.WithValue(ctx, principalKey{}, p)
		action, object, data = audit.Login, audit.Object{Kind: audit.ObjectToken, ID: p.tokenID}, nil
	} else {
		// No principal: the actor is anonymous.
		ctx = context.WithValue(ctx, principalKey{}, principal{})
	}
	if err := s.store.RecordAudit(s.audited(ctx, action, object, data, nil)); err != nil {
		s.log.Error("audit: record sign-in", "action", action, "err", err)
	}
}

// auditPruneBatch is how many entries one transaction of the audit
// retention sweep removes, so it never holds the writer for long.
const auditPruneBatch = 1000

// auditRetention removes the audit log's entries older than
// AuditRetention, shortly after start and then at each sweep interval,
// until ctx ends; nothing when the log is kept forever. Every replica
// runs it: a removal is one transaction that holds the chain's head, so
// two replicas at once remove each entry once.
func (s *Server) auditRetention(ctx context.Context) {
	if s.opts.AuditRetention <= 0 {
		return
	}
	t := time.NewTimer(min(time.Minute, s.opts.ArtifactSweepInterval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.pruneAudit(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("audit log retention sweep", "err", err)
		}
		t.Reset(s.opts.ArtifactSweepInterval)
	}
}

// pruneAudit removes every entry older than AuditRetention, in batches.
func (s *Server) pruneAudit(ctx context.Context) error {
	before := s.now().Add(-s.opts.AuditRetention)
	total := 0
	for ctx.Err() == nil {
		n, err := s.store.PruneAudit(ctx, before, auditPruneBatch)
		if err != nil {
			return err
		}
		total += n
		if n < auditPruneBatch {
			break
		}
	}
	if total > 0 {
		s.log.Info("audit log retention sweep removed entries", "entries", total, "created_before", before.UTC().Format(time.RFC3339))
	}
	return ctx.Err()
}
