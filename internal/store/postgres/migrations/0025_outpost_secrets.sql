-- 0025_outpost_secrets, as the SQLite store's 0026: stored secrets of an
-- outpost, which sessions name to have them copied into their own secrets
-- when they are created. value is sealed like a session's secrets, bound
-- to the outpost's id and the name; value_key is the id of the key it is
-- sealed under ('' for plaintext), so Open finds the rows to seal under a
-- new key through its index. set_by is the id of the token that last set
-- the value. The rows go with their outpost.
CREATE TABLE outpost_secrets (
	outpost_id TEXT COLLATE "C" NOT NULL REFERENCES outposts (id) ON DELETE CASCADE,
	name       TEXT COLLATE "C" NOT NULL,
	value      TEXT NOT NULL,
	value_key  TEXT COLLATE "C" NOT NULL DEFAULT '',
	set_by     TEXT NOT NULL DEFAULT '',
	created_at BIGINT NOT NULL,
	updated_at BIGINT NOT NULL,
	PRIMARY KEY (outpost_id, name)
);
CREATE INDEX outpost_secrets_key ON outpost_secrets (value_key);
