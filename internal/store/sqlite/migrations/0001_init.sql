-- 0001_init: Outpost's first schema. Times are Unix milliseconds (UTC);
-- a NULL time is an absent one.

CREATE TABLE outposts (
	id          TEXT PRIMARY KEY,
	name        TEXT NOT NULL UNIQUE,
	platform    TEXT NOT NULL,
	description TEXT NOT NULL,
	created_at  INTEGER NOT NULL
) STRICT;

CREATE TABLE sessions (
	id                TEXT PRIMARY KEY,
	outpost_id        TEXT NOT NULL,
	-- title_fold is strings.ToLower(spec.title), for case-insensitive search.
	title_fold        TEXT NOT NULL,
	spec_json         TEXT NOT NULL,
	secrets_json      TEXT NOT NULL,
	status            TEXT NOT NULL,
	status_detail     TEXT NOT NULL,
	reason            TEXT NOT NULL,
	last_seq          INTEGER NOT NULL,
	capabilities_json TEXT,
	created_at        INTEGER NOT NULL,
	updated_at        INTEGER NOT NULL,
	started_at        INTEGER,
	ended_at          INTEGER
) STRICT;
CREATE INDEX sessions_created ON sessions (created_at DESC, id DESC);
CREATE INDEX sessions_outpost_status ON sessions (outpost_id, status);
CREATE INDEX sessions_status ON sessions (status);

-- One row per session; rev is the global change counter at the row's last
-- write, so it is unique and grows in commit order.
CREATE TABLE queue (
	session_id     TEXT PRIMARY KEY REFERENCES sessions (id),
	outpost_id     TEXT NOT NULL,
	kind           TEXT NOT NULL,
	platform       TEXT NOT NULL,
	phase          TEXT NOT NULL,
	acceptor_id    TEXT NOT NULL,
	claim_deadline INTEGER,
	epoch          INTEGER NOT NULL,
	session_status TEXT NOT NULL,
	rev            INTEGER NOT NULL UNIQUE,
	deleted        INTEGER NOT NULL,
	created_at     INTEGER NOT NULL,
	updated_at     INTEGER NOT NULL
) STRICT;
CREATE INDEX queue_outpost_rev ON queue (outpost_id, rev);
CREATE INDEX queue_phase_deadline ON queue (phase, claim_deadline);

-- counters holds named monotonic counters; 'rev' is the global queue rev.
CREATE TABLE counters (
	name  TEXT PRIMARY KEY,
	value INTEGER NOT NULL
) STRICT;
INSERT INTO counters (name, value) VALUES ('rev', 0);

CREATE TABLE events (
	session_id TEXT NOT NULL REFERENCES sessions (id),
	seq        INTEGER NOT NULL,
	body_json  TEXT NOT NULL,
	PRIMARY KEY (session_id, seq)
) STRICT, WITHOUT ROWID;

CREATE TABLE calls (
	session_id TEXT NOT NULL REFERENCES sessions (id),
	seq        INTEGER NOT NULL,
	tool       TEXT NOT NULL,
	args       BLOB,
	done       INTEGER NOT NULL,
	ok         INTEGER NOT NULL,
	value      BLOB,
	error      TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	done_at    INTEGER,
	PRIMARY KEY (session_id, seq)
) STRICT;

CREATE TABLE tokens (
	id          TEXT PRIMARY KEY,
	name        TEXT NOT NULL,
	hash        TEXT NOT NULL UNIQUE,
	scopes_json TEXT NOT NULL,
	outpost_id  TEXT NOT NULL,
	created_at  INTEGER NOT NULL,
	expires_at  INTEGER,
	revoked_at  INTEGER
) STRICT;
CREATE INDEX tokens_created ON tokens (created_at DESC, id DESC);

CREATE TABLE connect_tokens (
	hash       TEXT PRIMARY KEY,
	session_id TEXT NOT NULL REFERENCES sessions (id),
	epoch      INTEGER NOT NULL,
	created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX connect_tokens_session ON connect_tokens (session_id);
