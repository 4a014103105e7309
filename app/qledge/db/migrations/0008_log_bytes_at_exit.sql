-- The log's length when the command exited, from the receipt's optional logBytes
-- (docs/storage.md, "Logs and power loss"): a log file found shorter than this
-- was cut by a power loss and is reported as truncated, never as complete.
ALTER TABLE run_attempts ADD COLUMN log_bytes_at_exit INTEGER;
