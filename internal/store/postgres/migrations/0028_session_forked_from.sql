-- 0028_session_forked_from, as the SQLite store's 0029: a session forked
-- from another keeps that session's id, so a session's forks can be
-- listed. '' for a session that is no fork.
ALTER TABLE sessions ADD COLUMN forked_from TEXT NOT NULL DEFAULT '';
CREATE INDEX sessions_by_forked_from ON sessions (forked_from, created_at DESC, id DESC) WHERE forked_from <> '';
