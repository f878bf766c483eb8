-- 0011_presence: the presence of acceptors (workers and orchestrators):
-- one row per acceptor id per outpost, written by each heartbeat and
-- forgotten at expires_at. instance and kind repeat fields of info_json for
-- the one-instance check and the connected-workers gauge.
CREATE TABLE workers (
	outpost_id   TEXT NOT NULL REFERENCES outposts (id) ON DELETE CASCADE,
	acceptor_id  TEXT NOT NULL,
	instance     TEXT NOT NULL,
	kind         TEXT NOT NULL,
	info_json    TEXT NOT NULL,
	connected_at INTEGER NOT NULL,
	last_seen_at INTEGER NOT NULL,
	expires_at   INTEGER NOT NULL,
	PRIMARY KEY (outpost_id, acceptor_id)
);
CREATE INDEX workers_expires ON workers (expires_at);
