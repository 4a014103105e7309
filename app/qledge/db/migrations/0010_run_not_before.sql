-- Issue 15 (QingLong's `task` form): a scheduled `task <path>` without `now` waits a
-- random delay of up to `random_delay_s` before it starts. The wait is this
-- persisted not-before time on the queued run (NULL: no wait), so it survives a
-- restart; the dispatcher admits the run once it is due. No index: the runs
-- it concerns are the queued ones, which the partial index runs_active holds.
ALTER TABLE runs ADD COLUMN not_before_ms INTEGER;
