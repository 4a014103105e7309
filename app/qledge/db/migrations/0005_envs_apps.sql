-- Environment variables injected into every task, QingLong-style OpenAPI apps
-- and their tokens, and the scheduler's per-task "fired tick" cursor.

-- num is the small integer id QingLong clients use; id is the native UUIDv7.
-- Values are secrets at rest in this file: the data volume (0700, files 0600)
-- is the trust boundary. They never go into events, receipts or logs.
CREATE TABLE envs (
    num INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    remarks TEXT NOT NULL DEFAULT '',
    enabled INTEGER NOT NULL DEFAULT 1,
    -- QingLong's ordering key: larger first; new rows go below the others
    position INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
) STRICT;
CREATE INDEX envs_order ON envs (enabled, position DESC, num);

-- Client secrets and tokens are stored as SHA-256 of 32 random bytes only.
CREATE TABLE apps (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    client_id TEXT NOT NULL UNIQUE,
    secret_hash BLOB NOT NULL,
    scopes_json TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE app_tokens (
    token_hash BLOB PRIMARY KEY,
    app_id TEXT NOT NULL REFERENCES apps(id) ON DELETE CASCADE,
    created_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
) STRICT;
CREATE INDEX app_tokens_app ON app_tokens (app_id, expires_at_ms);

-- The last due time (ms) the scheduler consumed for a task, committed in the
-- same transaction as the run it created (or the skip it recorded), so a
-- worker killed at any instant never fires one tick twice.
CREATE TABLE task_schedule_state (
    task_id TEXT PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
    last_due_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
) STRICT;
