-- 0021_audit_log: the audit log, one row per change a person or token
-- made, appended in the transaction of the change. hash chains each row to
-- the one before (see package audit); audit_chain's one row is the chain's
-- head (the newest seq and hash, so a row removed from the end shows) and
-- its anchor (the seq and hash of the last row retention removed, from
-- which verification starts). Appends lock that row, so they serialise.
-- data_json is TEXT, not JSONB: the hash covers its exact bytes.
CREATE TABLE audit_log (
    seq          BIGINT PRIMARY KEY,
    audit_log_id TEXT COLLATE "C" NOT NULL UNIQUE,
    created_at   BIGINT NOT NULL,
    action       TEXT COLLATE "C" NOT NULL,
    actor_kind   TEXT COLLATE "C" NOT NULL,
    actor_id     TEXT COLLATE "C" NOT NULL,
    actor_name   TEXT NOT NULL,
    source_ip    TEXT COLLATE "C" NOT NULL,
    object_kind  TEXT COLLATE "C" NOT NULL,
    object_id    TEXT COLLATE "C" NOT NULL,
    data_json    TEXT,
    hash         TEXT COLLATE "C" NOT NULL
);
CREATE INDEX audit_log_created ON audit_log (created_at);
CREATE INDEX audit_log_action ON audit_log (action, seq);

CREATE TABLE audit_chain (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    head_seq    BIGINT NOT NULL,
    head_hash   TEXT COLLATE "C" NOT NULL,
    anchor_seq  BIGINT NOT NULL,
    anchor_hash TEXT COLLATE "C" NOT NULL
);
INSERT INTO audit_chain (id, head_seq, head_hash, anchor_seq, anchor_hash) VALUES (1, 0, '', 0, '');
