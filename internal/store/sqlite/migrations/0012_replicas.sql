-- Several server processes (replicas) on one database: each heartbeats a
-- row here, and a queue entry names the replica whose gateway holds its
-- remote's connection (owner; '' when none is known). With SQLite there is
-- one server; the table and column keep the schema the PostgreSQL store's.
CREATE TABLE replicas (
    id         TEXT PRIMARY KEY,
    url        TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    seen_at    INTEGER NOT NULL
);
ALTER TABLE queue ADD COLUMN owner TEXT NOT NULL DEFAULT '';
