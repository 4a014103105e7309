-- Bounded disk (docs/retention.md): per-task retention overrides, log sizes and
-- eviction marks, a queue of files to delete after the rows that named them
-- are gone, and the wish for incremental auto-vacuum.

-- NULL = the settings' value; 0 = no limit of that kind for this task.
ALTER TABLE tasks ADD COLUMN keep_runs INTEGER CHECK (keep_runs IS NULL OR keep_runs >= 0);
ALTER TABLE tasks ADD COLUMN keep_days INTEGER CHECK (keep_days IS NULL OR keep_days >= 0);

-- size_bytes: measured by a retention round once the attempt is terminal.
-- evicted_*: the file was deleted by the logs size cap or disk pressure; the
-- run and attempt rows stay and the log API answers 410 with this reason.
ALTER TABLE log_artifacts ADD COLUMN size_bytes INTEGER;
ALTER TABLE log_artifacts ADD COLUMN evicted_at_ms INTEGER;
-- No new index on the spawn path: each would cost a page write per attempt on
-- the card; retention's scans are bounded by the retention policy itself.
ALTER TABLE log_artifacts ADD COLUMN evicted_reason TEXT
    CHECK (evicted_reason IS NULL OR evicted_reason IN ('SIZE_CAP', 'DISK_PRESSURE'));

-- Files to unlink, inserted in the same transaction that deleted (or evicted)
-- the rows naming them and removed after the unlink: a crash in between leaves
-- a row here, never an unindexed orphan, so no directory is ever listed.
CREATE TABLE file_deletions (
    volume TEXT NOT NULL CHECK (volume IN ('logs')),
    relative_path TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (volume, relative_path)
) STRICT, WITHOUT ROWID;

-- Storage wishes applied by `migrate.apply` after the transactional migrations
-- (a full VACUUM cannot run inside a transaction): auto_vacuum=INCREMENTAL.
CREATE TABLE storage_settings (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;
INSERT INTO storage_settings (name, value) VALUES ('auto_vacuum', 'incremental');
