-- Issue 37: the overview's window (runs by created_at_ms, docs/api.md "Task overview")
-- stays an index range at 100k runs. Paired with pg/0027_runs_created.sql.
CREATE INDEX runs_created ON runs (created_at_ms);
