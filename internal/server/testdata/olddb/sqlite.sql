PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at INTEGER NOT NULL
	) STRICT;
INSERT INTO schema_migrations VALUES(1,'0001_init',1796183298675);
INSERT INTO schema_migrations VALUES(2,'0002_usage',1796183298678);
INSERT INTO schema_migrations VALUES(3,'0003_artifact_retention',1796183298680);
INSERT INTO schema_migrations VALUES(4,'0004_claim_liveness',1796183298681);
INSERT INTO schema_migrations VALUES(5,'0005_remote_binary_sha',1796183298682);
INSERT INTO schema_migrations VALUES(6,'0006_outpost_allowed_orgs',1796183298683);
INSERT INTO schema_migrations VALUES(7,'0007_sealed_secrets',1796183298684);
INSERT INTO schema_migrations VALUES(8,'0008_fleet_controls',1796183298686);
INSERT INTO schema_migrations VALUES(9,'0009_snapshots',1796183298688);
INSERT INTO schema_migrations VALUES(10,'0010_outpost_snapshot_limit',1796183298689);
INSERT INTO schema_migrations VALUES(11,'0011_presence',1796183298689);
INSERT INTO schema_migrations VALUES(12,'0012_replicas',1796183298690);
INSERT INTO schema_migrations VALUES(13,'0013_queue_prune',1796183298691);
INSERT INTO schema_migrations VALUES(15,'0015_history',1796183298692);
INSERT INTO schema_migrations VALUES(16,'0016_settings',1796183298693);
CREATE TABLE outposts (
	id          TEXT PRIMARY KEY,
	name        TEXT NOT NULL UNIQUE,
	platform    TEXT NOT NULL,
	description TEXT NOT NULL,
	created_at  INTEGER NOT NULL
, remote_binary_sha TEXT NOT NULL DEFAULT '', allowed_org_ids_json TEXT, max_running INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER NOT NULL DEFAULT 0, max_snapshot_bytes INTEGER NOT NULL DEFAULT 0) STRICT;
INSERT INTO outposts VALUES('outpost_vxsmeraqmj657lv6','legacy','linux','',1796183298699,'',NULL,0,0,0);
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
, usage_json TEXT, artifacts_pruned_at INTEGER, secrets_key TEXT NOT NULL DEFAULT '') STRICT;
INSERT INTO sessions VALUES('ses_w46rf6ki6zjihjpc','outpost_vxsmeraqmj657lv6','t','{"outpost":"legacy","title":"t","prompt":"","repos":null,"agent":{"kind":"script","steps":[{"tool":"exec","args":{"command":"true"}}]},"env":null,"secret_names":null,"limits":{},"remote_binary_sha":null,"priority":0}','v1:091d5830:vsQQGF481_Xe3Iz0QyXMHu0AmBOSsZ5rMd7f4nzW0WM','new','','Waiting in the queue of outpost legacy.',0,NULL,1796183298701,1796183298701,NULL,NULL,NULL,NULL,'091d5830');
INSERT INTO sessions VALUES('ses_6tdrj4xzjqdhn3su','outpost_vxsmeraqmj657lv6','t','{"outpost":"legacy","title":"t","prompt":"","repos":null,"agent":{"kind":"script","steps":[{"tool":"exec","args":{"command":"true"}}]},"env":null,"secret_names":null,"limits":{},"remote_binary_sha":null,"priority":0}','v1:091d5830:2qe_09xnvxGUQHaOovoQEPDFMuKI6xjEN6J7AhxpMvg','new','','Waiting in the queue of outpost legacy.',0,NULL,1796183298705,1796183298705,NULL,NULL,NULL,NULL,'091d5830');
INSERT INTO sessions VALUES('ses_6hqoatah2ae6tbza','outpost_vxsmeraqmj657lv6','t','{"outpost":"legacy","title":"t","prompt":"","repos":null,"agent":{"kind":"script","steps":[{"tool":"exec","args":{"command":"true"}}]},"env":null,"secret_names":null,"limits":{},"remote_binary_sha":null,"priority":0}','v1:091d5830:RXv2v6Ffc5bpPuwP8VLcZUhU5cNp2-ouBFXOqFJdw0U','new','','Waiting in the queue of outpost legacy.',0,NULL,1796183298707,1796183298707,NULL,NULL,NULL,NULL,'091d5830');
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
, live_until INTEGER, remote_binary_sha TEXT NOT NULL DEFAULT '', priority INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER NOT NULL DEFAULT 0, attempt_reasons_json TEXT, owner TEXT NOT NULL DEFAULT '') STRICT;
INSERT INTO queue VALUES('ses_w46rf6ki6zjihjpc','outpost_vxsmeraqmj657lv6','new','linux','pending','',NULL,0,'pending',1,0,1796183298701,1796183298701,NULL,'',0,0,3,NULL,'');
INSERT INTO queue VALUES('ses_6tdrj4xzjqdhn3su','outpost_vxsmeraqmj657lv6','new','linux','pending','',NULL,0,'pending',2,0,1796183298705,1796183298705,NULL,'',0,0,3,NULL,'');
INSERT INTO queue VALUES('ses_6hqoatah2ae6tbza','outpost_vxsmeraqmj657lv6','new','linux','pending','',NULL,0,'pending',3,0,1796183298707,1796183298707,NULL,'',0,0,3,NULL,'');
CREATE TABLE counters (
	name  TEXT PRIMARY KEY,
	value INTEGER NOT NULL
) STRICT;
INSERT INTO counters VALUES('rev',3);
CREATE TABLE events (
	session_id TEXT NOT NULL REFERENCES sessions (id),
	seq        INTEGER NOT NULL,
	body_json  TEXT NOT NULL,
	PRIMARY KEY (session_id, seq)
) STRICT, WITHOUT ROWID;
INSERT INTO events VALUES('ses_6hqoatah2ae6tbza',1,'{"seq":1,"session_id":"ses_6hqoatah2ae6tbza","time_ms":1796183298707,"type":"status","status":"new","reason":"Waiting in the queue of outpost legacy."}');
INSERT INTO events VALUES('ses_6tdrj4xzjqdhn3su',1,'{"seq":1,"session_id":"ses_6tdrj4xzjqdhn3su","time_ms":1796183298705,"type":"status","status":"new","reason":"Waiting in the queue of outpost legacy."}');
INSERT INTO events VALUES('ses_w46rf6ki6zjihjpc',1,'{"seq":1,"session_id":"ses_w46rf6ki6zjihjpc","time_ms":1796183298701,"type":"status","status":"new","reason":"Waiting in the queue of outpost legacy."}');
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
INSERT INTO tokens VALUES('tok_27jbqzi2snplgcfk','admin','f25ca5c0778d26965c1dda29542c46e440c4b14f0be5436f2dd03e3ab60a433d','["admin"]','',1796183298695,NULL,NULL);
INSERT INTO tokens VALUES('tok_tklujxohf43dujt7','t','83df43710064c84d54f1e01f1a201a964adf798fcf8e74da087e0244e0f93c63','["outposts.machine"]','outpost_vxsmeraqmj657lv6',1796183298708,NULL,NULL);
CREATE TABLE connect_tokens (
	hash       TEXT PRIMARY KEY,
	session_id TEXT NOT NULL REFERENCES sessions (id),
	epoch      INTEGER NOT NULL,
	created_at INTEGER NOT NULL
) STRICT;
CREATE TABLE snapshots (
    session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    blob_key   TEXT NOT NULL,
    size       INTEGER NOT NULL,
    sha256     TEXT NOT NULL,
    files      INTEGER NOT NULL DEFAULT 0,
    bytes      INTEGER NOT NULL DEFAULT 0,
    epoch      INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL
);
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
CREATE TABLE replicas (
    id         TEXT PRIMARY KEY,
    url        TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    seen_at    INTEGER NOT NULL
);
CREATE TABLE queue_horizons (
    outpost_id TEXT PRIMARY KEY,
    rev        INTEGER NOT NULL
) STRICT;
CREATE TABLE settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;
INSERT INTO settings VALUES('secret_key_id','091d5830');
CREATE INDEX sessions_created ON sessions (created_at DESC, id DESC);
CREATE INDEX sessions_outpost_status ON sessions (outpost_id, status);
CREATE INDEX sessions_status ON sessions (status);
CREATE INDEX queue_outpost_rev ON queue (outpost_id, rev);
CREATE INDEX tokens_created ON tokens (created_at DESC, id DESC);
CREATE INDEX connect_tokens_session ON connect_tokens (session_id);
CREATE INDEX sessions_artifacts_kept ON sessions (ended_at, id) WHERE artifacts_pruned_at IS NULL AND ended_at IS NOT NULL;
CREATE INDEX queue_phase_expiry ON queue (phase, MAX(claim_deadline, COALESCE(live_until, 0)));
CREATE INDEX sessions_secrets_key ON sessions (secrets_key);
CREATE INDEX snapshots_created_at ON snapshots (created_at);
CREATE INDEX workers_expires ON workers (expires_at);
CREATE INDEX queue_tombstones ON queue (updated_at) WHERE deleted = 1;
CREATE INDEX queue_outpost_priority ON queue (outpost_id, phase, priority DESC, created_at, session_id) WHERE deleted = 0;
CREATE INDEX queue_live_rev ON queue (outpost_id, rev) WHERE deleted = 0;
CREATE INDEX sessions_active ON sessions (created_at, id) WHERE status NOT IN ('exit', 'error');
COMMIT;
