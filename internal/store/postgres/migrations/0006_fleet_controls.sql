-- 0006_fleet_controls, as the SQLite store's 0008.
-- Fleet controls. max_running: how many of an outpost's sessions may be
-- claimed at once (0: no limit), enforced in the claim's transaction.
-- max_attempts: how many attempts (claims that end without the session
-- ending: the machine died or could not be provisioned) an outpost's
-- sessions get (0: the default, 3). A queue entry keeps its priority
-- (higher first, FIFO within one), its failed attempts with their reasons
-- (JSON list; NULL while there are none) and its max_attempts, resolved
-- when the session is created (the session's limit, else its outpost's,
-- else 3). queue_outpost_priority serves the claim order and the count of
-- an outpost's claims.
ALTER TABLE outposts ADD COLUMN max_running INTEGER NOT NULL DEFAULT 0;
ALTER TABLE outposts ADD COLUMN max_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE queue ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE queue ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE queue ADD COLUMN max_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE queue ADD COLUMN attempt_reasons_json TEXT;
CREATE INDEX queue_outpost_priority ON queue (outpost_id, phase, priority DESC, created_at, session_id);
