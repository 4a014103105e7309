-- Issue 24: fewer B-trees per attempt (docs/storage.md, "The journal and the log in the
-- attempt row"). An attempt's receipt-journal entry and its log artifact become columns
-- of its run_attempts row: spawn step 1 inserts one row instead of three, settling and
-- eviction update the row the attempt's commits write anyway, and ageing a journal
-- entry out clears its columns instead of deleting a row of another B-tree.
--
-- receipt_*: the former receipt_journal row (NULL receipt_state: no entry; then every
-- receipt_* column is NULL). log_*: the former log_artifacts row (every attempt had one;
-- its own id goes, nothing read it but the join).
--
-- Rebuild as in 0007: create, copy, drop, rename; foreign keys are off while migrating
-- and checked afterwards. cancel_leases names run_attempts, which the renamed table is
-- again. One transaction: a kill leaves the old schema or the new one.
CREATE TABLE run_attempts_new (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    attempt_no INTEGER NOT NULL,
    executor_type TEXT NOT NULL,
    runtime_owner TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN
        ('preparing', 'running', 'succeeded', 'failed', 'cancelled', 'timed_out', 'lost', 'blocked')),
    callback_token_hash BLOB NOT NULL,
    callback_sequence INTEGER NOT NULL,
    pid INTEGER,
    proc_start_time INTEGER,
    boot_id TEXT,
    exit_code INTEGER,
    reason_code TEXT,
    created_at_ms INTEGER NOT NULL,
    started_at_ms INTEGER,
    finished_at_ms INTEGER,
    deadline_at_ms INTEGER,
    log_bytes_at_exit INTEGER,
    -- the log file (logs volume, relative), its measured size once terminal, and its
    -- eviction by the size cap or disk pressure (docs/retention.md)
    log_path TEXT NOT NULL,
    log_size_bytes INTEGER,
    log_evicted_at_ms INTEGER,
    log_evicted_reason TEXT CHECK (log_evicted_reason IS NULL
        OR log_evicted_reason IN ('SIZE_CAP', 'DISK_PRESSURE', 'DISK_CRITICAL')),
    -- the receipt-journal entry (docs/storage.md): its receipt's path (receipts volume),
    -- quarantine reason, retention clock (terminal or quarantined since) and settling
    receipt_state TEXT CHECK (receipt_state IN ('pending', 'quarantined')),
    receipt_path TEXT,
    receipt_reason TEXT,
    receipt_created_at_ms INTEGER,
    receipt_updated_at_ms INTEGER,
    receipt_since_ms INTEGER,
    receipt_settled_at_ms INTEGER,
    -- an entry has its path and times; no entry leaves nothing behind
    CHECK (CASE WHEN receipt_state IS NULL
        THEN receipt_path IS NULL AND receipt_reason IS NULL
            AND receipt_created_at_ms IS NULL AND receipt_updated_at_ms IS NULL
            AND receipt_since_ms IS NULL AND receipt_settled_at_ms IS NULL
        ELSE receipt_path IS NOT NULL AND receipt_created_at_ms IS NOT NULL
            AND receipt_updated_at_ms IS NOT NULL END),
    UNIQUE (run_id, attempt_no)
) STRICT;
-- LEFT JOINs: an attempt without its artifact cannot exist (foreign keys are checked at
-- every start), and if one did, NOT NULL log_path fails the migration rather than drop it.
INSERT INTO run_attempts_new (id, run_id, attempt_no, executor_type, runtime_owner, status,
    callback_token_hash, callback_sequence, pid, proc_start_time, boot_id, exit_code,
    reason_code, created_at_ms, started_at_ms, finished_at_ms, deadline_at_ms,
    log_bytes_at_exit, log_path, log_size_bytes, log_evicted_at_ms, log_evicted_reason,
    receipt_state, receipt_path, receipt_reason, receipt_created_at_ms,
    receipt_updated_at_ms, receipt_since_ms, receipt_settled_at_ms)
  SELECT a.id, a.run_id, a.attempt_no, a.executor_type, a.runtime_owner, a.status,
    a.callback_token_hash, a.callback_sequence, a.pid, a.proc_start_time, a.boot_id,
    a.exit_code, a.reason_code, a.created_at_ms, a.started_at_ms, a.finished_at_ms,
    a.deadline_at_ms, a.log_bytes_at_exit, l.relative_path, l.size_bytes, l.evicted_at_ms,
    l.evicted_reason, j.state, j.relative_path, j.reason_code, j.created_at_ms,
    j.updated_at_ms, j.retention_since_ms, j.settled_at_ms
  FROM run_attempts a LEFT JOIN log_artifacts l ON l.id = a.log_artifact_id
  LEFT JOIN receipt_journal j ON j.attempt_id = a.id
  ORDER BY a.rowid;
-- A log artifact no attempt names (none is left behind by the code; retention deletes
-- both in one transaction) would lose its only record: its file goes to the deletion
-- queue, as retention would have done.
INSERT OR IGNORE INTO file_deletions (volume, relative_path, created_at_ms)
  SELECT 'logs', l.relative_path, l.created_at_ms FROM log_artifacts l
  WHERE l.evicted_at_ms IS NULL
    AND NOT EXISTS (SELECT 1 FROM run_attempts a WHERE a.log_artifact_id = l.id);
DROP TABLE receipt_journal;
DROP TABLE run_attempts;
DROP TABLE log_artifacts;
ALTER TABLE run_attempts_new RENAME TO run_attempts;
CREATE INDEX attempts_active ON run_attempts (runtime_owner, status, id)
    WHERE status = 'preparing' OR status = 'running';
-- The journal's entries by attempt id, as receipt_journal's primary key was: the
-- supervisor's pages, the ageing, the start-up look and the counts walk it, not the
-- table. Keyed by the id alone, so settling, the retention clock and quarantine (which
-- change receipt_* columns but not whether there is an entry) never touch it: an entry
-- is written once at spawn and once when it ages out.
CREATE INDEX attempts_journal ON run_attempts (id) WHERE receipt_state IS NOT NULL;
