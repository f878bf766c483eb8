-- 0022_device_grants, as the SQLite store's 0023: the OAuth 2.0 device
-- authorization grant (RFC 8628). A row is one device code: its hash (the
-- code itself is never stored), the user code a person types or follows,
-- what the client asked for and what became of it (state: pending,
-- approved, denied, used). Rows are pruned an hour after they expire.
CREATE TABLE device_grants (
	device_hash  TEXT COLLATE "C" PRIMARY KEY,
	user_code    TEXT COLLATE "C" NOT NULL UNIQUE,
	client_id    TEXT NOT NULL,
	client_name  TEXT NOT NULL,
	scopes_json  TEXT NOT NULL,
	outpost      TEXT NOT NULL,
	source_ip    TEXT NOT NULL,
	created_at   BIGINT NOT NULL,
	expires_at   BIGINT NOT NULL,
	interval_s   BIGINT NOT NULL,
	last_poll_at BIGINT,
	state        TEXT COLLATE "C" NOT NULL,
	approved_by  TEXT COLLATE "C" NOT NULL,
	decided_at   BIGINT,
	token_json   TEXT NOT NULL,
	token_id     TEXT COLLATE "C" NOT NULL
);
CREATE INDEX device_grants_expires ON device_grants (expires_at);

-- device_misses: wrong user codes typed by one approver (a token id) in
-- the window that began at window_start, so guessing codes is bounded
-- across replicas and restarts.
CREATE TABLE device_misses (
	approver     TEXT COLLATE "C" PRIMARY KEY,
	window_start BIGINT NOT NULL,
	misses       BIGINT NOT NULL
);
