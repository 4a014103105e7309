-- Issue 18: notification channels, rules and the durable outbox.

-- An apprise URL holds the service's token: a secret at rest in this file, like
-- an env value (the data volume is the trust boundary). The API never returns it
-- after creation; it never goes into events, logs or the outbox's errors.
CREATE TABLE notify_channels (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    url TEXT NOT NULL,
    enabled INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
) STRICT;

-- The rules: scope '' is the global set, a task id its override (only the
-- fields it sets; the rest come from the global set). JSON of notify.Rules.
CREATE TABLE notify_rules (
    scope TEXT PRIMARY KEY,
    rules_json TEXT NOT NULL,
    updated_at_ms INTEGER NOT NULL
) STRICT;

-- One row per message and channel, written in the transaction that made the
-- run terminal (or by the API for a script's send()): a worker killed between
-- that commit and the send loses nothing; one killed between the send and
-- marking it sent sends it once more. state: pending (incl. retrying), sent,
-- given_up. last_error is redacted (never the channel's URL or its tokens).
CREATE TABLE notify_outbox (
    id TEXT PRIMARY KEY,
    channel_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    run_id TEXT,
    task_id TEXT,
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    -- last lines of this run's log to append at send time (0: none)
    log_lines INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL CHECK (state IN ('pending', 'sent', 'given_up')),
    tries INTEGER NOT NULL DEFAULT 0,
    due_at_ms INTEGER NOT NULL,
    next_at_ms INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    done_at_ms INTEGER,
    last_error TEXT
) STRICT;
CREATE INDEX notify_outbox_due ON notify_outbox (state, next_at_ms);
CREATE INDEX notify_outbox_recent ON notify_outbox (created_at_ms);
