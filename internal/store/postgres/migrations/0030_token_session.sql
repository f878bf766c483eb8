-- 0030_token_session, as the SQLite store's 0031: a token may be limited
-- to one session (an outside agent's): it reaches that session's routes
-- only and ends with it. '' when not limited.
ALTER TABLE tokens ADD COLUMN session_id TEXT NOT NULL DEFAULT '';
