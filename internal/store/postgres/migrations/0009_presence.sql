-- 0009_presence, as the SQLite store's 0011.
-- The presence of acceptors (workers and orchestrators): one row per
-- acceptor id per outpost, written by each heartbeat and forgotten at
-- expires_at, so every server on the database lists and refuses the same.
-- instance and kind repeat fields of info_json for the one-instance check
-- and the connected-workers gauge.
CREATE TABLE workers (
	outpost_id   TEXT COLLATE "C" NOT NULL REFERENCES outposts (id) ON DELETE CASCADE,
	acceptor_id  TEXT COLLATE "C" NOT NULL,
	instance     TEXT NOT NULL,
	kind         TEXT COLLATE "C" NOT NULL,
	info_json    TEXT NOT NULL,
	connected_at BIGINT NOT NULL,
	last_seen_at BIGINT NOT NULL,
	expires_at   BIGINT NOT NULL,
	PRIMARY KEY (outpost_id, acceptor_id)
);
CREATE INDEX workers_expires ON workers (expires_at);
