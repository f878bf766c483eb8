-- 0018_requirements, as the SQLite store's 0019: a queue entry holds its
-- session's effective requirements (api.Requirements as JSON: the
-- session's own, else its outpost's; NULL when it has none).
ALTER TABLE queue ADD COLUMN requirements_json TEXT;
