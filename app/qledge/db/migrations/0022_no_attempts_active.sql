-- Issue 24: active attempts are found through their runs instead (an active attempt's
-- run is always `running`, from spawn step 1): the running runs from runs_active, each
-- one's attempts by the (run_id, attempt_no) index. The partial index of active
-- attempts cost 3 WAL frames per attempt (insert, preparing -> running, leave). An older
-- version's orphans (an active attempt under a terminal or a queued run) are found by a
-- walk of run_attempts at start-up instead (docs/recovery.md). One statement, in the
-- migration's transaction.
DROP INDEX attempts_active;
