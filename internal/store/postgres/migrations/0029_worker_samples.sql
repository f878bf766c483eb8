-- 0029_worker_samples, as the SQLite store's 0030: the fleet dashboard's
-- worker counts over time. Each minute a server writes one row per outpost
-- with live acceptors; the primary key makes the first server to write a
-- minute the only one, so replicas on one database need no lock to agree.
-- Rows older than store.WorkerSampleKeep are deleted as new ones are
-- written. sessions_ended lets the dashboard read only the sessions of its
-- window.
CREATE TABLE worker_samples (
	outpost_id TEXT COLLATE "C" NOT NULL,
	at         BIGINT NOT NULL,
	workers    INTEGER NOT NULL,
	capacity   INTEGER NOT NULL,
	busy       INTEGER NOT NULL,
	PRIMARY KEY (outpost_id, at)
);
CREATE INDEX worker_samples_at ON worker_samples (at);
-- It covers the query (benchmarks.md), so the session rows are never read.
CREATE INDEX sessions_ended ON sessions (ended_at, created_at, outpost_id, status, started_at);
