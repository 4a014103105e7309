-- Issue 37: a hidden task is the panel's debug Run of a script (operations/script_runs.py):
-- one per script path, reused, never listed by default (GET /api/v1/tasks, QingLong's
-- /open/crons, the panel's pickers) so a debug run leaves no task in the user's list;
-- its runs stay in Runs and retention trims them. docs/scripts.md#run.
-- Paired with migrations/pg/0026_hidden_tasks.sql.
ALTER TABLE tasks ADD COLUMN hidden INTEGER NOT NULL DEFAULT 0 CHECK (hidden IN (0, 1));
