package sqlstore

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sealed"
)

// SessionCols are the columns ScanSession reads.
const SessionCols = `id, outpost_id, spec_json, secrets_json, status, status_detail, reason, last_seq,
	capabilities_json, created_at, updated_at, started_at, ended_at, usage_json, artifacts_pruned_at,
	network_policy_json, worker, approvals_json`

// ScanSession reads SessionCols, opening the secrets with keys.
func ScanSession(sc Scanner, keys *sealed.Keyring) (store.Session, error) {
	var s store.Session
	var spec, secrets string
	var caps, usage, policy, approvals nullString
	var created, updated int64
	var started, ended, pruned nullInt64
	if err := sc.Scan(&s.ID, &s.OutpostID, &spec, &secrets, &s.Status, &s.StatusDetail, &s.Reason, &s.LastSeq,
		&caps, &created, &updated, &started, &ended, &usage, &pruned, &policy, &s.Worker, &approvals); err != nil {
		return store.Session{}, err
	}
	if err := decodeApprovals(&s, approvals); err != nil {
		return store.Session{}, err
	}
	var err error
	if s.NetworkPolicy, err = decodePolicy(policy); err != nil {
		return store.Session{}, fmt.Errorf("session %s network policy: %w", s.ID, err)
	}
	if err := json.Unmarshal([]byte(spec), &s.Spec); err != nil {
		return store.Session{}, fmt.Errorf("session %s spec: %w", s.ID, err)
	}
	if s.Secrets, err = keys.OpenSecrets(s.ID, secrets); err != nil {
		return store.Session{}, fmt.Errorf("session %s secrets: %w", s.ID, err)
	}
	if err := decodeState(&s, caps, usage); err != nil {
		return store.Session{}, err
	}
	s.CreatedAt, s.UpdatedAt = FromMS(created), FromMS(updated)
	s.StartedAt, s.EndedAt = started.timePtr(), ended.timePtr()
	s.ArtifactsPrunedAt = pruned.timePtr()
	return s, nil
}

// StateCols are the columns of a session that change after creation, which
// ScanState reads.
const StateCols = `id, outpost_id, status, status_detail, reason, last_seq, capabilities_json, created_at, updated_at,
	started_at, ended_at, usage_json, artifacts_pruned_at, network_policy_json, worker, approvals_json`

// ScanState reads StateCols: a session without its immutable spec and
// secrets, which write transactions neither need nor rewrite.
func ScanState(sc Scanner) (store.Session, error) {
	var s store.Session
	var caps, usage, policy, approvals nullString
	var created, updated int64
	var started, ended, pruned nullInt64
	if err := sc.Scan(&s.ID, &s.OutpostID, &s.Status, &s.StatusDetail, &s.Reason, &s.LastSeq,
		&caps, &created, &updated, &started, &ended, &usage, &pruned, &policy, &s.Worker, &approvals); err != nil {
		return store.Session{}, err
	}
	if err := decodeApprovals(&s, approvals); err != nil {
		return store.Session{}, err
	}
	var err error
	if s.NetworkPolicy, err = decodePolicy(policy); err != nil {
		return store.Session{}, fmt.Errorf("session %s network policy: %w", s.ID, err)
	}
	if err := decodeState(&s, caps, usage); err != nil {
		return store.Session{}, err
	}
	s.CreatedAt, s.UpdatedAt = FromMS(created), FromMS(updated)
	s.StartedAt, s.EndedAt = started.timePtr(), ended.timePtr()
	s.ArtifactsPrunedAt = pruned.timePtr()
	return s, nil
}

// decodeApprovals decodes the approvals column (NULL when none).
func decodeApprovals(s *store.Session, v nullString) error {
	if !v.valid {
		return nil
	}
	if err := json.Unmarshal([]byte(v.v), &s.Approvals); err != nil {
		return fmt.Errorf("session %s approvals: %w", s.ID, err)
	}
	return nil
}

// encodeApprovals is the value of the approvals column: NULL for none.
func encodeApprovals(s *store.Session) (any, error) {
	if len(s.Approvals) == 0 {
		return nil, nil
	}
	v, err := Marshal(s.Approvals)
	if err != nil {
		return nil, fmt.Errorf("approvals: %w", err)
	}
	return v, nil
}

// decodeState decodes the capabilities and usage columns (NULL when absent).
func decodeState(s *store.Session, caps, usage nullString) error {
	if caps.valid {
		s.Capabilities = new(api.Capabilities)
		if err := json.Unmarshal([]byte(caps.v), s.Capabilities); err != nil {
			return fmt.Errorf("session %s capabilities: %w", s.ID, err)
		}
	}
	if usage.valid {
		if err := json.Unmarshal([]byte(usage.v), &s.Usage); err != nil {
			return fmt.Errorf("session %s usage: %w", s.ID, err)
		}
	}
	return nil
}

