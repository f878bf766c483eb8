-- secrets_key: the id of the key secrets_json is sealed under, '' while it
-- is plaintext JSON (rows written before secrets were sealed). Open finds
-- the rows to seal under a new key through its index, without reading
-- every session. A version of outpost that does not know this migration
-- refuses the database rather than misread sealed secrets.
ALTER TABLE sessions ADD COLUMN secrets_key TEXT NOT NULL DEFAULT '';
CREATE INDEX sessions_secrets_key ON sessions (secrets_key);
