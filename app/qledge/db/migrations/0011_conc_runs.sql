-- Issue 15 (QingLong's `task` form): `task <path> conc ENV sel` runs one child
-- run per selected value, each with its own attempt, launcher, receipt and log;
-- conc_index is the 1-based position of the child's value in ENV (the value
-- itself is never stored). No foreign key: retention deletes terminal runs one
-- by one, parents and children alike (never a child of an active parent).
ALTER TABLE runs ADD COLUMN parent_run_id TEXT;
ALTER TABLE runs ADD COLUMN conc_index INTEGER CHECK (conc_index IS NULL OR conc_index >= 1);
CREATE INDEX runs_parent ON runs (parent_run_id, conc_index) WHERE parent_run_id IS NOT NULL;