// stateValues encodes the capabilities and usage of s for their columns:
// NULL while there are none.
func stateValues(s *store.Session) (caps, usage any, err error) {
	if s.Capabilities != nil {
		if caps, err = Marshal(s.Capabilities); err != nil {
			return nil, nil, fmt.Errorf("capabilities: %w", err)
		}
	}
	if s.Usage != (api.Usage{}) {
		if usage, err = Marshal(s.Usage); err != nil {
			return nil, nil, fmt.Errorf("usage: %w", err)
		}
	}
	return caps, usage, nil
}

// UpdateStateSQL writes the columns of a session that change after creation
// (but not artifacts_pruned_at, which only MarkArtifactsPruned writes), with
// StateArgs.
const UpdateStateSQL = `UPDATE sessions SET status = $2, status_detail = $3, reason = $4, last_seq = $5,
	capabilities_json = $6, updated_at = $7, started_at = $8, ended_at = $9, usage_json = $10,
	network_policy_json = $11, worker = $12, approvals_json = $13 WHERE id = $1`

// StateArgs are the arguments of UpdateStateSQL for s.
func StateArgs(s *store.Session) ([]any, error) {
	caps, usage, err := stateValues(s)
	if err != nil {
		return nil, err
	}
	policy, err := EncodePolicy(s.NetworkPolicy)
	if err != nil {
		return nil, err
	}
	approvals, err := encodeApprovals(s)
	if err != nil {
		return nil, err
	}
	return []any{s.ID, s.Status, s.StatusDetail, s.Reason, s.LastSeq, caps, MS(s.UpdatedAt), PtrMS(s.StartedAt),
		PtrMS(s.EndedAt), usage, policy, s.Worker, approvals}, nil
}

// InsertSessionSQL inserts a session, with SessionArgs.
const InsertSessionSQL = `INSERT INTO sessions (id, outpost_id, title_fold, spec_json, secrets_json, status,
	status_detail, reason, last_seq, capabilities_json, created_at, updated_at, started_at, ended_at, usage_json,
	secrets_key, network_policy_json, worker, forked_from) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)`

// SessionArgs are the arguments of InsertSessionSQL for s, its secrets
// sealed with keys (nil keeps them plaintext).
func SessionArgs(s *store.Session, keys *sealed.Keyring) ([]any, error) {
	spec, err := Marshal(s.Spec)
	if err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	secrets, err := keys.SealSecrets(s.ID, s.Secrets)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	caps, usage, err := stateValues(s)
	if err != nil {
		return nil, err
	}
	policy, err := EncodePolicy(s.NetworkPolicy)
	if err != nil {
		return nil, err
	}
	return []any{s.ID, s.OutpostID, strings.ToLower(s.Spec.Title), spec, secrets, s.Status, s.StatusDetail, s.Reason,
		s.LastSeq, caps, MS(s.CreatedAt), MS(s.UpdatedAt), PtrMS(s.StartedAt), PtrMS(s.EndedAt), usage, keys.ID(), policy, s.Worker, s.Spec.ForkedFrom}, nil
}

// EntryCols are the columns of a queue entry, which ScanEntry reads.
const EntryCols = `session_id, outpost_id, kind, platform, phase, acceptor_id, claim_deadline, epoch,
	session_status, rev, deleted, created_at, updated_at, live_until, remote_binary_sha,
	priority, attempts, max_attempts, attempt_reasons_json, owner, network_policy_json, requirements_json,
	claim_token_id`

// ScanEntry reads EntryCols.
func ScanEntry(sc Scanner) (store.QueueEntry, error) {
	var e store.QueueEntry
	var deadline, live nullInt64
	var created, updated, priority, attempts, maxAttempts int64
	var reasons, policy, reqs, claimToken nullString
	if err := sc.Scan(&e.SessionID, &e.OutpostID, &e.Kind, &e.Platform, &e.Phase, &e.AcceptorID, &deadline, &e.Epoch,
		&e.SessionStatus, &e.Rev, &e.Deleted, &created, &updated, &live, &e.RemoteBinarySHA,
		&priority, &attempts, &maxAttempts, &reasons, &e.Owner, &policy, &reqs, &claimToken); err != nil {
		return store.QueueEntry{}, err
	}
	e.ClaimTokenID = claimToken.v
	if reqs.valid {
		e.Requirements = new(api.Requirements)
		if err := json.Unmarshal([]byte(reqs.v), e.Requirements); err != nil {
			return store.QueueEntry{}, fmt.Errorf("queue entry %s requirements: %w", e.SessionID, err)
		}
	}
	var err error
	if e.NetworkPolicy, err = decodePolicy(policy); err != nil {
		return store.QueueEntry{}, fmt.Errorf("queue entry %s network policy: %w", e.SessionID, err)
	}
	e.ClaimDeadline, e.CreatedAt, e.UpdatedAt = deadline.time(), FromMS(created), FromMS(updated)
	e.LiveUntil = live.time()
	e.Priority, e.Attempts, e.MaxAttempts = int(priority), int(attempts), int(maxAttempts)
	if reasons.valid {
		if err := json.Unmarshal([]byte(reasons.v), &e.AttemptReasons); err != nil {
			return store.QueueEntry{}, fmt.Errorf("queue entry %s attempt reasons: %w", e.SessionID, err)
		}
	}
	return e, nil
}

