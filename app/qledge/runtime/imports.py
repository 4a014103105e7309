"""`qledge import qinglong` (docs/migrating-from-qinglong.md): read a QingLong data
directory or panel backup, plan against this qledge, and — with `apply` — copy the
files in and write everything else in ONE transaction.

Order of an apply: every file is staged beside its destination and checked against
the plan; the staged files are renamed into place; then the transaction writes the
tasks, envs, subscriptions, apps, channels and the id mapping and checks the
environment every task would get; only then are the replaced contents dropped. Any
failure on the way (a file that changed, the database refusing, the environment
too large) undoes the copies and the transaction: nothing is half-imported.
Used by the CLI (its own Database, the worker may run meanwhile: its scheduler
reads new tasks within a minute) and by the panel's upload (http/imports.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import msgspec

from ..clock import now_ms
from ..db import errors, imports
from ..db.interface import Database
from ..importer import build as qinglong_import
from ..importer import source as qinglong_source
from ..importer.plan import KINDS, Action, ImportFailed, Plan, source_key
from ..importer.said import said
from ..launch import environment
from ..settings import Settings
from . import _import_files as files
from . import dependencies
from .lifecycle import Runtime
from .subscriptions import pull_task_fields

MAX_SCRIPT = 16 << 20


@contextlib.contextmanager
def opened(path: Path, scratch_parent: Path, notes: list[str]) -> Iterator[Path]:
    """`path` itself (a folder), or a .tgz unpacked into a private scratch folder that
    is removed afterwards (what the archive held but was not unpacked goes to `notes`)."""
    if path.is_dir() or not path.exists():
        yield path
        return
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b":
            raise qinglong_source.SourceError(
                f"{path} is neither a QingLong data directory nor a .tgz backup archive")
    scratch = scratch_parent / f".import-{secrets.token_hex(6)}"
    scratch.mkdir(mode=0o700)
    try:
        skipped = qinglong_source.unpack(path, scratch)
        notes += [said("NOT_UNPACKED", f"not unpacked from the archive: {s}",
                       name=s.split(": ", 1)[0]) for s in skipped]
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


async def run(db: Database, conf: Settings, path: Path, *, apply: bool = False,
              on_conflict: str | None = None, with_logs: int = 0,
              shown: str | None = None, choices: dict[str, str] | None = None) -> Plan:
    """The plan (applied when `apply`); its root reads `shown`, else the folder read
    (an archive: its path). Raises SourceError, ImportFailed."""
    notes: list[str] = []
    with opened(path, conf.data_path, notes) as folder:
        source = await asyncio.to_thread(qinglong_source.read, folder, with_logs=with_logs)
        plan = await _plan(db, conf, source, apply, on_conflict, choices)
        if apply:
            plan = await _apply(db, conf, source, plan)
        root = shown or (plan.root if folder == path else str(path))
    if source.config is None:
        notes.append(said("NO_CONFIG", "config/ is not in this source (a panel backup made"
                          " without 'config'): config.sh's notification variables and"
                          " settings, and the global hooks, are not imported"))
    return msgspec.structs.replace(plan, root=root, notes=[*notes, *plan.notes])


async def upload(rt: Runtime, archive: Path, *, apply: bool, on_conflict: str | None,
                 with_logs: int, choices: dict[str, str] | None = None) -> Plan:
    """The panel's import of an uploaded archive, in the worker (http/imports.py)."""
    plan = await run(rt.db, rt.settings, archive, apply=apply, on_conflict=on_conflict,
                     with_logs=with_logs, shown="the uploaded archive", choices=choices)
    if plan.apply:
        rt.scheduler.wake()
    return plan


