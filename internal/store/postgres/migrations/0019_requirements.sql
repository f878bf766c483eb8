-- 0019_requirements, as the SQLite store's 0020: a queue entry holds its
-- session's effective requirements (api.Requirements as JSON: the
-- session's own, else its outpost's; NULL when it has none).
-- An outpost's are the default of its sessions that state none.
ALTER TABLE outposts ADD COLUMN requirements_json TEXT;
ALTER TABLE queue ADD COLUMN requirements_json TEXT;
