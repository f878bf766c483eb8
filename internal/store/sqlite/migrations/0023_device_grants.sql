-- 0023_device_grants: the OAuth 2.0 device authorization grant (RFC 8628).
-- A row is one device code: its hash (the code itself is never stored),
-- the user code a person types or follows, what the client asked for and
-- what became of it (state: pending, approved, denied, used). Rows are
-- pruned an hour after they expire.
CREATE TABLE device_grants (
	device_hash  TEXT PRIMARY KEY,
	user_code    TEXT NOT NULL UNIQUE,
	client_id    TEXT NOT NULL,
	client_name  TEXT NOT NULL,
	scopes_json  TEXT NOT NULL,
	outpost      TEXT NOT NULL,
	source_ip    TEXT NOT NULL,
	created_at   INTEGER NOT NULL,
	expires_at   INTEGER NOT NULL,
	interval_s   INTEGER NOT NULL,
	last_poll_at INTEGER,
	state        TEXT NOT NULL,
	approved_by  TEXT NOT NULL,
	decided_at   INTEGER,
	token_json   TEXT NOT NULL,
	token_id     TEXT NOT NULL
) STRICT;
CREATE INDEX device_grants_expires ON device_grants (expires_at);

-- device_misses: wrong user codes typed by one approver (a token id) in
-- the window that began at window_start, so guessing codes is bounded
-- across replicas and restarts.
CREATE TABLE device_misses (
	approver     TEXT PRIMARY KEY,
	window_start INTEGER NOT NULL,
	misses       INTEGER NOT NULL
) STRICT;
