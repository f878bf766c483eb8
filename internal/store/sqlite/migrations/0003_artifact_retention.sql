-- When the artifact retention sweep deleted a session's artifacts (NULL
-- while they are kept), and the index of the sweep's query: ended sessions
-- whose artifacts are still kept, earliest ended first.
ALTER TABLE sessions ADD COLUMN artifacts_pruned_at INTEGER;
CREATE INDEX sessions_artifacts_kept ON sessions (ended_at, id) WHERE artifacts_pruned_at IS NULL AND ended_at IS NOT NULL;
