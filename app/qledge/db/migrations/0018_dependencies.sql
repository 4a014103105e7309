-- Dependencies (docs/dependencies.md): the packages scripts need. A row is declared
-- state — what the user wants (action) — and points at the run that acts on it; its
-- status is derived from that run, never stored as a state of its own.

CREATE TABLE dependencies (
    num INTEGER PRIMARY KEY AUTOINCREMENT,  -- QingLong's integer id (/open)
    id TEXT NOT NULL UNIQUE,
    type TEXT NOT NULL,                     -- python | node
    name TEXT NOT NULL,                     -- normalized (PEP 503 for Python)
    spec TEXT NOT NULL,                     -- what pip/npm get: name, extras, version
    action TEXT NOT NULL,                   -- install | remove
    remark TEXT NOT NULL DEFAULT '',
    last_run_id TEXT,
    -- last_run_id's end, written in the transaction that ends it: the status stays
    -- known after retention (or deleting the queue's task) removed the run
    last_result TEXT,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    UNIQUE (type, name)
) STRICT;
CREATE INDEX dependencies_last_run ON dependencies (last_run_id);

-- The queue of each ecosystem is one task (overlap `queue`: one run at a time).
CREATE TABLE dependency_tasks (
    type TEXT PRIMARY KEY,
    task_id TEXT NOT NULL
) STRICT;

-- What each run of a queue was asked to do; its packages are the rows pointing at it.
CREATE TABLE dependency_jobs (
    run_id TEXT PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    type TEXT NOT NULL,
    action TEXT NOT NULL                    -- install | remove | rebuild
) STRICT;
