-- Issue 15 (QingLong's `task` form), two kinds of runs the form needs.
--
-- A scheduled `task <path>` without `now` waits a random delay of up to
-- `random_delay_s` before it starts: a persisted not-before time on the queued
-- run (NULL: no wait), so it survives a restart; the dispatcher admits the run
-- once it is due. No index: the runs it concerns are the queued ones, which the
-- partial index runs_active holds.
ALTER TABLE runs ADD COLUMN not_before_ms INTEGER;

-- `task <path> conc ENV sel`: one child run per selected value, each with its
-- own attempt, launcher, receipt and log; conc_index is the 1-based position of
-- the child's value in ENV (the value itself is never stored). No foreign key:
-- retention deletes terminal runs one by one, parents and children alike.
ALTER TABLE runs ADD COLUMN parent_run_id TEXT;
ALTER TABLE runs ADD COLUMN conc_index INTEGER CHECK (conc_index IS NULL OR conc_index >= 1);
CREATE INDEX runs_parent ON runs (parent_run_id, conc_index) WHERE parent_run_id IS NOT NULL;
