-- 0031_token_session: a token may be limited to one session (an outside
-- agent's): it reaches that session's routes only and ends with it. ''
-- when not limited.
ALTER TABLE tokens ADD COLUMN session_id TEXT NOT NULL DEFAULT '';
