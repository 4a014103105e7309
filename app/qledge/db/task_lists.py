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
_FAILS = 50
# One pass over the window's runs (the `runs_created` range, migration 0027): a row per
# (bucket, status, task) with its count, longest finished run and last run. Everything the
# overview shows but the medians is folded from these few thousand rows in Python.
_GROUPS = (
    "SELECT (r.created_at_ms - ?) / ? AS b, r.status AS status, r.task_id AS task_id,"
    " COUNT(*) AS n, COUNT(r.finished_at_ms - r.started_at_ms) AS timed,"
    " MAX(r.finished_at_ms - r.started_at_ms) AS longest, MAX(r.id) AS last_id,"
    " MAX(r.created_at_ms) AS last_at"
    " FROM runs r WHERE r.created_at_ms >= ? AND r.parent_run_id IS NULL GROUP BY 3, 2, 1")
# The exact median of each of a few tasks' finished runs in the window: the one or two
# middle durations by row number (statistics.median of them is the task's median).
_MIDDLES = (
    "SELECT task_id, d FROM (SELECT task_id, d,"
    " ROW_NUMBER() OVER (PARTITION BY task_id ORDER BY d) AS rn,"
    " COUNT(*) OVER (PARTITION BY task_id) AS c FROM"
    " (SELECT r.task_id AS task_id, r.finished_at_ms - r.started_at_ms AS d FROM runs r"
    "  WHERE r.created_at_ms >= ? AND r.parent_run_id IS NULL"
    "  AND r.finished_at_ms IS NOT NULL AND r.started_at_ms IS NOT NULL"
    "  AND r.task_id IN ({marks})) AS w) AS m"
    " WHERE rn = (c + 1) / 2 OR rn = (c + 2) / 2")


class _PerTask:
    """A task's figures in the window, folded from its groups."""

    __slots__ = ("failures", "last_at", "last_id", "longest", "timed")

    def __init__(self) -> None:
        self.failures = 0
        self.last_at = -1
        self.last_id = ""
        self.timed = 0
        self.longest: int | None = None


async def overview(tx: Tx, since_ms: int, bucket_ms: int, n_buckets: int) -> Overview:
    """Runs created since `since_ms` by outcome in `n_buckets` buckets of `bucket_ms`;
    the tasks with failures there (most recent failure first, at most 50); the slowest
    tasks by their longest finished run there, with the median. Internal tasks included:
    a pull that failed overnight is news too. Three statements whatever the volume: the
    grouped pass, the task names, the medians of the ten slowest (docs/performance.md,
    "Tasks page": ~100k runs a week stay well inside 300 ms)."""
    counts: list[dict[str, int]] = [{} for _ in range(n_buckets)]
    per: dict[str, _PerTask] = {}
    for r in await tx.all(_GROUPS, (since_ms, bucket_ms, since_ms)):
        b, status, n = int(r["b"]), r["status"], int(r["n"])
        if 0 <= b < n_buckets:
            counts[b][status] = counts[b].get(status, 0) + n
        one = per.setdefault(r["task_id"], _PerTask())
        if status in FAILED:
            one.failures += n
            one.last_at = max(one.last_at, int(r["last_at"]))
            one.last_id = max(one.last_id, r["last_id"])
        if r["timed"]:
            one.timed += int(r["timed"])
            longest = int(r["longest"])
            one.longest = longest if one.longest is None else max(one.longest, longest)
    names: dict[str, str] = {}
    if per:
        marks = ", ".join("?" for _ in per)
        names = {r["id"]: r["name"] for r in await tx.all(
            f"SELECT id, name FROM tasks WHERE id IN ({marks})", tuple(per))}  # noqa: S608
    known = {k: v for k, v in per.items() if k in names}
    fails = sorted((k for k, v in known.items() if v.failures),
                   key=lambda k: (-known[k].last_at, k))[:_FAILS]
    failed = [FailedTask(task_id=k, name=names[k], failures=known[k].failures,
                         last_failed_at_ms=known[k].last_at,
                         last_failed_run_id=known[k].last_id) for k in fails]
    slow = sorted((k for k, v in known.items() if v.longest is not None),
                  key=lambda k: (-(known[k].longest or 0), k))[:_TOP]
    middles: dict[str, list[int]] = {k: [] for k in slow}
    if slow:
        sql = _MIDDLES.format(marks=", ".join("?" for _ in slow))
        for r in await tx.all(sql, (since_ms, *slow)):
            middles[r["task_id"]].append(int(r["d"]))
    slowest = [SlowTask(task_id=k, name=names[k], runs=known[k].timed,
                        p50_ms=int(statistics.median(middles[k])),
                        max_ms=known[k].longest or 0) for k in slow]
    buckets = [Bucket(start_ms=since_ms + i * bucket_ms, counts=c)
               for i, c in enumerate(counts)]
    return Overview(since_ms=since_ms, bucket_ms=bucket_ms, buckets=buckets, failed=failed,
                    slowest=slowest)
