-- Issue 20: more schedule forms (docs/tasks.md). A task's further cron
-- expressions (QingLong's extra_schedules), its own time zone (NULL: the
-- container's TZ), and the appliance start whose @boot runs were created
-- (node.boot_fired_for), so a worker respawn does not run them again.
ALTER TABLE tasks ADD COLUMN extra_schedules_json TEXT NOT NULL DEFAULT '[]';
ALTER TABLE tasks ADD COLUMN tz TEXT;
ALTER TABLE node ADD COLUMN boot_fired_for TEXT;
