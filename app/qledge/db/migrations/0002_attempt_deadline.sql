-- A persisted deadline, set before spawn, so a timeout survives restarts (SPEC §7).
ALTER TABLE run_attempts ADD COLUMN deadline_at_ms INTEGER;
CREATE INDEX attempts_deadline ON run_attempts (deadline_at_ms) WHERE deadline_at_ms IS NOT NULL;
