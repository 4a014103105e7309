-- Issue 39: the panel's sign-in. Paired with migrations/0025_panel_signin.sql, where
-- the tables are explained.
CREATE TABLE panel_account (
    id integer PRIMARY KEY CHECK (id = 1),
    password_hash text,
    totp_secret text,
    totp_pending text,
    totp_last_step bigint NOT NULL DEFAULT -1,
    recovery_json text NOT NULL DEFAULT '[]',
    changed_at_ms bigint NOT NULL
);
CREATE TABLE panel_sessions (
    id_hash text PRIMARY KEY,
    created_at_ms bigint NOT NULL,
    last_seen_ms bigint NOT NULL,
    client text NOT NULL,
    agent text NOT NULL,
    method text NOT NULL
);
CREATE TABLE panel_logins (
    id bigserial PRIMARY KEY,
    at_ms bigint NOT NULL,
    client text NOT NULL,
    agent text NOT NULL,
    method text NOT NULL,
    outcome text NOT NULL
);
CREATE INDEX panel_logins_at ON panel_logins (at_ms);
