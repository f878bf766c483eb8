package api

import "encoding/json"

// AuditLogsPath lists the audit log (GET, admin).
const AuditLogsPath = "/v1/audit-logs"

// AuditLogsVerifyPath checks the audit log's hash chain (GET, admin).
const AuditLogsVerifyPath = "/v1/audit-logs/verify"

// MaxAuditWindowDays is the longest window time_after..time_before of a
// list of the audit log.
const MaxAuditWindowDays = 100

// AuditActor is who made a change.
type AuditActor struct {
	// Kind is "token" (an API token), "user" or "service_account"; a
	// failed sign-in's is "anonymous", the server's own "system".
	Kind string `json:"kind"`
	// ID is the token's or user's id; "" when anonymous.
	ID string `json:"id"`
	// Name is its name when the change was made.
	Name string `json:"name"`
}

// AuditObject is what a change was made to.
type AuditObject struct {
	// Kind is token, outpost, session, network_request or worker.
	Kind string `json:"kind"`
	// ID is its id (an outpost's id, not its name).
	ID string `json:"id"`
}

// AuditLog is one entry of the audit log.
type AuditLog struct {
	// AuditLogID is "audit-<n>", n growing by one with each entry.
	AuditLogID string `json:"audit_log_id"`
	// CreatedAt is when the change was made, Unix seconds.
	CreatedAt int64 `json:"created_at"`
	// Action is what was done: outpost.create, token.revoke, login, …
	Action string     `json:"action"`
	Actor  AuditActor `json:"actor"`
	// SourceIP is the address the request came from.
	SourceIP string      `json:"source_ip"`
	Object   AuditObject `json:"object"`
	// Data holds details of the change, a JSON object; secrets never
	// appear in it.
	Data json.RawMessage `json:"data"`
}

// AuditLogList is a page of the audit log, newest first.
type AuditLogList struct {
	Items []AuditLog `json:"items"`
	// EndCursor is the last item's audit_log_id: pass it as after for
	// the next page; null on an empty page.
	EndCursor   *string `json:"end_cursor"`
	HasNextPage bool    `json:"has_next_page"`
	// Total counts the entries that match the filters.
	Total int `json:"total"`
}

// AuditVerification is the answer of GET /v1/audit-logs/verify.
type AuditVerification struct {
	// OK is true when every entry from the chain's anchor to its head
	// holds.
	OK bool `json:"ok"`
	// Checked counts the entries read.
	Checked int `json:"checked"`
	// FirstBad is the audit_log_id of the first entry that does not hold
	// (edited, or following entries that were removed); "" when OK.
	FirstBad string `json:"first_bad_audit_log_id,omitempty"`
	// Reason says what is wrong with it.
	Reason string `json:"reason,omitempty"`
}
