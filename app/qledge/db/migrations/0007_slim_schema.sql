-- Fewer B-trees per attempt (docs/storage.md, "Page size and the slim schema").
-- Every write transaction writes each B-tree page it touches into the WAL as
-- a whole page, so on the SD card the cost of an attempt is the number of
-- distinct B-trees (and pages) its commits touch. Data is kept; columns,
-- CHECKs, STRICT and every foreign key stay as they were.
--
-- Rebuild order per table: create the new one, copy, drop the old one, rename
-- the new one (foreign keys are off while migrating and checked afterwards).
-- Renaming the new table to the old name leaves the REFERENCES clauses of
-- other tables untouched, so they name the rebuilt table.
--
-- run_events keeps its layout: it already is one B-tree, and a rowid table
-- plus a (run_id, seq) index measured more frames per attempt.

-- runs: one B-tree keyed by the UUIDv7 (time-ordered: inserts append at the
-- right edge) instead of a rowid table plus its primary-key index. Rows stay
-- below what a 1 KiB page keeps in-page (~230 bytes), so nothing overflows.
CREATE TABLE runs_new (
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
) STRICT, WITHOUT ROWID;
INSERT INTO runs_new (id, task_id, trigger, status, version, event_seq, cancel_reason,
    cancel_requested_at_ms, created_at_ms, started_at_ms, finished_at_ms, exit_code, reason_code)
  SELECT id, task_id, trigger, status, version, event_seq, cancel_reason,
    cancel_requested_at_ms, created_at_ms, started_at_ms, finished_at_ms, exit_code, reason_code
  FROM runs;
DROP TABLE runs;
ALTER TABLE runs_new RENAME TO runs;
CREATE INDEX runs_task ON runs (task_id, id);
-- Only active runs: a run leaves the index when it turns terminal instead of
-- moving to another status range. Written as equalities so that a query's
-- `status = 'queued'` (or `status = ?` bound to an active status) implies it;
-- a query naming both statuses must spell the same OR (SQLite matches a
-- partial index's WHERE by implication, not by meaning).
CREATE INDEX runs_active ON runs (status, id) WHERE status = 'queued' OR status = 'running';

-- log_artifacts: one B-tree. The path is derived from the attempt id, so the
-- old UNIQUE (relative_path) index only cost a page per attempt; the one
-- lookup by path goes through the attempt now.
CREATE TABLE log_artifacts_new (
    id TEXT PRIMARY KEY,
    relative_path TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    size_bytes INTEGER,
    evicted_at_ms INTEGER,
    evicted_reason TEXT
        CHECK (evicted_reason IS NULL OR evicted_reason IN ('SIZE_CAP', 'DISK_PRESSURE'))
) STRICT, WITHOUT ROWID;
INSERT INTO log_artifacts_new (id, relative_path, created_at_ms, size_bytes, evicted_at_ms,
    evicted_reason)
  SELECT id, relative_path, created_at_ms, size_bytes, evicted_at_ms, evicted_reason
  FROM log_artifacts;
DROP TABLE log_artifacts;
ALTER TABLE log_artifacts_new RENAME TO log_artifacts;

-- receipt_journal: one B-tree; no query selects by state (the journal is
-- walked by attempt id), so journal_state goes.
CREATE TABLE receipt_journal_new (
    attempt_id TEXT PRIMARY KEY REFERENCES run_attempts(id) ON DELETE CASCADE,
    state TEXT NOT NULL CHECK (state IN ('pending', 'quarantined')),
    relative_path TEXT NOT NULL,
    reason_code TEXT,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    -- retention clock: when the attempt turned terminal or the receipt was
    -- quarantined; rows age out by the profile's windows counted from here
    retention_since_ms INTEGER
) STRICT, WITHOUT ROWID;
INSERT INTO receipt_journal_new (attempt_id, state, relative_path, reason_code, created_at_ms,
    updated_at_ms, retention_since_ms)
  SELECT attempt_id, state, relative_path, reason_code, created_at_ms, updated_at_ms,
    retention_since_ms
  FROM receipt_journal;
DROP TABLE receipt_journal;
ALTER TABLE receipt_journal_new RENAME TO receipt_journal;

-- run_attempts stays a rowid table: its rows (token hash, owner, boot id and more)
-- exceed what a 1 KiB index-B-tree page keeps in-page, and every row would
-- spill onto an overflow page. Its status index keeps active attempts only.
-- The deadline index goes: the expiry query reads this node's running
-- attempts through attempts_active and sorts those few by deadline.
DROP INDEX attempts_active;
DROP INDEX attempts_deadline;
CREATE INDEX attempts_active ON run_attempts (runtime_owner, status, id)
    WHERE status = 'preparing' OR status = 'running';

-- A WAL frame is a whole page, so 1 KiB pages write a quarter of the bytes of
-- 4 KiB ones for the same touched B-trees. An existing database is converted
-- once after the migrations (db/upkeep.py), in the same VACUUM as 0006's
-- auto-vacuum wish; a new one is created with it.
INSERT INTO storage_settings (name, value) VALUES ('page_size', '1024');
