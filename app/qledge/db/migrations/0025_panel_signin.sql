-- Issue 39: the panel's sign-in (docs/security.md, "Signing in to the panel").
-- Paired with migrations/pg/0025_panel_signin.sql.
-- One account: the scrypt hash of its password, its TOTP secret once confirmed (the
-- pending one while enrolling), the last TOTP step used (a code works once; 0: none) and the
-- SHA-256 hashes of its unused recovery codes (a JSON list).
CREATE TABLE panel_account (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    password_hash TEXT,
    totp_secret TEXT,
    totp_pending TEXT,
    totp_last_step INTEGER NOT NULL DEFAULT 0,
    recovery_json TEXT NOT NULL DEFAULT '[]',
    changed_at_ms INTEGER NOT NULL
);
-- Sessions: only the SHA-256 of the cookie's value is stored.
CREATE TABLE panel_sessions (
    id_hash TEXT PRIMARY KEY,
    created_at_ms INTEGER NOT NULL,
    last_seen_ms INTEGER NOT NULL,
    client TEXT NOT NULL,
    agent TEXT NOT NULL,
    method TEXT NOT NULL
);
-- The login log: never the password or a code, only how it went.
CREATE TABLE panel_logins (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms INTEGER NOT NULL,
    client TEXT NOT NULL,
    agent TEXT NOT NULL,
    method TEXT NOT NULL,
    outcome TEXT NOT NULL
);
CREATE INDEX panel_logins_at ON panel_logins (at_ms);
