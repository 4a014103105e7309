-- Baseline schema of the run model (SPEC §2). Append-only: never edit an
-- applied migration; add a new numbered file instead.

CREATE TABLE node (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    node_id TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL
) STRICT;

-- num is the small integer id QingLong clients use; id is the native UUIDv7.
CREATE TABLE tasks (
    num INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    command TEXT NOT NULL,
    schedule TEXT,
    timeout_s INTEGER,
    env_json TEXT NOT NULL DEFAULT '{}',
    enabled INTEGER NOT NULL DEFAULT 1,
    concurrency TEXT NOT NULL DEFAULT 'forbid' CHECK (concurrency IN ('forbid', 'allow')),
    labels_json TEXT NOT NULL DEFAULT '[]',
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    version INTEGER NOT NULL DEFAULT 1
) STRICT;

CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    trigger TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN
        ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'timed_out', 'lost', 'blocked')),
    version INTEGER NOT NULL DEFAULT 1,
    event_seq INTEGER NOT NULL DEFAULT 0,
    cancel_reason TEXT CHECK (cancel_reason IN ('user', 'timeout', 'policy', 'shutdown')),
    cancel_requested_at_ms INTEGER,
    created_at_ms INTEGER NOT NULL,
    started_at_ms INTEGER,
    finished_at_ms INTEGER,
    exit_code INTEGER,
    reason_code TEXT
) STRICT;
CREATE INDEX runs_task ON runs (task_id, id);
CREATE INDEX runs_status ON runs (status, id);

CREATE TABLE log_artifacts (
    id TEXT PRIMARY KEY,
    relative_path TEXT NOT NULL UNIQUE,
    created_at_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE run_attempts (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    attempt_no INTEGER NOT NULL,
    executor_type TEXT NOT NULL,
    runtime_owner TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN
        ('preparing', 'running', 'succeeded', 'failed', 'cancelled', 'timed_out', 'lost', 'blocked')),
    callback_token_hash BLOB NOT NULL,
    callback_sequence INTEGER NOT NULL,
    log_artifact_id TEXT NOT NULL REFERENCES log_artifacts(id),
    pid INTEGER,
    proc_start_time INTEGER,
    boot_id TEXT,
    exit_code INTEGER,
    reason_code TEXT,
    created_at_ms INTEGER NOT NULL,
    started_at_ms INTEGER,
    finished_at_ms INTEGER,
    UNIQUE (run_id, attempt_no)
) STRICT;
CREATE INDEX attempts_active ON run_attempts (runtime_owner, status, id);

CREATE TABLE run_events (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    attempt_id TEXT,
    data_json TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (run_id, seq)
) STRICT, WITHOUT ROWID;
