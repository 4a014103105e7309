"""Read queries of the panel's task list and overview (docs/api.md, "Task list" and
"Task overview"): a fixed number of statements per call, whatever the number of tasks.

* `task_list`: the tasks (one statement, each with its last run's status and time by
  index-backed subqueries), filtered and sorted here — an appliance holds hundreds of
  tasks at most — then the page's last `STRIP` runs in one UNION ALL statement.
* `overview`: runs by outcome per time bucket, the tasks that failed and the slowest
  tasks within a window, all from `runs_created` (migration 0026).

Internal tasks — a subscription's pull task, a dependency queue's task — are marked
`internal` and never mixed into the user's list.
"""

from __future__ import annotations

import statistics
from typing import Any, Literal

import msgspec

from ..model import Task
from .interface import Tx
from .rows import task_from_row
from .tasks import INTERNAL

STRIP = 10  # runs per task in the list
FAILED = ("failed", "timed_out", "lost")
Sort = Literal["name", "next", "last_run", "created"]
_TASKS = (
    f"SELECT t.*, {INTERNAL} AS internal,"  # noqa: S608
    " (SELECT r.status FROM runs r WHERE r.task_id = t.id AND r.parent_run_id IS NULL"
    "  ORDER BY r.id DESC LIMIT 1) AS last_status,"
    " (SELECT r.created_at_ms FROM runs r WHERE r.task_id = t.id"
    "  AND r.parent_run_id IS NULL ORDER BY r.id DESC LIMIT 1) AS last_at_ms"
    " FROM tasks t WHERE t.hidden = 0 ORDER BY t.num")
_STRIP_ONE = ("SELECT * FROM"  # noqa: S608
              " (SELECT id, task_id, status, exit_code, created_at_ms,"
              " started_at_ms, finished_at_ms FROM runs WHERE task_id = ?"
              f" AND parent_run_id IS NULL ORDER BY id DESC LIMIT {STRIP}) AS s")


