-- Issue 37: the overview's window; paired with migrations/0027_runs_created.sql.
CREATE INDEX runs_created ON runs (created_at_ms);
