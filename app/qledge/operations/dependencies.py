"""Dependency operations: declare, reinstall, remove, change, rebuild, forget and
cancel packages — each pointing rows at a run of the ecosystem's queue in one
transaction (runtime/dependencies.py keeps the queues) — and what the API shows
beside the rows (docs/dependencies.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import msgspec

from ..clock import now_ms
from ..db import dependencies as deps
from ..db import rows
from ..db.interface import Tx
from ..dependencies import dirs
from ..dependencies.spec import ECOSYSTEMS, Ecosystem, package, redact_url, status
from ..runtime.cancellation import RunTerminal
from ..runtime.dependencies import npm_available, queue_in
from ..runtime.lifecycle import Runtime
from .tasks import cancel_run

LINUX = ("system packages cannot be installed: the container runs unprivileged and"
         " its root filesystem is the image's. Build them into the image instead"
         " (EXTRA_PACKAGES, docs/dependencies.md, 'System packages')")
NO_NPM = ("node packages need the image's -node variant: this image has no npm"
          " (docs/image.md)")
# A derived status that keeps a package in the folder or has a run pending.
HELD = frozenset({"installed", "queued", "installing", "removing"})


class Unavailable(Exception):
    """This kind of package cannot be installed on this appliance (the message says
    what to do instead)."""


class StillInstalled(Exception):
    """Refused: forgetting a package that is installed or has a run pending."""


def check_ecosystem(eco: str) -> Ecosystem:
    if eco == "linux":
        raise Unavailable(LINUX)
    if eco == "node" and not npm_available():
        raise Unavailable(NO_NPM)
    if eco not in ECOSYSTEMS:
        raise Unavailable(f"unknown type {eco[:20]!r}: python, node or linux")
    return "python" if eco == "python" else "node"


def derived_status(dep: deps.Dependency) -> str:
    return status(dep.action, dep.run_status or dep.last_result)


async def _queue(rt: Runtime, tx: Tx, eco: str, dep_ids: Iterable[str], action: str) -> str:
    return await queue_in(tx, eco, dep_ids, action, timeout_s=rt.settings.deps_timeout_s,
                          kick=rt.kick)


class Queued(msgspec.Struct, frozen=True, kw_only=True):
    items: list[deps.Dependency]
    run_ids: list[str]


async def add(rt: Runtime, eco: str, specs: list[str], remark: str | None = None) -> Queued:
    """Declare packages and queue their install (one run); SpecError for a bad spec."""
    kind = check_ecosystem(eco)
    for spec in specs:
        package(kind, spec)  # every spec checked before anything is written
    async with rt.db.write() as tx:
        dep_ids = await deps.declare(tx, kind, specs, now_ms(), remark=remark)
        run_id = await _queue(rt, tx, kind, dep_ids, "install")
        items = await deps.by_ids(tx, dep_ids)
    return Queued(items=items, run_ids=[run_id])


async def act(rt: Runtime, dep_ids: list[str], action: str) -> Queued:
    """Reinstall (`install`) or remove these packages: one run per ecosystem."""
    async with rt.db.write() as tx:
        found = await deps.by_ids(tx, dep_ids)
        by_eco: dict[str, list[str]] = {}
        for dep in found:
            by_eco.setdefault(dep.type, []).append(dep.id)
        if action == "install":
            for eco in by_eco:
                check_ecosystem(eco)
        run_ids = [await _queue(rt, tx, eco, group, action)
                   for eco, group in by_eco.items()]
        items = await deps.by_ids(tx, dep_ids)
    return Queued(items=items, run_ids=run_ids)


async def change(rt: Runtime, dep_id: str, spec: str, remark: str | None) -> Queued:
    """A new spec for a package (QingLong's PUT): saved, then installed."""
    async with rt.db.write() as tx:
        dep = await deps.get(tx, dep_id)
        pkg = package(check_ecosystem(dep.type), spec)
        if await deps.name_taken(tx, dep.type, pkg.name, dep.id):
            raise StillInstalled(f"{pkg.name} is declared already (another entry)")
        await deps.set_spec(tx, dep.id, pkg.spec, remark, now_ms())
        run_id = await _queue(rt, tx, dep.type, [dep.id], "install")
        items = await deps.by_ids(tx, [dep.id])
    return Queued(items=items, run_ids=[run_id])


async def rebuild(rt: Runtime, eco: str) -> str:
    """Rebuild an ecosystem's folder from the packages declared and installed."""
    kind = check_ecosystem(eco)
    async with rt.db.write() as tx:
        rows_ = await deps.installed(tx, kind)
        return await _queue(rt, tx, kind, [d.id for d in rows_], "rebuild")


async def forget(rt: Runtime, dep_ids: list[str]) -> None:
    """Drop rows that hold nothing (removed, failed, cancelled): StillInstalled else."""
    async with rt.db.write() as tx:
        for dep in await deps.by_ids(tx, dep_ids):
            if derived_status(dep) in HELD:
                raise StillInstalled(f"{dep.name} is {derived_status(dep)}: remove it first")
        await deps.forget(tx, dep_ids)


async def cancel(rt: Runtime, dep_ids: list[str]) -> list[str]:
    """Cancel the active runs of these packages (a run may hold other packages too)."""
    async with rt.db.read() as tx:
        found = await deps.by_ids(tx, dep_ids)
    cancelled = []
    for run_id in dict.fromkeys(d.last_run_id for d in found if d.run_status in
                                ("queued", "running") and d.last_run_id):
        try:
            await cancel_run(rt, run_id)
        except (RunTerminal, rows.Conflict):
            continue
        cancelled.append(run_id)
    return cancelled


# -- what the API shows beside the rows -------------------------------------------------

async def installed_versions(rt: Runtime, items: list[deps.Dependency]
                             ) -> dict[str, str | None]:
    """{row id: the version found in its folder, or None}: read from the folders, so
    a package that a rebuild left out or a wiped volume lost shows as missing."""
    work = rt.settings.work_path

    def read() -> dict[str, str | None]:
        py = dirs.python_versions(work) if any(d.type == "python" for d in items) else {}
        return {d.id: py.get(d.name) if d.type == "python" else dirs.node_version(work, d.name)
                for d in items}

    return await asyncio.to_thread(read)


async def environments(rt: Runtime) -> dict[str, Any]:
    work = rt.settings.work_path

    def read() -> dict[str, Any]:
        check = dirs.check_venv(work)
        major, minor = dirs.this_python()
        return {
            "python": {"state": check.state, "reason": check.reason,
                       "python": f"{major}.{minor}", "changing": dirs.changing(work, "python"),
                       "task_id": None},
            "node": {"available": npm_available(),
                     "state": "ok" if dirs.node_modules(work).is_dir() else "absent",
                     "changing": dirs.changing(work, "node"), "task_id": None},
        }

    out = await asyncio.to_thread(read)
    async with rt.db.read() as tx:
        for eco in ECOSYSTEMS:
            out[eco]["task_id"] = await deps.task_of(tx, eco)
    return out


def mirrors(rt: Runtime) -> dict[str, Any]:
    s = rt.settings
    return {"pip_index_url": redact_url(s.pip_index_url) or None,
            "pip_extra_index_urls": [redact_url(u) for u in s.pip_extra_index_urls.split()],
            "npm_registry": redact_url(s.npm_registry) or None,
            "timeout_s": s.deps_timeout_s}
