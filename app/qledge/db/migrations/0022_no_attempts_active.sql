-- Issue 24: active attempts are found through runs_active (an active attempt's run is
-- always active: a run is `running` from spawn step 1), joined to run_attempts by the
-- (run_id, attempt_no) index. The partial index of active attempts cost ~3 WAL frames
-- per attempt (insert, preparing -> running, leave). Orphans left by older versions (an
-- active attempt under a terminal run) are found by a scan at start-up instead
-- (docs/recovery.md). One statement, in the migration's transaction.
DROP INDEX attempts_active;
