-- Issue 19: `qledge import qinglong` (docs/migrating-from-qinglong.md). One row per
-- QingLong object an import wrote (or found identical), per source instance, so a
-- second import changes or skips it instead of creating it again. source_fp is
-- the QingLong side when it was imported, written_fp what qledge held right after:
-- a qledge object whose fields no longer give written_fp was edited in qledge.
-- Both are truncated SHA-256 fingerprints of the fields; no value is stored.
CREATE TABLE import_map (
    source TEXT NOT NULL,
    kind TEXT NOT NULL,
    source_key TEXT NOT NULL,
    target_id TEXT NOT NULL,
    source_fp TEXT NOT NULL,
    written_fp TEXT NOT NULL,
    imported_at_ms INTEGER NOT NULL,
    PRIMARY KEY (source, kind, source_key)
) STRICT;
