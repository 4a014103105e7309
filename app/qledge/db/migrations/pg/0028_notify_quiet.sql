-- Issue 38: notifications quiet by default. Paired with migrations/0028_notify_quiet.sql,
-- where the columns and the table are explained.
ALTER TABLE notify_outbox ADD COLUMN notify_type text NOT NULL DEFAULT 'info';
ALTER TABLE notify_outbox ADD COLUMN held_at_ms bigint;
ALTER TABLE notify_outbox ADD COLUMN digest_id text;
CREATE INDEX notify_outbox_held ON notify_outbox (channel_id, held_at_ms)
    WHERE held_at_ms IS NOT NULL AND state = 'pending';
CREATE INDEX notify_outbox_sent ON notify_outbox (channel_id, done_at_ms)
    WHERE state = 'sent';
CREATE TABLE notify_settings (
    id integer PRIMARY KEY CHECK (id = 1),
    settings_json text NOT NULL,
    updated_at_ms bigint NOT NULL
);
