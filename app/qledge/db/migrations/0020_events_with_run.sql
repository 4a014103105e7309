-- Issue 24: fewer B-tree pages per attempt (docs/storage.md, "Events with their run").
--
-- A run's events live in its own row as one compact append-only byte string
-- (db/_event_log.py): appending is part of the UPDATE that already rewrites the
-- row, so an event costs no page of its own. event_base: the events numbered up
-- to it are rows of run_events (runs from before this migration, kept as they
-- were: their history reads back unchanged); those after it are in event_log.
-- NULL (a run from before, or one written without it) means "all in run_events
-- so far": the first append sets it to event_seq. Adding columns rewrites no
-- row: the migration is one short transaction.
ALTER TABLE runs ADD COLUMN event_log BLOB;
ALTER TABLE runs ADD COLUMN event_base INTEGER;
