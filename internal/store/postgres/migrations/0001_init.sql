-- 0001_init: Outpost's PostgreSQL schema, the same tables as the SQLite
-- store's migrations 0001-0003. Times are Unix milliseconds (UTC) in BIGINT,
-- as in SQLite, so they round-trip exactly; a NULL time is an absent one.
-- JSON is kept as TEXT (not JSONB) so raw arguments and values come back
-- byte for byte. Keys and names that are ordered or compared use the "C"
-- collation: the same byte order as SQLite, whatever the database's locale.

CREATE TABLE outposts (
	id          TEXT COLLATE "C" PRIMARY KEY,
	name        TEXT COLLATE "C" NOT NULL UNIQUE,
	platform    TEXT NOT NULL,
	description TEXT NOT NULL,
	created_at  BIGINT NOT NULL
);

CREATE TABLE sessions (
	id                  TEXT COLLATE "C" PRIMARY KEY,
	outpost_id          TEXT COLLATE "C" NOT NULL,
	-- title_fold is strings.ToLower(spec.title), for case-insensitive search.
	title_fold          TEXT NOT NULL,
	spec_json           TEXT NOT NULL,
	secrets_json        TEXT NOT NULL,
	status              TEXT COLLATE "C" NOT NULL,
	status_detail       TEXT NOT NULL,
	reason              TEXT NOT NULL,
	last_seq            BIGINT NOT NULL,
	capabilities_json   TEXT,
	created_at          BIGINT NOT NULL,
	updated_at          BIGINT NOT NULL,
	started_at          BIGINT,
	ended_at            BIGINT,
	-- api.Usage as JSON; NULL before any model call.
	usage_json          TEXT,
	-- When the artifact retention sweep deleted the session's artifacts;
	-- NULL while they are kept.
	artifacts_pruned_at BIGINT
);
CREATE INDEX sessions_created ON sessions (created_at DESC, id DESC);
CREATE INDEX sessions_outpost_status ON sessions (outpost_id, status);
CREATE INDEX sessions_status ON sessions (status);
CREATE INDEX sessions_artifacts_kept ON sessions (ended_at, id) WHERE artifacts_pruned_at IS NULL AND ended_at IS NOT NULL;

-- One row per session; rev is the global change counter at the row's last
-- write, so it is unique and grows in commit order (the counter row is
-- locked until the writing transaction commits).
CREATE TABLE queue (
	session_id     TEXT COLLATE "C" PRIMARY KEY REFERENCES sessions (id),
	outpost_id     TEXT COLLATE "C" NOT NULL,
	kind           TEXT NOT NULL,
	platform       TEXT NOT NULL,
	phase          TEXT COLLATE "C" NOT NULL,
	acceptor_id    TEXT COLLATE "C" NOT NULL,
	claim_deadline BIGINT,
	epoch          BIGINT NOT NULL,
	session_status TEXT NOT NULL,
	rev            BIGINT NOT NULL UNIQUE,
	deleted        BOOLEAN NOT NULL,
	created_at     BIGINT NOT NULL,
	updated_at     BIGINT NOT NULL
);
CREATE INDEX queue_outpost_rev ON queue (outpost_id, rev);
CREATE INDEX queue_phase_deadline ON queue (phase, claim_deadline);

-- counters holds named monotonic counters; 'rev' is the global queue rev.
CREATE TABLE counters (
	name  TEXT PRIMARY KEY,
	value BIGINT NOT NULL
);
INSERT INTO counters (name, value) VALUES ('rev', 0);

CREATE TABLE events (
	session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id),
	seq        BIGINT NOT NULL,
	body_json  TEXT NOT NULL,
	PRIMARY KEY (session_id, seq)
);

CREATE TABLE calls (
	session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id),
	seq        BIGINT NOT NULL,
	tool       TEXT NOT NULL,
	args       BYTEA,
	done       BOOLEAN NOT NULL,
	ok         BOOLEAN NOT NULL,
	value      BYTEA,
	error      TEXT NOT NULL,
	created_at BIGINT NOT NULL,
	done_at    BIGINT,
	PRIMARY KEY (session_id, seq)
);

CREATE TABLE tokens (
	id          TEXT COLLATE "C" PRIMARY KEY,
	name        TEXT NOT NULL,
	hash        TEXT COLLATE "C" NOT NULL UNIQUE,
	scopes_json TEXT NOT NULL,
	outpost_id  TEXT NOT NULL,
	created_at  BIGINT NOT NULL,
	expires_at  BIGINT,
	revoked_at  BIGINT
);
CREATE INDEX tokens_created ON tokens (created_at DESC, id DESC);

CREATE TABLE connect_tokens (
	hash       TEXT COLLATE "C" PRIMARY KEY,
	session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id),
	epoch      BIGINT NOT NULL,
	created_at BIGINT NOT NULL
);
CREATE INDEX connect_tokens_session ON connect_tokens (session_id);
