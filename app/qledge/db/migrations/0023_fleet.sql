-- Issue 23, fleet mode (docs/fleet.md). Paired with migrations/pg/0023_fleet.sql: the
-- columns both backends carry. A task's placement (a node name, labels a node must all
-- carry; NULL = any), copied onto each run when it is created so that editing a task
-- never moves a queued run. An attempt's node epoch (the owner's lease epoch when it
-- was prepared; NULL on the embedded SQLite, which has one node and no leases) and a
-- late receipt's facts, recorded and never applied (COMPLETION_STALE_EPOCH). The
-- `nodes` and `fleet_leases` tables exist on PostgreSQL only: one node needs neither.
ALTER TABLE tasks ADD COLUMN placement_node TEXT;
ALTER TABLE tasks ADD COLUMN placement_labels_json TEXT;
ALTER TABLE runs ADD COLUMN placement_node TEXT;
ALTER TABLE runs ADD COLUMN placement_labels_json TEXT;
ALTER TABLE run_attempts ADD COLUMN node_epoch INTEGER;
ALTER TABLE run_attempts ADD COLUMN late_exit_code INTEGER;
ALTER TABLE run_attempts ADD COLUMN late_finished_at_ms INTEGER;