async def _plan(db: Database, conf: Settings, source: qinglong_source.Source, apply: bool,
                on_conflict: str | None, choices: dict[str, str] | None = None) -> Plan:
    key = source_key(source.instance)
    async with db.read() as tx:
        known = await imports.mapped(tx, key)
    dests = {f.path for f in source.scripts.files} if source.scripts else set()
    dests |= {n for n in ("task_before.sh", "task_after.sh")
              if source.config and n in source.config.hooks}
    dests |= {m.target_id for k, m in known.items() if k.startswith("script:")}
    logs = [f"qinglong/{g.folder}/{n}" for g in source.logs for n in g.files]
    found = await asyncio.to_thread(files.existing, conf.scripts_path, sorted(dests))
    folders = await asyncio.to_thread(files.top_level, conf.scripts_path)
    present = await asyncio.to_thread(files.present, conf.logs_path, logs)
    deps = [d for d in source.dependencies if d.type in (0, 1)]
    async with db.read() as tx:
        target = await imports.target(tx, key, files=found, folders=folders, log_files=present)
        dep_items = await imports.dependency_items(tx, key, deps, now_ms(), apply=False,
                                                   npm=dependencies.npm_available())
    plan = qinglong_import.plan(source, target, apply=apply, on_conflict=on_conflict,
                                choices=choices)
    items = sorted([*plan.items, *dep_items], key=lambda i: KINDS.index(i.kind))
    return msgspec.structs.replace(plan, items=items)


def _stage(source: qinglong_source.Source, plan: Plan, scripts: files.Copies,
           logs: files.Copies) -> list[str]:
    root, notes = Path(source.root), list[str]()
    modes = {f.path: f.mode for f in source.scripts.files} if source.scripts else {}
    for item in plan.items:
        if item.action not in (Action.CREATE, Action.CHANGE):
            continue
        if item.kind == "script":
            src = root / item.key if item.key.startswith("config/") else root / "scripts" / \
                item.key
            mode = 0o755 if modes.get(item.key, 0) & 0o111 else 0o644
            scripts.stage(item.fields["path"], src, sha256=item.fields["sha256"], mode=mode,
                          replace=item.action is Action.CHANGE, limit=MAX_SCRIPT)
        elif item.kind == "log":
            folder = item.fields["folder"]
            for name in item.fields["files"]:
                src = root / "log" / folder / name
                if os.lstat(src).st_size > files.MAX_LOG:
                    notes.append(said("LOG_TOO_LARGE", f"log/{folder}/{name}: larger than 16"
                                      " MiB, not copied", name=f"log/{folder}/{name}"))
                    continue
                logs.stage(f"qinglong/{folder}/{name}", src, sha256=None, mode=0o400,
                           replace=False, limit=files.MAX_LOG)
    return notes


async def _apply(db: Database, conf: Settings, source: qinglong_source.Source,
                 plan: Plan) -> Plan:
    scripts = await asyncio.to_thread(files.Copies, conf.scripts_path)
    logs = await asyncio.to_thread(files.Copies, conf.logs_path)
    deps = [d for d in source.dependencies if d.type in (0, 1)]
    try:
        notes = await asyncio.to_thread(_stage, source, plan, scripts, logs)
        await asyncio.to_thread(scripts.place)
        await asyncio.to_thread(logs.place)
        async with db.write() as tx:
            now = now_ms()
            await imports.apply(tx, plan, now, pull_task=pull_task_fields)
            declared = await imports.dependency_items(tx, plan.source, deps, now, apply=True,
                                                      npm=dependencies.npm_available())
            for eco in ("python", "node"):
                # One install run per ecosystem, in this transaction: the worker's
                # dispatcher starts it (at the latest its next supervision round).
                dep_ids = [i.target_id for i in declared if i.target_id is not None
                           and i.fields.get("ecosystem") == eco]
                if dep_ids:
                    await dependencies.queue_job(tx, eco, dep_ids, "install",
                                                 conf.deps_timeout_s)
            await environment.verify(tx, conf.work_path)
    except BaseException as exc:
        await asyncio.to_thread(scripts.undo)
        await asyncio.to_thread(logs.undo)
        if isinstance(exc, errors.IntegrityViolation):
            raise ImportFailed(f"nothing was imported: the database refused a write ({exc});"
                               " did qledge change while importing? Run it again") from None
        if isinstance(exc, (files.CopyFailed, OSError, *errors.StorageError,
                            environment.EnvironmentTooLarge)):
            raise ImportFailed(f"nothing was imported: {exc}") from None
        raise
    finally:
        for copies in (scripts, logs):
            await asyncio.to_thread(copies.cleanup)
            copies.close()
    return msgspec.structs.replace(plan, notes=[*plan.notes, *notes])
