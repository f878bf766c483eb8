package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/approval"
	"github.com/outpost-sh/outpost/internal/audit"
	"github.com/outpost-sh/outpost/internal/budget"
	"github.com/outpost-sh/outpost/internal/lazyregexp"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/netpolicy"
	"github.com/outpost-sh/outpost/internal/redact"
	"github.com/outpost-sh/outpost/internal/steptrace"
	"github.com/outpost-sh/outpost/internal/store"
)

var (
	repoName = lazyregexp.New(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)
	envName  = lazyregexp.New(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
)

// Bounds on a session request.
const (
	maxTitle     = 200
	maxPrompt    = 200_000
	maxSteps     = 1000
	maxRepos     = 50
	maxEnvValue  = 64 << 10
	maxEnvVars   = 200
	maxStepTimeS = 7 * 24 * 3600
)

// validateSession checks a create request and fills defaults. It returns
// a 400 naming the first problem.
func validateSession(req *api.CreateSessionRequest) error {
	if req.Outpost == "" {
		return errBadRequest("outpost is required: name the outpost whose machines should run the session.")
	}
	if len(req.Title) > maxTitle {
		return errBadRequest("title is longer than %d characters.", maxTitle)
	}
	if len(req.Prompt) > maxPrompt {
		return errBadRequest("prompt is longer than %d bytes.", maxPrompt)
	}
	if len(req.Repos) > maxRepos {
		return errBadRequest("A session can have at most %d repos.", maxRepos)
	}
	seen := map[string]bool{}
	for i := range req.Repos {
		r := &req.Repos[i]
		if strings.TrimSpace(r.URL) == "" {
			return errBadRequest("repos[%d].url is required.", i)
		}
		if r.Name == "" {
			r.Name = strings.TrimSuffix(path.Base(strings.TrimRight(r.URL, "/")), ".git")
		}
		if !repoName.MatchString(r.Name) || r.Name == "." || r.Name == ".." || strings.Contains(r.Name, "..") {
			return errBadRequest("repos[%d].name %q is not allowed: use letters, digits, '.', '_' and '-' (no '/' or '..').", i, r.Name)
		}
		if seen[r.Name] {
			return errBadRequest("Two repos are named %q.", r.Name)
		}
		seen[r.Name] = true
		if strings.HasPrefix(r.Ref, "-") {
			return errBadRequest("repos[%d].ref %q is not a valid git ref.", i, r.Ref)
		}
	}
	switch req.Agent.Kind {
	case api.AgentScript:
	case api.AgentLLM:
		if strings.TrimSpace(req.Prompt) == "" {
			return errBadRequest("An llm session needs a prompt: the task for the model.")
		}
		if len(req.Agent.Steps) > 0 {
			return errBadRequest("agent.steps belong to script sessions; an llm session has a prompt.")
		}
		if req.Agent.MaxSteps < 0 || req.Agent.MaxOutputTokens < 0 || req.Limits.MaxTokens < 0 || req.Limits.IdleS < 0 || req.Limits.SuspendAfterIdleS < 0 {
			return errBadRequest("agent.max_steps, agent.max_output_tokens, limits.max_tokens, limits.idle_s and limits.suspend_after_idle_s must not be negative.")
		}
	case api.AgentExternal:
		if len(req.Agent.Steps) > 0 {
			return errBadRequest("agent.steps belong to script sessions; an outside agent sends its own tool calls.")
		}
		if req.Limits.IdleS < 0 {
			return errBadRequest("limits.idle_s must not be negative.")
		}
	case "":
		return errBadRequest("agent.kind is required (script, llm or external).")
	default:
		return errBadRequest("agent.kind %q is unknown; use script, llm or external.", req.Agent.Kind)
	}
	if len(req.Agent.Steps) > maxSteps {
		return errBadRequest("A script can have at most %d steps.", maxSteps)
	}
	for i, st := range req.Agent.Steps {
		args, ok := api.NewToolArgs(st.Tool)
		if !ok {
			return errBadRequest("agent.steps[%d].tool %q is unknown; tools are %s.", i, st.Tool, verbatim(strings.Join(api.ToolNames(), ", ")))
		}
		if len(st.Args) == 0 || string(st.Args) == "null" {
			req.Agent.Steps[i].Args = json.RawMessage("{}")
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(st.Args))
		dec.DisallowUnknownFields()
		if err := dec.Decode(args); err != nil {
			return errBadRequest("agent.steps[%d].args do not fit tool %s: %v.", i, st.Tool, err)
		}
		if st.Tool == api.ToolNetworkAccessRequest {
			if _, err := netpolicy.ParseRequest(st.Args); err != nil {
				return errBadRequest("agent.steps[%d]: %v.", i, err)
			}
		}
		if ex, ok := args.(*api.ExecArgs); ok {
			if (ex.Command == "") == (len(ex.Argv) == 0) {
				return errBadRequest("agent.steps[%d]: exec needs exactly one of command and argv.", i)
			}
			if ex.TimeoutS < 0 || ex.TimeoutS > maxStepTimeS {
				return errBadRequest("agent.steps[%d]: timeout_s must be from 0 to %d.", i, maxStepTimeS)
			}
		}
	}
	if err := validateEnv("env", req.Env); err != nil {
		return err
	}
	if err := validateEnv("secrets", req.Secrets); err != nil {
		return err
	}
	for k, v := range req.Secrets {
		if v == "" {
			return errBadRequest("secrets.%s is empty.", k)
		}
	}
	if err := checkUseSecrets(req.UseSecrets); err != nil {
		return err
	}
	if req.Limits.MaxDurationS < 0 {
		return errBadRequest("limits.max_duration_s must not be negative.")
	}
	if err := budget.CheckLimits(req.Limits); err != nil {
		return errBadRequest("%s.", err)
	}
	rules, err := approval.Validate("approval_rules", req.ApprovalRules)
	if err != nil {
		return errBadRequest("%s.", err)
	}
	req.ApprovalRules = rules
	for _, l := range []struct {
		name string
		v    int64
	}{{"max_duration_s", req.Limits.MaxDurationS}, {"idle_s", req.Limits.IdleS}, {"suspend_after_idle_s", req.Limits.SuspendAfterIdleS}} {
		if l.v > api.MaxLimitSeconds {
			return errBadRequest("limits.%s is %d: at most %d (a hundred years).", l.name, l.v, api.MaxLimitSeconds)
		}
	}
	return checkQueueOrder(req)
}

func validateEnv(field string, env map[string]string) error {
	if len(env) > maxEnvVars {
		return errBadRequest("%s has more than %d variables.", field, maxEnvVars)
	}
	for k, v := range env {
		if !envName.MatchString(k) {
			return errBadRequest("%s name %q is not a valid environment variable name.", field, k)
		}
		if api.ReservedEnvName(k) {
			return errBadRequest("%s name %q is reserved: Outpost sets OUTPOST_* names and reads the public contract's names of its variables (such as %s), so a session may not set them.", field, k, api.EnvConnectToken.Public)
		}
		if len(v) > maxEnvValue || strings.ContainsRune(v, 0) {
			return errBadRequest("%s.%s is too long or holds a NUL byte.", field, k)
		}
	}
	return nil
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateSessionRequest
	if err := decodeWithPolicy(w, r, &req); err != nil {
		return err
	}
	return s.startSession(w, r, req)
}

// rerunSession is POST /v1/sessions/{session}/rerun: a new session with
// the spec of the given one — its outpost, title, prompt, repos, agent,
// env, limits, pins and own network policy — and its secrets, which the
// caller never sees. The new session is created as POST /v1/sessions
// creates one, with the same checks, so a rerun of a session whose outpost
// has since been deleted, or that the server can no longer run (an llm
// agent without a provider), is refused the same way.
func (s *Server) rerunSession(w http.ResponseWriter, r *http.Request) error {
	old, err := s.sessionFor(r.Context(), r.PathValue("session"))
	if err != nil {
		return err
	}
	if err := s.rerunOutpostGone(r.Context(), old); err != nil {
		return err
	}
	req, err := rerunRequest(old)
	if err != nil {
		return err
	}
	return s.startSession(w, r, req)
}

// rerunOutpostGone refuses, naming the outpost, the rerun of a session
// whose outpost was deleted: the session is there, its outpost is not, and
// a rerun runs on the session's own outpost only. An outpost deleted after
// this check is refused by the create's own check.
func (s *Server) rerunOutpostGone(ctx context.Context, sess store.Session) error {
	_, err := s.store.GetOutpost(ctx, sess.OutpostID)
	if errors.Is(err, store.ErrNotFound) {
		name := sess.Spec.Outpost
		if name == "" {
			name = sess.OutpostID
		}
		return errConflict("Outpost %q, where session %s ran, was deleted; a rerun runs on the session's own outpost, so it cannot be rerun. Create a new session on another outpost instead (outpost sessions create --outpost NAME).", name, sess.ID)
	}
	if err != nil {
		return fmt.Errorf("get outpost %s: %w", sess.OutpostID, err)
	}
	return nil
}

// rerunRequest is the create request that repeats sess. The spec goes
// through its JSON, so every field a session's spec shares by name with a
// create request carries over without a list to keep up.
func rerunRequest(sess store.Session) (api.CreateSessionRequest, error) {
	var req api.CreateSessionRequest
	b, err := json.Marshal(sess.Spec)
	if err == nil {
		err = json.Unmarshal(b, &req)
	}
	if err != nil {
		return req, fmt.Errorf("the spec of session %s: %w", sess.ID, err)
	}
	req.Outpost = sess.OutpostID
	req.NetworkPolicy = sess.NetworkPolicy
	req.Secrets = maps.Clone(sess.Secrets)
	// Stored secrets are read again: a rotated one gives its new value, a
	// deleted one a clear error, as for a new session.
	for _, name := range sess.Spec.UseSecrets {
		delete(req.Secrets, name)
	}
	return req, nil
}

// startSession creates a session from req, as POST /v1/sessions does.
func (s *Server) startSession(w http.ResponseWriter, r *http.Request, req api.CreateSessionRequest) error {
	ctx := r.Context()
	if err := validateSession(&req); err != nil {
		return err
	}
	if err := checkRemoteBinarySHA(req.RemoteBinarySHA); err != nil {
		return err
	}
	if req.Agent.Kind == api.AgentLLM && s.opts.LLM == nil {
		return errBadRequest("This server has no model provider configured: start it with OUTPOST_LLM_PROVIDER (openai or anthropic), OUTPOST_LLM_BASE_URL, OUTPOST_LLM_API_KEY and OUTPOST_LLM_MODEL.")
	}
	o, unlock, err := s.lockOutpost(ctx, req.Outpost, true)
	if err != nil {
		return err
	}
	defer unlock()
	own, err := checkSessionPolicy(ctx, o, req.NetworkPolicy)
	if err != nil {
		return err
	}
	if err := req.Requirements.Validate(); err != nil {
		return errBadRequest("%s.", err)
	}
	if err := s.checkOutpostBudget(ctx, o); err != nil {
		return err
	}
	secrets, err := s.useOutpostSecrets(ctx, o, req.UseSecrets, req.Secrets)
	if err != nil {
		return err
	}
	now := s.now()
	sess := store.Session{
		ID:        newSessionID(),
		OutpostID: o.ID,
		Spec: api.SessionSpec{
			Outpost: o.Name, Title: req.Title, Prompt: req.Prompt, Repos: req.Repos,
			Agent: req.Agent, Env: req.Env, Limits: req.Limits, RemoteBinarySHA: strPtr(req.RemoteBinarySHA),
			Priority: req.Priority, Desktop: cmp.Or(req.Desktop, outpostDesktopSize(o)), Requirements: req.Requirements,
			UseSecrets: req.UseSecrets, ApprovalRules: req.ApprovalRules,
		},
		Secrets:       secrets,
		NetworkPolicy: own,
		Status:        api.StatusNew,
		Reason:        fmt.Sprintf("Waiting in the queue of outpost %s.", o.Name),
		CreatedAt:     now,
		UpdatedAt:     now,
	}
	entry := &store.QueueEntry{
		SessionID: sess.ID, OutpostID: o.ID, Kind: api.KindNew, Platform: o.Platform,
		Phase: api.PhasePending, SessionStatus: api.QueueSessionPending, CreatedAt: now, UpdatedAt: now,
		RemoteBinarySHA: cmp.Or(req.RemoteBinarySHA, o.RemoteBinarySHA),
		Priority:        req.Priority, MaxAttempts: cmp.Or(req.Limits.MaxAttempts, o.MaxAttempts, api.DefaultMaxAttempts),
		NetworkPolicy: netpolicy.Effective(o.NetworkPolicy, own),
		Requirements:  effectiveRequirements(cmp.Or(req.Requirements, o.Requirements)),
	}
	red := redact.NewSet(secrets)
	events := []api.Event{lifecycle.StatusEvent(sess, now)}
	if req.Agent.Kind == api.AgentLLM {
		// The prompt opens the conversation, before anything else can. Like
		// all the transcript, and so the model, it never shows a secret.
		events = append(events, api.Event{Type: api.EventMessage, Role: api.RoleUser, Text: red.String(req.Prompt), Time: now.UnixMilli()})
	}
	// Secrets appear by name only; a title that holds a value is redacted.
	actx := s.audited(ctx, audit.SessionCreate, audit.Object{Kind: audit.ObjectSession, ID: sess.ID}, map[string]any{
		"outpost_id": o.ID, "title": sess.Spec.Title, "agent": sess.Spec.Agent.Kind, "secret_names": slices.Sorted(maps.Keys(secrets)),
		"use_secrets": req.UseSecrets,
	}, secrets)
	if err := s.store.CreateSession(actx, sess, entry, events); err != nil {
		return fmt.Errorf("create session: %w", err)
	}
	steptrace.Mark("server.created", sess.ID)
	s.metrics.sessionsCreated.Inc()
	s.queueFeed.Notify(o.ID)
	s.claimWaits.pending(entry)
	s.log.Info("session created", "session", sess.ID, "outpost", o.Name, "title", red.String(sess.Spec.Title))
	out := toAPISession(sess)
	out.Spec.NetworkPolicy, out.Spec.NetworkPolicyOwn = entry.NetworkPolicy, own != nil
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// sessionFor loads a session the caller may see. A session outside the
// caller's token answers as a missing one.
func (s *Server) sessionFor(ctx context.Context, id string) (store.Session, error) {
	sess, err := s.store.GetSession(ctx, id)
	if err == nil && !principalFrom(ctx).allowsOutpost(sess.OutpostID) {
		err = store.ErrNotFound
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.Session{}, errNotFound("Session %s does not exist.", id)
	case err != nil:
		return store.Session{}, fmt.Errorf("get session %s: %w", id, err)
	}
	return sess, nil
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) error {
	sess, err := s.sessionFor(r.Context(), r.PathValue("session"))
	if err != nil {
		return err
	}
	out, err := s.apiSession(r.Context(), sess)
	if err != nil {
		return err
	}
	if e, err := s.store.GetQueueEntry(r.Context(), sess.ID); err == nil && !e.Deleted {
		if e.Phase == api.PhaseClaimed {
			out.Status.AcceptorID = strPtr(e.AcceptorID)
		}
		if sess.Status == api.StatusNew && !e.Requirements.IsZero() {
			// Computed when read: the workers connected change without the
			// session changing.
			if workers, err := s.store.ListWorkers(r.Context(), e.OutpostID, s.now()); err == nil {
				if why := unplaceable(e, workers); why != "" {
					out.Status.Reason = why
				}
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// sessionCursor encodes a keyset position in the newest-first list.
func sessionCursor(sess store.Session) string {
	raw := strconv.FormatInt(sess.CreatedAt.UnixMilli(), 10) + ":" + sess.ID
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

func parseSessionCursor(c string) (time.Time, string, error) {
	bad := errBadRequest("The cursor %q is not one this server issued.", c)
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", bad
	}
	ms, id, ok := strings.Cut(string(raw), ":")
	if !ok {
		return time.Time{}, "", bad
	}
	v, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}, "", bad
	}
	return time.UnixMilli(v).UTC(), id, nil
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	q := r.URL.Query()
	f := store.SessionFilter{Status: q.Get("status"), Title: q.Get("q"), Worker: q.Get("worker"), ForkedFrom: q.Get("forked_from")}
	if err := api.ValidateAcceptorID(f.Worker); f.Worker != "" && err != nil {
		return errBadRequest("worker: %s.", err)
	}
	switch f.Status {
	case "", api.StatusNew, api.StatusClaimed, api.StatusRunning, api.StatusExit, api.StatusError, api.StatusSuspended, api.StatusResuming:
	default:
		return errBadRequest("status %q is unknown; use new, claimed, running, resuming, suspended, exit or error.", f.Status)
	}
	var err error
	if f.OutpostID, err = s.queueOutpostFilter(ctx, q.Get("outpost")); err != nil {
		return err
	}
	if f.Limit, err = parseFirst(q.Get("first"), 50, 200); err != nil {
		return err
	}
	if c := q.Get("cursor"); c != "" {
		if f.BeforeCreated, f.BeforeID, err = parseSessionCursor(c); err != nil {
			return err
		}
	}
	limit := f.Limit
	f.Limit++
	rows, total, err := s.store.ListSessions(ctx, f)
	if err != nil {
		return fmt.Errorf("list sessions: %w", err)
	}
	list := api.SessionList{Items: []api.Session{}, Total: total}
	if len(rows) > limit {
		rows, list.HasNextPage = rows[:limit], true
	}
	policies := map[string]*api.NetworkPolicy{} // by outpost, for the sessions that follow theirs
	for _, sess := range rows {
		out, err := s.apiSessionCached(ctx, sess, policies)
		if err != nil {
			return fmt.Errorf("list sessions: %w", err)
		}
		list.Items = append(list.Items, out)
	}
	if len(rows) > 0 {
		list.Cursor = sessionCursor(rows[len(rows)-1])
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (s *Server) terminateSession(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	var req api.TerminateRequest
	if err := decodeOptional(w, r, &req); err != nil {
		return err
	}
	sess, err := s.sessionFor(ctx, r.PathValue("session"))
	if err != nil {
		return err
	}
	reason := "Terminated by a user."
	if req.Reason != "" {
		if len(req.Reason) > 1000 {
			return errBadRequest("reason is longer than 1000 characters.")
		}
		reason = "Terminated by a user: " + redact.NewSet(sess.Secrets).String(req.Reason)
	}
	actx := s.audited(ctx, audit.SessionTerminate, audit.Object{Kind: audit.ObjectSession, ID: sess.ID}, map[string]any{"reason": reason}, sess.Secrets)
	if err := s.endSession(actx, sess.ID, api.StatusExit, api.DetailUserRequest, reason); err != nil {
		return err
	}
	if sess, err = s.sessionFor(ctx, sess.ID); err != nil {
		return err
	}
	return s.writeSession(ctx, w, sess)
}

// sendMessage records a user message; an llm session reads it at its next
// turn.
func (s *Server) sendMessage(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	var req api.MessageRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if strings.TrimSpace(req.Text) == "" || len(req.Text) > maxPrompt {
		return errBadRequest("text is required (at most %d bytes).", maxPrompt)
	}
	sess, err := s.sessionFor(ctx, r.PathValue("session"))
	if err != nil {
		return err
	}
	if sess.Spec.Agent.Kind != api.AgentLLM {
		return errConflict("Session %s runs a %s agent, which takes no messages.", sess.ID, sess.Spec.Agent.Kind)
	}
	if sess.Status == api.StatusSuspended {
		// The message would resume it.
		if err := s.checkResumeBudget(ctx, sess); err != nil {
			return err
		}
	}
	now := s.now()
	// Under the session's message lock: a runner ending the session because
	// its model is done either reads this message first or has ended it
	// before, and then the message is refused (runner.finish).
	unlock, err := s.messageLock(ctx, sess.ID)
	if err != nil {
		return err
	}
	// The entry tells that a message was sent, not what it says: the
	// transcript keeps that.
	actx := s.audited(ctx, audit.SessionMessage, audit.Object{Kind: audit.ObjectSession, ID: sess.ID}, map[string]any{"bytes": len(req.Text)}, nil)
	m, err := s.store.UpdateSession(actx, sess.ID, func(cur store.Session, e store.QueueEntry) (store.Mutation, error) {
		if api.IsFinal(cur.Status) {
			return store.Mutation{}, errConflict("Session %s has ended (%s, %s); it takes no more messages.", sess.ID, cur.Status, cur.StatusDetail)
		}
		m := store.Mutation{Events: []api.Event{{Type: api.EventMessage, Role: api.RoleUser, Text: redact.NewSet(sess.Secrets).String(req.Text), Time: now.UnixMilli()}}}
		if cur.Status == api.StatusSuspended {
			lifecycle.ResumeIn(&cur, &e, &m, now, "Resumed by a message from the user.")
		}
		return m, nil
	})
	unlock()
	if err != nil {
		return err
	}
	s.committed(sess.ID, m)
	s.userMessages.Notify()
	writeJSON(w, http.StatusAccepted, m.Events[0])
	return nil
}
