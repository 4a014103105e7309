-- A queued run may carry a not-before time (docs/tasks.md): a random start
-- delay, a retry's backoff. It is persisted with the run, so a worker restart
-- neither forgets the wait nor starts the run early; the dispatcher skips such
-- a run until then and wakes itself at the earliest one.
ALTER TABLE runs ADD COLUMN not_before_ms INTEGER;