// EntryArgs are the arguments of an upsert of e: EntryCols without rev, in
// their order ($1–$9, then $10–$22 for deleted … claim_token_id).
// The rev is the store's to place.
func EntryArgs(e *store.QueueEntry) []any {
	var reasons any // NULL while there are none
	if len(e.AttemptReasons) > 0 {
		b, _ := json.Marshal(e.AttemptReasons) // a []string always encodes
		reasons = string(b)
	}
	return []any{e.SessionID, e.OutpostID, e.Kind, e.Platform, e.Phase, e.AcceptorID, NullMS(e.ClaimDeadline),
		e.Epoch, e.SessionStatus, e.Deleted, MS(e.CreatedAt), MS(e.UpdatedAt), NullMS(e.LiveUntil), e.RemoteBinarySHA,
		int64(e.Priority), int64(e.Attempts), int64(e.MaxAttempts), reasons, e.Owner, mustEncodePolicy(e.NetworkPolicy),
		encodeRequirements(e.Requirements), nullIfEmpty(e.ClaimTokenID)}
}

// nullIfEmpty is v as a nullable column's value: NULL for "".
func nullIfEmpty(v string) any {
	if v == "" {
		return nil
	}
	return v
}

// EncodeRequirements is the value of a requirements_json column: NULL for
// none.
func EncodeRequirements(r *api.Requirements) any { return encodeRequirements(r) }

// ScanRequirements reads a requirements_json column: nil for NULL.
func ScanRequirements(v sql.NullString) (*api.Requirements, error) {
	if !v.Valid {
		return nil, nil
	}
	r := new(api.Requirements)
	if err := json.Unmarshal([]byte(v.String), r); err != nil {
		return nil, err
	}
	return r, nil
}

// encodeRequirements is the value of a requirements_json column: NULL for
// none. An api.Requirements holds only ints, strings and a string map, so
// it always encodes.
func encodeRequirements(r *api.Requirements) any {
	if r.IsZero() {
		return nil
	}
	b, _ := json.Marshal(r)
	return string(b)
}

// EncodePolicy is the value of a network_policy_json column: NULL for no
// policy.
func EncodePolicy(p *api.NetworkPolicy) (any, error) {
	if p == nil {
		return nil, nil
	}
	s, err := Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("network policy: %w", err)
	}
	return s, nil
}

// mustEncodePolicy is EncodePolicy of a value that always encodes (an
// api.NetworkPolicy holds only strings, ints and bools).
func mustEncodePolicy(p *api.NetworkPolicy) any {
	v, _ := EncodePolicy(p)
	return v
}

// ScanPolicy reads a network_policy_json column: nil for NULL.
func ScanPolicy(v sql.NullString) (*api.NetworkPolicy, error) {
	return decodePolicy(nullString{v: v.String, valid: v.Valid})
}

// decodePolicy reads a network_policy_json column.
func decodePolicy(v nullString) (*api.NetworkPolicy, error) {
	if !v.valid {
		return nil, nil
	}
	p := new(api.NetworkPolicy)
	if err := json.Unmarshal([]byte(v.v), p); err != nil {
		return nil, err
	}
	return p, nil
}

// EntryConflictSQL is the ON CONFLICT clause of an upsert of a queue entry:
// every column but remote_binary_sha (which keeps what the insert wrote)
// takes the new value, except that within one epoch live_until is never
// lowered.
func (d Dialect) EntryConflictSQL() string {
	return `ON CONFLICT (session_id) DO UPDATE SET outpost_id = excluded.outpost_id, kind = excluded.kind,
		platform = excluded.platform, phase = excluded.phase, acceptor_id = excluded.acceptor_id,
		claim_deadline = excluded.claim_deadline, epoch = excluded.epoch, session_status = excluded.session_status,
		rev = excluded.rev, deleted = excluded.deleted, created_at = excluded.created_at,
		updated_at = excluded.updated_at, priority = excluded.priority, attempts = excluded.attempts,
		max_attempts = excluded.max_attempts, attempt_reasons_json = excluded.attempt_reasons_json,
		owner = excluded.owner, network_policy_json = excluded.network_policy_json,
		requirements_json = excluded.requirements_json, claim_token_id = excluded.claim_token_id, live_until = CASE WHEN excluded.epoch = queue.epoch
			THEN NULLIF(` + d.Greatest + `(COALESCE(excluded.live_until, 0), COALESCE(queue.live_until, 0)), 0)
			ELSE excluded.live_until END`
}

