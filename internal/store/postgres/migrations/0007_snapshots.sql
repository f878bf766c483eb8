-- snapshots: the workspace snapshot of a suspended session, one per
-- session (a later suspend replaces it). blob_key names the archive in the
-- server's blob store; the row is written only once the upload is complete
-- and checksummed. Deleted when the session ends or its TTL passes.
CREATE TABLE snapshots (
    session_id TEXT COLLATE "C" PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    blob_key   TEXT NOT NULL,
    size       BIGINT NOT NULL,
    sha256     TEXT NOT NULL,
    files      BIGINT NOT NULL DEFAULT 0,
    bytes      BIGINT NOT NULL DEFAULT 0,
    epoch      BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL
);
CREATE INDEX snapshots_created_at ON snapshots (created_at);
