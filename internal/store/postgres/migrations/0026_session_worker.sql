-- 0026_session_worker, as the SQLite store's 0027: a session keeps the
-- acceptor (worker or
-- orchestrator) of its latest claim, after the claim and the session end,
-- so people can list what each machine ran. '' before any claim.
ALTER TABLE sessions ADD COLUMN worker TEXT NOT NULL DEFAULT '';
CREATE INDEX sessions_by_worker ON sessions (worker, created_at DESC, id DESC) WHERE worker <> '';
