-- Issue 38: notifications quiet by default (docs/notifications.md, "Quiet by default").
-- Paired with migrations/pg/0028_notify_quiet.sql.
--
-- notify_type: apprise's notify type of the message ('failure' for a failure,
-- 'success' for a recovery, 'info' for the rest): a service shows it as a colour
-- or an icon.
-- held_at_ms: the channel's rate limit held this row back (it stays 'pending' and
-- goes out inside its channel's next digest, never on its own).
-- digest_id: the digest row that carried this held row; the row itself is then
-- marked sent (it is never dropped: the delivery log keeps every event).
ALTER TABLE notify_outbox ADD COLUMN notify_type TEXT NOT NULL DEFAULT 'info';
ALTER TABLE notify_outbox ADD COLUMN held_at_ms INTEGER;
ALTER TABLE notify_outbox ADD COLUMN digest_id TEXT;
CREATE INDEX notify_outbox_held ON notify_outbox (channel_id, held_at_ms)
    WHERE held_at_ms IS NOT NULL AND state = 'pending';
CREATE INDEX notify_outbox_sent ON notify_outbox (channel_id, done_at_ms)
    WHERE state = 'sent';

-- The notification settings (one row): the language messages are written in and
-- the public base URL their links point at. JSON of db.notifications.Settings.
CREATE TABLE notify_settings (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    settings_json TEXT NOT NULL,
    updated_at_ms INTEGER NOT NULL
) STRICT;
