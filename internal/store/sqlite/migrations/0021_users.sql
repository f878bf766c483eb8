-- 0021_users: people from the OpenID Connect provider, the roles given to
-- them or to their provider groups, and the owner and role of a token.
CREATE TABLE users (
    id            TEXT PRIMARY KEY,
    subject       TEXT NOT NULL UNIQUE,
    email         TEXT NOT NULL,
    name          TEXT NOT NULL,
    groups_json   TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    last_login_at INTEGER NOT NULL,
    checked_at    INTEGER NOT NULL,
    refresh_token TEXT NOT NULL,
    disabled_at   INTEGER
) STRICT;

-- subject_kind is user (subject: a user's id) or group (subject: the
-- group's name); outpost_id '' binds the role on every outpost.
CREATE TABLE role_bindings (
    id           TEXT PRIMARY KEY,
    role         TEXT NOT NULL,
    subject_kind TEXT NOT NULL,
    subject      TEXT NOT NULL,
    outpost_id   TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    UNIQUE (role, subject_kind, subject, outpost_id)
) STRICT;

-- user_id '' is a service account's token.
ALTER TABLE tokens ADD COLUMN user_id TEXT NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN role TEXT NOT NULL DEFAULT '';
