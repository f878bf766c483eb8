-- The blob store of servers on PostgreSQL (package blob, --blob-store
-- postgres): workspace snapshots, artifacts and spilled output, shared by
-- every replica on the database.
--
-- blob_versions has one row per upload of a key: 'uploading' while its
-- chunks are written (each in its own short statement, so an upload holds
-- no transaction open), 'live' once complete (at most one live version per
-- key: readers see only these), 'dead' once replaced or deleted. Dead
-- versions, and uploads that stopped writing chunks, are removed with their
-- chunks by a later sweep, so a reader streaming a version that was just
-- replaced can finish it.
CREATE TABLE blob_versions (
    id         BIGSERIAL PRIMARY KEY,
    key        TEXT COLLATE "C" NOT NULL,
    state      TEXT NOT NULL,
    size       BIGINT NOT NULL DEFAULT 0,
    sha256     TEXT NOT NULL DEFAULT '',
    chunk_size INTEGER NOT NULL,
    created_at BIGINT NOT NULL,
    changed_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX blob_versions_live ON blob_versions (key) WHERE state = 'live';
CREATE INDEX blob_versions_sweep ON blob_versions (changed_at) WHERE state <> 'live';

-- blob_chunks holds a version's bytes, chunk n covering bytes from
-- n * chunk_size; every chunk but the last is chunk_size long. Stored
-- uncompressed: snapshots are zstd already.
CREATE TABLE blob_chunks (
    version BIGINT NOT NULL REFERENCES blob_versions (id) ON DELETE CASCADE,
    n       INTEGER NOT NULL,
    data    BYTEA NOT NULL,
    PRIMARY KEY (version, n)
);
ALTER TABLE blob_chunks ALTER COLUMN data SET STORAGE EXTERNAL;
