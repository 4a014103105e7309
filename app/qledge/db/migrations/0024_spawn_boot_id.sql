-- Issue 35: the machine's boot id at spawn step 1, durable with the attempt. An attempt
-- found `preparing` at start-up (no receipt, no launcher to adopt) was either never
-- spawned or spawned before the machine went down: a power cut or reboot takes the
-- launcher, the receipt not yet fsync'd and the deferred identity commit with it. A boot
-- id other than the current one says which (RECOVERY_SPAWN_BEFORE_REBOOT: the task may
-- have run), docs/contract.md. NULL on attempts prepared before this migration.
-- Paired with migrations/pg/0024_spawn_boot_id.sql.
ALTER TABLE run_attempts ADD COLUMN spawn_boot_id TEXT;
