-- Issue 23, fleet mode (docs/fleet.md). Paired with migrations/0023_fleet.sql (the
-- placement and epoch columns, the same on both backends), plus what only a fleet has.
ALTER TABLE tasks ADD COLUMN placement_node text;
ALTER TABLE tasks ADD COLUMN placement_labels_json text;
ALTER TABLE runs ADD COLUMN placement_node text;
ALTER TABLE runs ADD COLUMN placement_labels_json text;
ALTER TABLE run_attempts ADD COLUMN node_epoch bigint;
ALTER TABLE run_attempts ADD COLUMN late_exit_code bigint;
ALTER TABLE run_attempts ADD COLUMN late_finished_at_ms bigint;

-- One row per node name. `node_id` is the runtime owner of its attempts (kept in the
-- node's state dir); `epoch` grows at every takeover, and every claim, completion and
-- heartbeat of a node checks it (fencing). Lease times are the database's clock.
CREATE TABLE nodes (
    name text PRIMARY KEY,
    node_id text NOT NULL,
    incarnation text NOT NULL,
    epoch bigint NOT NULL,
    state text NOT NULL CHECK (state IN ('live', 'expired', 'left')),
    labels_json text NOT NULL,
    url text NOT NULL,
    version text NOT NULL,
    clock_skew_ms bigint NOT NULL DEFAULT 0,
    heartbeat_at_ms bigint NOT NULL,
    lease_expires_at_ms bigint NOT NULL,
    registered_at_ms bigint NOT NULL,
    -- `@boot` runs: the appliance start they were fired for (SQLite: node.boot_fired_for).
    boot_fired_for text
);
CREATE INDEX nodes_node_id ON nodes (node_id);

-- Singleton duties of the fleet ('scheduler'): one holder at a time, by lease.
CREATE TABLE fleet_leases (
    name text PRIMARY KEY,
    holder text NOT NULL,
    holder_incarnation text NOT NULL,
    epoch bigint NOT NULL,
    expires_at_ms bigint NOT NULL
);

-- A fleet's logs are on the disk of the node that ran the attempt: a deleted log is
-- queued in its owner's volume, `logs@<node id>`, which only that node drains.
ALTER TABLE file_deletions DROP CONSTRAINT file_deletions_volume_check;
ALTER TABLE file_deletions ADD CONSTRAINT file_deletions_volume_check
    CHECK (volume = 'logs' OR volume LIKE 'logs@%');
