-- Issue 21 (hardening): leftover processes, a journal that keeps up, and
-- retention that keeps each task's newest log until the disk is critically full.

-- A task that deliberately starts daemons keeps them: the launcher then does
-- not end what the command left running (docs/tasks.md).
ALTER TABLE tasks ADD COLUMN keep_background INTEGER NOT NULL DEFAULT 0
    CHECK (keep_background IN (0, 1));

-- When the receipt's fate was settled without any file work left: consumed
-- into the attempt's terminal state (its file is the reaper's to delete), or
-- known never to come (the launcher is gone and no receipt was there). Such a
-- row ages out by one bounded DELETE per supervision round (docs/storage.md);
-- NULL rows of terminal attempts still need the paged file checks. No index:
-- that DELETE walks the journal's primary key (the journal holds about run
-- rate x journal retention rows), and an index on the completion path would
-- cost ~1.5 KiB of WAL per attempt on the card (docs/performance.md).
ALTER TABLE receipt_journal ADD COLUMN settled_at_ms INTEGER;

-- A third eviction reason: DISK_CRITICAL (a task's newest finished log, taken
-- only below the critical mark). CHECK constraints cannot be altered, so the
-- table is rebuilt (same layout as 0007: WITHOUT ROWID, one B-tree).
CREATE TABLE log_artifacts_new (
    id TEXT PRIMARY KEY,
    relative_path TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    size_bytes INTEGER,
    evicted_at_ms INTEGER,
    evicted_reason TEXT CHECK (evicted_reason IS NULL
        OR evicted_reason IN ('SIZE_CAP', 'DISK_PRESSURE', 'DISK_CRITICAL'))
) STRICT, WITHOUT ROWID;
INSERT INTO log_artifacts_new (id, relative_path, created_at_ms, size_bytes, evicted_at_ms,
    evicted_reason)
  SELECT id, relative_path, created_at_ms, size_bytes, evicted_at_ms, evicted_reason
  FROM log_artifacts;
DROP TABLE log_artifacts;
ALTER TABLE log_artifacts_new RENAME TO log_artifacts;