// CallCols are the columns of a tool call, which ScanCall reads.
const CallCols = `session_id, seq, tool, args, done, ok, value, error, created_at, done_at`

// ScanCall reads CallCols.
func ScanCall(sc Scanner) (store.Call, error) {
	var c store.Call
	var created int64
	var args, value []byte
	var doneAt nullInt64
	if err := sc.Scan(&c.SessionID, &c.Seq, &c.Tool, &args, &c.Done, &c.OK, &value, &c.Error, &created, &doneAt); err != nil {
		return store.Call{}, err
	}
	if args != nil {
		c.Args = args
	}
	if value != nil {
		c.Value = value
	}
	c.CreatedAt, c.DoneAt = FromMS(created), doneAt.timePtr()
	return c, nil
}

// UpsertCallSQL inserts a call or replaces the stored call of the same seq,
// with CallArgs.
const UpsertCallSQL = `INSERT INTO calls (` + CallCols + `)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
	ON CONFLICT (session_id, seq) DO UPDATE SET tool = excluded.tool, args = excluded.args, done = excluded.done,
		ok = excluded.ok, value = excluded.value, error = excluded.error, created_at = excluded.created_at,
		done_at = excluded.done_at`

// CallArgs are the arguments of UpsertCallSQL for c.
func CallArgs(c *store.Call) []any {
	return []any{c.SessionID, c.Seq, c.Tool, BytesOrNil(c.Args), c.Done, c.OK, BytesOrNil(c.Value), c.Error,
		MS(c.CreatedAt), PtrMS(c.DoneAt)}
}

// ScanEvent reads a row of one body_json column.
func ScanEvent(sc Scanner) (api.Event, error) {
	var body string
	var ev api.Event
	if err := sc.Scan(&body); err != nil {
		return ev, err
	}
	err := json.Unmarshal([]byte(body), &ev)
	return ev, err
}

// TokenCols are the columns of an API token, which ScanToken reads.
const TokenCols = `id, name, hash, scopes_json, outpost_id, created_at, expires_at, revoked_at, user_id, role, session_id`

// ScanToken reads TokenCols.
func ScanToken(sc Scanner) (store.Token, error) {
	var t store.Token
	var scopes string
	var created int64
	var expires, revoked nullInt64
	if err := sc.Scan(&t.ID, &t.Name, &t.Hash, &scopes, &t.OutpostID, &created, &expires, &revoked, &t.UserID, &t.Role, &t.SessionID); err != nil {
		return store.Token{}, err
	}
	if err := json.Unmarshal([]byte(scopes), &t.Scopes); err != nil {
		return store.Token{}, fmt.Errorf("token %s scopes: %w", t.ID, err)
	}
	t.CreatedAt, t.ExpiresAt, t.RevokedAt = FromMS(created), expires.timePtr(), revoked.timePtr()
	return t, nil
}

// InsertTokenSQL inserts an API token, with TokenArgs.
const InsertTokenSQL = `INSERT INTO tokens (` + TokenCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`

// TokenArgs are the arguments of InsertTokenSQL for t.
func TokenArgs(t *store.Token) ([]any, error) {
	scopes, err := Marshal(t.Scopes)
	if err != nil {
		return nil, err
	}
	return []any{t.ID, t.Name, t.Hash, scopes, t.OutpostID, MS(t.CreatedAt), PtrMS(t.ExpiresAt), PtrMS(t.RevokedAt), t.UserID, t.Role, t.SessionID}, nil
}

// ConnectTokenCols are the columns of a connect token, which
// ScanConnectToken reads.
const ConnectTokenCols = `hash, session_id, epoch, created_at`

// ScanConnectToken reads ConnectTokenCols.
func ScanConnectToken(sc Scanner) (store.ConnectToken, error) {
	var c store.ConnectToken
	var created int64
	if err := sc.Scan(&c.Hash, &c.SessionID, &c.Epoch, &created); err != nil {
		return store.ConnectToken{}, err
	}
	c.CreatedAt = FromMS(created)
	return c, nil
}
