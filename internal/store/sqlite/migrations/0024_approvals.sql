-- 0024_approvals: approval rules on tool calls. An outpost's rules are
-- JSON ([]api.ApprovalRule, validated), NULL when it has none; a session's
-- own rules live in its spec. A session's approvals_json holds the calls
-- its ask rules held ([]api.Approval: pending and decided), read
-- and written under the session row's lock so a call is decided once.
ALTER TABLE outposts ADD COLUMN approval_rules_json TEXT;
ALTER TABLE sessions ADD COLUMN approvals_json TEXT;
