-- An outpost's max_snapshot_bytes: the largest workspace snapshot stored
-- for its sessions (0: the server's --max-snapshot-bytes, which also caps
-- it).
ALTER TABLE outposts ADD COLUMN max_snapshot_bytes INTEGER NOT NULL DEFAULT 0;
