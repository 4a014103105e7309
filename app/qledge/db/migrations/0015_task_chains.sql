-- Issue 20: "run B after A". JSON lists of task ids to trigger (trigger `chain`)
-- when a run of this task ends: succeeded, failed (failed/timed_out/lost/
-- blocked), or in any way. Created in the transaction that ends the upstream
-- run (a terminal listener), so a worker kill never loses or doubles one.
ALTER TABLE tasks ADD COLUMN on_success_json TEXT NOT NULL DEFAULT '[]';
ALTER TABLE tasks ADD COLUMN on_failure_json TEXT NOT NULL DEFAULT '[]';
ALTER TABLE tasks ADD COLUMN on_finish_json TEXT NOT NULL DEFAULT '[]';
