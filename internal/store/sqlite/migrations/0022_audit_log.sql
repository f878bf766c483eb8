-- 0022_audit_log: the audit log, one row per change a person or token
-- made, appended in the transaction of the change. hash chains each row to
-- the one before (see package audit); audit_chain's one row is the chain's
-- head (the newest seq and hash, so a row removed from the end shows) and
-- its anchor (the seq and hash of the last row retention removed, from
-- which verification starts).
CREATE TABLE audit_log (
    seq          INTEGER PRIMARY KEY,
    audit_log_id TEXT    NOT NULL UNIQUE,
    created_at   INTEGER NOT NULL,
    action       TEXT    NOT NULL,
    actor_kind   TEXT    NOT NULL,
    actor_id     TEXT    NOT NULL,
    actor_name   TEXT    NOT NULL,
    source_ip    TEXT    NOT NULL,
    object_kind  TEXT    NOT NULL,
    object_id    TEXT    NOT NULL,
    data_json    TEXT,
    hash         TEXT    NOT NULL
) STRICT;
CREATE INDEX audit_log_created ON audit_log (created_at);
CREATE INDEX audit_log_action ON audit_log (action, seq);

CREATE TABLE audit_chain (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    head_seq    INTEGER NOT NULL,
    head_hash   TEXT    NOT NULL,
    anchor_seq  INTEGER NOT NULL,
    anchor_hash TEXT    NOT NULL
) STRICT;
INSERT INTO audit_chain (id, head_seq, head_hash, anchor_seq, anchor_hash) VALUES (1, 0, '', 0, '');
