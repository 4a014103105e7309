"""Dependencies, their queues' tasks and the jobs of those runs (SQL only;
docs/dependencies.md, migration 0018).

A row is what the user declared (`action`: install or remove) and the run acting on
it (`last_run_id`); `run_status` is that run's status, read with the row, and
`last_result` its end as recorded in the transaction that ended it (kept when the
run is gone). The status a package shows is derived from those two.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from .. import ids
from ..dependencies.spec import package
from ..model import RunStatus
from . import dialect, statuses
from .interface import Row, Tx
from .rows import NotFound, like_pattern

_SELECT = ("SELECT d.*, r.status AS run_status FROM dependencies d"
           " LEFT JOIN runs r ON r.id = d.last_run_id")


class Dependency(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    num: int
    type: str
    name: str
    spec: str
    action: str
    remark: str
    last_run_id: str | None
    last_result: str | None
    run_status: str | None  # the last run's status while the run exists
    created_at_ms: int
    updated_at_ms: int


def _dep(row: Row) -> Dependency:
    return Dependency(
        id=row["id"], num=row["num"], type=row["type"], name=row["name"], spec=row["spec"],
        action=row["action"], remark=row["remark"], last_run_id=row["last_run_id"],
        last_result=row["last_result"], run_status=row["run_status"],
        created_at_ms=row["created_at_ms"], updated_at_ms=row["updated_at_ms"])


async def list_all(tx: Tx, *, type_: str | None = None, search: str = "",
                   limit: int = 5000) -> list[Dependency]:
    clauses, params = [], []
    if type_:
        clauses.append("d.type = ?")
        params.append(type_)
    if search:
        clauses.append(f"({dialect.like(tx.dialect, 'd.name', '?')}"
                       f" OR {dialect.like(tx.dialect, 'd.spec', '?')})")
        params += [like_pattern(search)] * 2
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = await tx.all(f"{_SELECT}{where} ORDER BY d.type, d.name LIMIT ?",
                        [*params, limit])
    return [_dep(r) for r in rows]


async def get(tx: Tx, dep_id: str) -> Dependency:
    row = await tx.one(f"{_SELECT} WHERE d.id = ?", (dep_id,))
    if row is None:
        raise NotFound("dependency")
    return _dep(row)


async def by_ids(tx: Tx, ids: Iterable[str]) -> list[Dependency]:
    """All of them, in the order given (NotFound if one is unknown)."""
    return [await get(tx, dep_id) for dep_id in dict.fromkeys(ids)]


async def ids_by_nums(tx: Tx, nums: Iterable[int]) -> list[str]:
    out = []
    for num in dict.fromkeys(nums):
        row = await tx.one("SELECT id FROM dependencies WHERE num = ?", (num,))
        if row is None:
            raise NotFound("dependency")
        out.append(row["id"])
    return out


async def declare(tx: Tx, ecosystem: str, specs: Iterable[str], now_ms: int, *,
                  remark: str | None = None) -> list[str]:
    """Declare packages to be installed: a new row per new name, the spec (and remark,
    if given) of a known one replaced. The rows' ids, in order; no run is queued here
    (runtime/dependencies.queue_in does that, in the same transaction). SpecError for
    a spec that is refused (dependencies/spec.py)."""
    out: list[str] = []
    for raw in specs:
        pkg = package(ecosystem, raw)
        row = await tx.one("SELECT id FROM dependencies WHERE type = ? AND name = ?",
                           (ecosystem, pkg.name))
        if row is not None:
            await tx.execute(
                "UPDATE dependencies SET spec = ?, action = 'install',"
                " remark = COALESCE(?, remark), updated_at_ms = ? WHERE id = ?",
                (pkg.spec, remark, now_ms, row["id"]))
            dep_id = str(row["id"])
        else:
            dep_id = ids.uuid7()
            await tx.execute(
                "INSERT INTO dependencies (id, type, name, spec, action, remark,"
                " created_at_ms, updated_at_ms) VALUES (?, ?, ?, ?, 'install', ?, ?, ?)",
                (dep_id, ecosystem, pkg.name, pkg.spec, remark or "", now_ms, now_ms))
        if dep_id not in out:
            out.append(dep_id)
    return out


async def point(tx: Tx, ids: Iterable[str], action: str, run_id: str, now_ms: int) -> None:
    """These rows are now acted on by `run_id` (their earlier run's result is history)."""
    for dep_id in ids:
        await tx.execute(
            "UPDATE dependencies SET action = ?, last_run_id = ?, last_result = NULL,"
            " updated_at_ms = ? WHERE id = ?", (action, run_id, now_ms, dep_id))


async def set_spec(tx: Tx, dep_id: str, spec: str, remark: str | None, now_ms: int) -> None:
    await tx.execute("UPDATE dependencies SET spec = ?, remark = COALESCE(?, remark),"
                     " updated_at_ms = ? WHERE id = ?", (spec, remark, now_ms, dep_id))


async def name_taken(tx: Tx, ecosystem: str, name: str, other_than: str) -> bool:
    row = await tx.one("SELECT 1 FROM dependencies WHERE type = ? AND name = ? AND id != ?",
                       (ecosystem, name, other_than))
    return row is not None


async def forget(tx: Tx, ids: Iterable[str]) -> None:
    for dep_id in ids:
        await tx.execute("DELETE FROM dependencies WHERE id = ?", (dep_id,))


async def of_run(tx: Tx, run_id: str) -> list[Dependency]:
    rows = await tx.all(f"{_SELECT} WHERE d.last_run_id = ? ORDER BY d.name",
                        (run_id,))
    return [_dep(r) for r in rows]


async def installed(tx: Tx, ecosystem: str) -> list[Dependency]:
    """Declared installed, and the last run that installed them succeeded."""
    rows = await tx.all(
        f"{_SELECT} WHERE d.type = ? AND d.action = 'install'"
        f" AND {statuses.is_('d.last_result', RunStatus.SUCCEEDED)} ORDER BY d.name",
        (ecosystem,))
    return [_dep(r) for r in rows]


async def record_result(tx: Tx, run_id: str, status: str) -> None:
    """In the transaction that ends `run_id`: the memo of its end for its rows."""
    await tx.execute("UPDATE dependencies SET last_result = ? WHERE last_run_id = ?",
                     (status, run_id))


# -- the queues: one task per ecosystem, one job per run ------------------------------

async def task_of(tx: Tx, ecosystem: str) -> str | None:
    row = await tx.one("SELECT task_id FROM dependency_tasks WHERE type = ?", (ecosystem,))
    return None if row is None else str(row["task_id"])


async def set_task(tx: Tx, ecosystem: str, task_id: str) -> None:
    await tx.execute("INSERT INTO dependency_tasks (type, task_id) VALUES (?, ?)"
                     " ON CONFLICT (type) DO UPDATE SET task_id = excluded.task_id",
                     (ecosystem, task_id))


async def is_queue_task(tx: Tx, task_id: str) -> str | None:
    """The ecosystem whose queue this task is (None: another task)."""
    row = await tx.one("SELECT type FROM dependency_tasks WHERE task_id = ?", (task_id,))
    return None if row is None else str(row["type"])


async def add_job(tx: Tx, run_id: str, ecosystem: str, action: str) -> None:
    await tx.execute("INSERT INTO dependency_jobs (run_id, type, action) VALUES (?, ?, ?)",
                     (run_id, ecosystem, action))


async def job_action(tx: Tx, run_id: str) -> str | None:
    row = await tx.one("SELECT action FROM dependency_jobs WHERE run_id = ?", (run_id,))
    return None if row is None else str(row["action"])


async def newest_job(tx: Tx, ecosystem: str) -> tuple[str, str, str] | None:
    """(run id, action, run status) of the ecosystem's newest job."""
    row = await tx.one(
        "SELECT j.run_id, j.action, r.status FROM dependency_jobs j JOIN runs r"
        " ON r.id = j.run_id WHERE j.type = ? ORDER BY j.run_id DESC LIMIT 1", (ecosystem,))
    return None if row is None else (str(row["run_id"]), str(row["action"]),
                                     str(row["status"]))

