-- settings: values the whole database shares, one row per name. The first
-- start records secret_key_id, the id of the key session secrets are
-- sealed under, so a server given another key (a replica configured apart
-- from the others) refuses to start rather than seal what the others cannot
-- open and sign requests they refuse.
CREATE TABLE settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;
