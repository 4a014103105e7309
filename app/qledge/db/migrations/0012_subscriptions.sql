-- Subscriptions (docs/subscriptions.md): script repositories or raw files pulled on a
-- schedule by their own task (pull_task_id), and the tasks a pull keeps in step.

-- secret is a credential at rest, like an env value: the data volume is the trust
-- boundary; it is handed only to the pull's own process and never read back out.
CREATE TABLE subscriptions (
    id TEXT PRIMARY KEY,
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
    -- a pull run that ended and whose tasks are not yet kept in step (committed with
    -- the run's result; cleared by the sync that handles it)
    sync_run_id TEXT,
    last_run_id TEXT,
    last_sync_json TEXT,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    version INTEGER NOT NULL DEFAULT 1
) STRICT;
CREATE INDEX subscriptions_pull_task ON subscriptions (pull_task_id);

-- One row per script a pull gave a task: what the pull last wrote into the task
-- (applied_*), so a task whose schedule or name differs was edited by its user.
-- task_id NULL: the user deleted the task; a pull does not bring it back.
CREATE TABLE subscription_tasks (
    subscription_id TEXT NOT NULL REFERENCES subscriptions (id) ON DELETE CASCADE,
    path TEXT NOT NULL,
    task_id TEXT,
    applied_schedule TEXT,
    applied_name TEXT NOT NULL,
    disabled_by_pull INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (subscription_id, path)
) STRICT;
