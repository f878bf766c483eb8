-- 0033_sessions_started: the sweeps (limits, budgets, auto-suspend) act on
-- sessions that started only, and list just those every second on every
-- replica. Through sessions_active they walked every pending session as
-- well, a queue of thousands each time; this index holds the started
-- sessions not yet ended, oldest first. ListStartedSessionsSQL spells its
-- WHERE exactly, which is how the planner knows it may use it.
CREATE INDEX sessions_started ON sessions (created_at, id) WHERE status NOT IN ('exit', 'error') AND started_at IS NOT NULL;
