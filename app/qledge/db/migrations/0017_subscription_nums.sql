-- QingLong's /open/subscriptions shapes (docs/qinglong-compat.md): a subscription
-- gets the small integer id QingLong clients use, like tasks and envs — `num`,
-- AUTOINCREMENT so a deleted subscription's id is never handed to a new one; `id`
-- stays the native UUIDv7. Existing subscriptions are numbered in creation order.
--
-- Rebuilt the way 0007 rebuilds tables (foreign keys are off while migrating and
-- checked afterwards): subscription_tasks' REFERENCES subscriptions (id) names the
-- rebuilt table once it has the old name.
CREATE TABLE subscriptions_new (
    num INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    type TEXT NOT NULL,
    url TEXT NOT NULL,
    branch TEXT,
    alias TEXT NOT NULL UNIQUE,
    schedule TEXT,
    default_schedule TEXT,
    whitelist TEXT NOT NULL DEFAULT '',
    blacklist TEXT NOT NULL DEFAULT '',
    dependences TEXT NOT NULL DEFAULT '',
    extensions_json TEXT NOT NULL,
    auto_add INTEGER NOT NULL DEFAULT 1,
    auto_delete INTEGER NOT NULL DEFAULT 1,
    vanished TEXT NOT NULL DEFAULT 'delete',
    sub_before TEXT NOT NULL DEFAULT '',
    sub_after TEXT NOT NULL DEFAULT '',
    enabled INTEGER NOT NULL DEFAULT 1,
    username TEXT,
    secret TEXT,
    caps_json TEXT NOT NULL,
    pull_task_id TEXT,
    sync_run_id TEXT,
    last_run_id TEXT,
    last_sync_json TEXT,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    version INTEGER NOT NULL DEFAULT 1
) STRICT;
INSERT INTO subscriptions_new (id, name, type, url, branch, alias, schedule,
    default_schedule, whitelist, blacklist, dependences, extensions_json, auto_add,
    auto_delete, vanished, sub_before, sub_after, enabled, username, secret, caps_json,
    pull_task_id, sync_run_id, last_run_id, last_sync_json, created_at_ms, updated_at_ms,
    version)
  SELECT id, name, type, url, branch, alias, schedule, default_schedule, whitelist,
    blacklist, dependences, extensions_json, auto_add, auto_delete, vanished, sub_before,
    sub_after, enabled, username, secret, caps_json, pull_task_id, sync_run_id,
    last_run_id, last_sync_json, created_at_ms, updated_at_ms, version
  FROM subscriptions ORDER BY created_at_ms, id;
DROP TABLE subscriptions;
ALTER TABLE subscriptions_new RENAME TO subscriptions;
CREATE INDEX subscriptions_pull_task ON subscriptions (pull_task_id);
