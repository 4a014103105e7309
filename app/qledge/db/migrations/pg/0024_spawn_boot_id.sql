-- Issue 35: the machine's boot id at spawn step 1 (RECOVERY_SPAWN_BEFORE_REBOOT).
-- Paired with migrations/0024_spawn_boot_id.sql, where the reason is explained.
ALTER TABLE run_attempts ADD COLUMN spawn_boot_id text;
