-- 0015_history: what reads the live queue and the active sessions must not
-- read history. An ended session leaves its queue entry as a deleted
-- marker, and the queue's indexes held the markers too, so counting an
-- outpost's live entries, listing its pending ones in claim order and
-- re-listing a watch read every marker the outpost ever left. The
-- claim-order index now holds live entries only, queue_live_rev serves an
-- outpost's live entries in rev order, and sessions_active the sessions
-- not yet ended (the sweeps' ActiveSessions), oldest first. Each of these
-- queries spells its index's WHERE exactly, which is how SQLite knows it
-- may use it.
DROP INDEX queue_outpost_priority;
CREATE INDEX queue_outpost_priority ON queue (outpost_id, phase, priority DESC, created_at, session_id) WHERE deleted = 0;
CREATE INDEX queue_live_rev ON queue (outpost_id, rev) WHERE deleted = 0;
CREATE INDEX sessions_active ON sessions (created_at, id) WHERE status NOT IN ('exit', 'error');
