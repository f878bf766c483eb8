-- 0010_replicas, as the SQLite store's 0012.
-- Several server processes (replicas) on one database: each heartbeats a
-- row here, and a queue entry names the replica whose gateway holds its
-- remote's connection (owner; '' when none is known).
CREATE TABLE replicas (
    id         TEXT PRIMARY KEY,
    url        TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    seen_at    BIGINT NOT NULL
);
ALTER TABLE queue ADD COLUMN owner TEXT NOT NULL DEFAULT '';
