-- Issue 20: per-task retries and overlap policy (docs/tasks.md).

-- A retry is a new attempt of the same run after a persisted backoff
-- (runs.not_before_ms): `retries` more attempts at most, the first one
-- `retry_delay_s` after the failure, doubling each time (plus jitter), for the
-- outcomes listed in `retry_on_json` (a JSON list of failed/timed_out/lost).
ALTER TABLE tasks ADD COLUMN retries INTEGER NOT NULL DEFAULT 0
    CHECK (retries BETWEEN 0 AND 10);
ALTER TABLE tasks ADD COLUMN retry_delay_s INTEGER NOT NULL DEFAULT 10
    CHECK (retry_delay_s BETWEEN 0 AND 86400);
ALTER TABLE tasks ADD COLUMN retry_on_json TEXT NOT NULL DEFAULT '["failed","lost"]';

-- What a new run does while one of the task is still active: skip | queue |
-- replace | allow. It supersedes `concurrency` (kept, and kept in step, for
-- API clients: forbid <=> anything but allow). CHECKs cannot be altered, so the
-- policy is a new column, filled from the old one.
ALTER TABLE tasks ADD COLUMN overlap TEXT NOT NULL DEFAULT 'skip'
    CHECK (overlap IN ('skip', 'queue', 'replace', 'allow'));
UPDATE tasks SET overlap = CASE concurrency WHEN 'allow' THEN 'allow' ELSE 'skip' END;
