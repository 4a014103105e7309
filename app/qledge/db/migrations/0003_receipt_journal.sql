-- One row per attempt that may leave a receipt (SPEC §2, §5). It indexes the
-- receipts volume so recovery never lists directories; it holds no run state.
CREATE TABLE receipt_journal (
    attempt_id TEXT PRIMARY KEY REFERENCES run_attempts(id) ON DELETE CASCADE,
    state TEXT NOT NULL CHECK (state IN ('pending', 'quarantined')),
    relative_path TEXT NOT NULL,
    reason_code TEXT,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    -- retention clock: when the attempt turned terminal or the receipt was
    -- quarantined; rows age out by the profile's windows counted from here
    retention_since_ms INTEGER
) STRICT;
CREATE INDEX journal_state ON receipt_journal (state, attempt_id);
