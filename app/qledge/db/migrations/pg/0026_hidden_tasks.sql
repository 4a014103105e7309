-- Issue 37: the panel's debug-run tasks, not listed by default (docs/scripts.md#run).
-- Paired with migrations/0026_hidden_tasks.sql, where the reason is explained.
ALTER TABLE tasks ADD COLUMN hidden bigint NOT NULL DEFAULT 0 CHECK (hidden IN (0, 1));
