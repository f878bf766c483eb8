// Package audit is the audit log's model: an entry (who did what to which
// object, from where), the context that carries a pending entry from the
// HTTP handler that decides a change to the store transaction that commits
// it, and the hash chain that links every entry to the one before.
//
// An entry is never written on its own beside the change it records: a
// handler attaches it to the context of the store call that makes the
// change (With), and the store's write path appends whatever entry the
// context carries inside that same transaction, so a change that rolls
// back leaves no entry and a change that commits always has one.
package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Actor kinds.
const (
	// ActorToken is an API token (the web UI's sign-in uses one too).
	ActorToken = "token"
	// ActorUser is a person signed in through an identity provider.
	ActorUser = "user"
	// ActorServiceAccount is a token that belongs to no person.
	ActorServiceAccount = "service_account"
	// ActorAnonymous is a caller the server could not identify (a failed
	// sign-in).
	ActorAnonymous = "anonymous"
	// ActorSystem is the server itself (a retention sweep).
	ActorSystem = "system"
)

// Actions the server records.
const (
	Login              = "login"
	LoginFailed        = "login.failed"
	TokenCreate        = "token.create"
	TokenRevoke        = "token.revoke"
	OutpostCreate      = "outpost.create"
	OutpostUpdate      = "outpost.update"
	OutpostDelete      = "outpost.delete"
	SessionCreate      = "session.create"
	SessionUpdate      = "session.update"
	SessionTerminate   = "session.terminate"
	SessionSuspend     = "session.suspend"
	SessionResume      = "session.resume"
	SessionFork        = "session.fork"
	SessionMessage     = "session.message"
	DesktopTakeControl = "desktop.take_control"
	DesktopHandBack    = "desktop.hand_back"
	NetworkGrant       = "network.grant"
	NetworkDeny        = "network.deny"
	WorkerRegister     = "worker.register"
	RoleGrant          = "role.grant"
	RoleRevoke         = "role.revoke"
	ApprovalApprove    = "approval.approve"
	ApprovalDeny       = "approval.deny"
	SecretSet          = "secret.set"
	SecretDelete       = "secret.delete"
	WebhookCreate      = "webhook.create"
	WebhookDelete      = "webhook.delete"
	DeviceApprove      = "device.approve"
	DeviceDeny         = "device.deny"
)

// Object kinds.
const (
	ObjectToken          = "token"
	ObjectOutpost        = "outpost"
	ObjectSession        = "session"
	ObjectNetworkRequest = "network_request"
	ObjectWorker         = "worker"
	ObjectRoleBinding    = "role_binding"
	ObjectToolCall       = "tool_call"
	ObjectSecret         = "secret"
	ObjectWebhook        = "webhook"
	ObjectDeviceLogin    = "device_login"
)

// Actor is who made a change.
type Actor struct {
	// Kind is an Actor… constant.
	Kind string `json:"kind"`
	// ID is the token's or user's id; "" for anonymous and system.
	ID string `json:"id"`
	// Name is the token's or user's name at the time.
	Name string `json:"name"`
}

// Object is what a change was made to.
type Object struct {
	// Kind is an Object… constant.
	Kind string `json:"kind"`
	// ID is the object's id (an outpost's id, not its name).
	ID string `json:"id"`
}

// Entry is one record of the audit log.
type Entry struct {
	// Seq orders the log; the store assigns it (1, 2, …, never reused).
	Seq int64
	// ID is the entry's audit_log_id, derived from Seq by the store.
	ID string
	// CreatedAt is when the change was made; the store keeps
	// milliseconds and sets it when it is zero.
	CreatedAt time.Time
	Action    string
	Actor     Actor
	// SourceIP is the address the request came from; "" when none.
	SourceIP string
	Object   Object
	// Data is a JSON object of details, already redacted; nil for none.
	Data json.RawMessage
	// Hash is SHA-256(previous entry's Hash || Canonical()), hex; the
	// store computes it.
	Hash string
	// Skip, set by a store write in its transaction, leaves the entry
	// out of that transaction: the write found nothing worth recording
	// (a worker's heartbeat that is not its first). Each try of the
	// transaction sets it afresh.
	Skip bool
}

// IDFor is the audit_log_id of the entry numbered seq.
func IDFor(seq int64) string { return "audit-" + strconv.FormatInt(seq, 10) }

// SeqOf is the seq an audit_log_id names; false when id is not one.
func SeqOf(id string) (int64, bool) {
	rest, ok := strings.CutPrefix(id, "audit-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || n <= 0 || strconv.FormatInt(n, 10) != rest {
		return 0, false
	}
	return n, true
}

// canonical is the form of an entry that is hashed: fixed field order,
// times in Unix milliseconds, data as stored.
type canonical struct {
	Seq       int64           `json:"seq"`
	ID        string          `json:"id"`
	CreatedAt int64           `json:"created_at_ms"`
	Action    string          `json:"action"`
	Actor     Actor           `json:"actor"`
	SourceIP  string          `json:"source_ip"`
	Object    Object          `json:"object"`
	Data      json.RawMessage `json:"data"`
}

// Canonical is the bytes of e that its hash covers: every field but Hash.
func (e *Entry) Canonical() []byte {
	data := e.Data
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	b, err := json.Marshal(canonical{
		Seq: e.Seq, ID: e.ID, CreatedAt: e.CreatedAt.UnixMilli(), Action: e.Action,
		Actor: e.Actor, SourceIP: e.SourceIP, Object: e.Object, Data: data,
	})
	if err != nil {
		// Only Data can fail, and the store checks it is valid JSON
		// before hashing; hashing the error text keeps a corrupted row
		// from verifying.
		return []byte(err.Error())
	}
	return b
}

// Chain is SHA-256(prev || e.Canonical()) in hex: the hash an entry
// following one whose hash is prev must have ("" before the first).
func Chain(prev string, e *Entry) string {
	h := sha256.New()
	h.Write([]byte(prev))
	h.Write(e.Canonical())
	return hex.EncodeToString(h.Sum(nil))
}

// pending is the entry a context carries, and whether a transaction has
// committed it already.
type pending struct {
	mu        sync.Mutex // guards the following
	e         *Entry
	committed bool
}

type pendingKey struct{}

// With returns ctx carrying e: the next write transaction the store runs
// with that context appends e, once. Attach it to the context of the
// store call that makes the change e records, and of no other.
func With(ctx context.Context, e *Entry) context.Context {
	return context.WithValue(ctx, pendingKey{}, &pending{e: e})
}

// Pending returns the entry ctx carries that no transaction has committed
// yet, and a function the store calls once the transaction that appended
// it committed; nil when there is none.
func Pending(ctx context.Context) (e *Entry, committed func()) {
	p, _ := ctx.Value(pendingKey{}).(*pending)
	if p == nil {
		return nil, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.committed {
		return nil, nil
	}
	return p.e, func() {
		p.mu.Lock()
		p.committed = true
		p.mu.Unlock()
	}
}

// Committed reports whether the entry ctx carries was committed; false
// when it carries none.
func Committed(ctx context.Context) bool {
	p, _ := ctx.Value(pendingKey{}).(*pending)
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.committed
}

// Without returns ctx carrying no entry, for a write an action makes
// before the change its entry records (which keeps the entry).
func Without(ctx context.Context) context.Context {
	return context.WithValue(ctx, pendingKey{}, (*pending)(nil))
}
