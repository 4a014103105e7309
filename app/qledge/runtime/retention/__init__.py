"""Bounded disk: retention rounds, log eviction, database upkeep (docs/retention.md).

Policies (settings/profile, per-task overrides `keep_runs`/`keep_days`, 0 = no
limit of that kind): a terminal run is deleted when it is not among its task's
`keep_runs` newest terminal runs, or finished more than `keep_days` ago — but a
task's newest terminal run is always kept. Deleting a run deletes its attempts,
events, leases and log artifact rows in ONE transaction that also queues the
log file in `file_deletions`; the file is unlinked after commit and its queue
row dropped in a later transaction. A crash in between leaves a queue row, so
the next round removes the orphan file without listing any directory.

Policy deletions, measured sizes and `run.held` marks commit *deferred* (no fsync
of their own): a power cut that loses them only brings back runs the next round
deletes again. Their files wait for durability instead — a file is unlinked only
once the commit that deleted its rows is on disk, or a reboot could find a kept
run whose log is gone. Usually the next attempt's durable commit covers them; an
idle appliance pays one `sync()` after a retention interval, and disk pressure
pays it at once. Evictions commit durable: they free space now.

The logs size cap and disk pressure evict logs instead: oldest terminal
attempts' files first; the run and attempt rows stay and the artifact is marked
evicted (`SIZE_CAP`/`DISK_PRESSURE`), which the log API answers with 410.
Each task's newest finished log is kept unless the disk is critically full
(below the critical mark, `DISK_CRITICAL`). Active attempts' logs are never
touched, and nothing here reacts to receipts.

Each round (a `PeriodicLoop`: explicit start/stop, no overlap, early under
pressure) works within pages × page size: queued file deletions, policy
deletions (task cursor resumes across rounds), measuring finished logs, the
size cap, pressure relief, `run.held` events, then database upkeep (a WAL
checkpoint when the WAL is over its threshold, `incremental_vacuum` in bounded
steps once free pages are a large share of the file or the data volume is short
of space; never a full VACUUM while serving).

Fleet mode: the policy deletions walk every task of the shared database, so only
the scheduler lease's holder runs them (runtime/leader.py); every node still
drains queued file deletions, measures and evicts its own logs.

The package: `policy` (the pure maths: which runs go, which logs are evicted),
`rounds` (one retention round against the database and the logs volume), `keeper`
(the disk watch and the rounds' loop, as the Runtime starts and stops them).
"""

from .keeper import DiskKeeper
from .policy import (
    CAP_TARGET,
    DAY_MS,
    DISK_CRITICAL,
    DISK_PRESSURE,
    SIZE_CAP,
    LogFacts,
    Policy,
    bounds,
    cap_excess,
    evict_oldest,
    policy_for,
    verdict,
)
from .rounds import Retention, RetentionReport

__all__ = ["CAP_TARGET", "DAY_MS", "DISK_CRITICAL", "DISK_PRESSURE", "SIZE_CAP", "DiskKeeper",
           "LogFacts", "Policy", "Retention", "RetentionReport", "bounds", "cap_excess",
           "evict_oldest", "policy_for", "verdict"]
