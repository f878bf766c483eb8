-- 0020_requirements: a queue entry holds its session's effective
-- requirements (api.Requirements as JSON: the session's own, else its
-- outpost's; NULL when it has none). A server-assigned claim skips an
-- entry with requirements for a claimer that describes no machine, and
-- checks the others against the machine the claimer describes.
-- An outpost's are the default of its sessions that state none.
ALTER TABLE outposts ADD COLUMN requirements_json TEXT;
ALTER TABLE queue ADD COLUMN requirements_json TEXT;
