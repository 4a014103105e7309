-- Attempt-bound leases of the cancellation dispatcher (SPEC §7). A signal may
-- be sent only by the holder whose epoch is still in the row (fencing); a new
-- worker takes an expired lease over with a higher epoch.
CREATE TABLE cancel_leases (
    attempt_id TEXT PRIMARY KEY REFERENCES run_attempts(id) ON DELETE CASCADE,
    holder TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    term_sent_at_ms INTEGER,
    kill_sent_at_ms INTEGER
) STRICT;