class StripRun(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    status: str
    exit_code: int | None
    created_at_ms: int
    duration_ms: int | None


class Listed(msgspec.Struct, frozen=True, kw_only=True):
    task: Task
    internal: bool
    last_status: str | None
    last_at_ms: int | None
    runs: list[StripRun] = []


class Filter(msgspec.Struct, frozen=True, kw_only=True):
    q: str = ""
    label: str = ""
    enabled: bool | None = None
    last_failed: bool = False
    internal: bool = False  # False: the user's tasks; True: the internal ones only


def _duration(row: Any) -> int | None:
    start, end = row["started_at_ms"], row["finished_at_ms"]
    return end - start if start is not None and end is not None else None


def _keep(item: Listed, f: Filter) -> bool:
    task = item.task
    if item.internal != f.internal:
        return False
    if f.q:
        needle = f.q.casefold()
        if needle not in task.name.casefold() and needle not in task.command.casefold():
            return False
    if f.label and f.label not in task.labels:
        return False
    if f.enabled is not None and task.enabled != f.enabled:
        return False
    return not f.last_failed or item.last_status in FAILED


async def all_tasks(tx: Tx) -> list[Listed]:
    """Every task with its last run's status and time (no strip)."""
    rows = await tx.all(_TASKS)
    return [Listed(task=task_from_row(r), internal=bool(r["internal"]),
                   last_status=r["last_status"], last_at_ms=r["last_at_ms"]) for r in rows]


async def strips(tx: Tx, task_ids: list[str]) -> dict[str, list[StripRun]]:
    """The last STRIP runs of each task, newest first, in one statement."""
    out: dict[str, list[StripRun]] = {i: [] for i in task_ids}
    if not task_ids:
        return out
    sql = " UNION ALL ".join([_STRIP_ONE] * len(task_ids))
    for r in await tx.all(sql, tuple(task_ids)):
        out[r["task_id"]].append(StripRun(
            id=r["id"], status=r["status"], exit_code=r["exit_code"],
            created_at_ms=r["created_at_ms"], duration_ms=_duration(r)))
    for runs in out.values():
        runs.sort(key=lambda run: run.id, reverse=True)
    return out


def sort_key(sort: Sort, next_of: dict[str, int | None]) -> Any:
    big = 2 ** 63
    if sort == "next":
        return lambda i: (next_of.get(i.task.id) is None, next_of.get(i.task.id) or big,
                          i.task.name.casefold())
    if sort == "last_run":
        return lambda i: (i.last_at_ms is None, -(i.last_at_ms or 0), i.task.name.casefold())
    if sort == "created":
        return lambda i: (i.task.created_at_ms, i.task.num)
    return lambda i: (i.task.name.casefold(), i.task.num)


def filtered(items: list[Listed], f: Filter) -> list[Listed]:
    return [i for i in items if _keep(i, f)]


def labels_of(items: list[Listed]) -> list[str]:
    """The labels the user's tasks carry, sorted (the label filter's choices)."""
    return sorted({label for i in items if not i.internal for label in i.task.labels})


class Bucket(msgspec.Struct, frozen=True, kw_only=True):
    start_ms: int
    counts: dict[str, int]


class FailedTask(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    name: str
    failures: int
    last_failed_at_ms: int
    last_failed_run_id: str


class SlowTask(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    name: str
    runs: int
    p50_ms: int
    max_ms: int


class Overview(msgspec.Struct, frozen=True, kw_only=True):
    since_ms: int
    bucket_ms: int
    buckets: list[Bucket]
    failed: list[FailedTask]
    slowest: list[SlowTask]


_TOP = 10


async def overview(tx: Tx, since_ms: int, bucket_ms: int, n_buckets: int) -> Overview:
    """Runs created in [since_ms, since_ms + n_buckets * bucket_ms) by outcome and
    bucket; the tasks with failures there (most recent first); the slowest tasks by
    their longest finished run there, with the median. Internal tasks included: a pull
    that failed overnight is news too. Four statements, all bounded by the window."""
    user = " AND r.parent_run_id IS NULL"
    rows = await tx.all(
        "SELECT (r.created_at_ms - ?) / ? AS b, r.status AS status, COUNT(*) AS n"  # noqa: S608
        f" FROM runs r WHERE r.created_at_ms >= ?{user} GROUP BY 1, 2",
        (since_ms, bucket_ms, since_ms))
    counts: list[dict[str, int]] = [{} for _ in range(n_buckets)]
    for r in rows:
        b = int(r["b"])
        if 0 <= b < n_buckets:
            counts[b][r["status"]] = int(r["n"])
    failed_in = ", ".join(f"'{s}'" for s in FAILED)
    frows = await tx.all(
        "SELECT r.task_id AS task_id, t.name AS name, COUNT(*) AS n,"  # noqa: S608
        " MAX(r.id) AS last_id, MAX(r.created_at_ms) AS last_at"
        " FROM runs r JOIN tasks t ON t.id = r.task_id"
        f" WHERE r.created_at_ms >= ?{user} AND r.status IN ({failed_in})"
        " GROUP BY r.task_id, t.name ORDER BY last_at DESC LIMIT ?", (since_ms, 50))
    failed = [FailedTask(task_id=r["task_id"], name=r["name"], failures=int(r["n"]),
                         last_failed_at_ms=int(r["last_at"]), last_failed_run_id=r["last_id"])
              for r in frows]
    srows = await tx.all(
        "SELECT r.task_id AS task_id, t.name AS name, COUNT(*) AS n,"  # noqa: S608
        " MAX(r.finished_at_ms - r.started_at_ms) AS longest"
        " FROM runs r JOIN tasks t ON t.id = r.task_id"
        f" WHERE r.created_at_ms >= ?{user} AND r.started_at_ms IS NOT NULL"
        " AND r.finished_at_ms IS NOT NULL"
        " GROUP BY r.task_id, t.name ORDER BY longest DESC LIMIT ?", (since_ms, _TOP))
    durations: dict[str, list[int]] = {r["task_id"]: [] for r in srows}
    if durations:
        marks = ", ".join("?" for _ in durations)
        for r in await tx.all(
                "SELECT task_id, finished_at_ms - started_at_ms AS d FROM runs"  # noqa: S608
                f" WHERE created_at_ms >= ? AND task_id IN ({marks})"
                " AND parent_run_id IS NULL"
                " AND started_at_ms IS NOT NULL AND finished_at_ms IS NOT NULL",
                (since_ms, *durations)):
            durations[r["task_id"]].append(int(r["d"]))
    slowest = [SlowTask(task_id=r["task_id"], name=r["name"], runs=int(r["n"]),
                        p50_ms=int(statistics.median(durations[r["task_id"]])),
                        max_ms=int(r["longest"])) for r in srows]
    buckets = [Bucket(start_ms=since_ms + i * bucket_ms, counts=c)
               for i, c in enumerate(counts)]
    return Overview(since_ms=since_ms, bucket_ms=bucket_ms, buckets=buckets, failed=failed,
                    slowest=slowest)
