"""SQL of `qledge import qinglong`: the state a plan is made against, the mapping of
QingLong ids to qledge objects, and applying a plan inside ONE transaction
(docs/migrating-from-qinglong.md; the plan itself is importer/build.py's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from .. import ids
from ..dependencies import spec as dependency_spec
from ..importer.plan import Action, Item, Mapped, Plan, Target
from ..importer.said import said
from ..importer.source import QlDependency
from ..tasks.writable import TaskFields, task_fields
from . import apps, dependencies, envs, notifications, subscriptions, tasks
from .interface import Tx

TASK_KEYS = ("name", "command", "schedule", "extra_schedules", "enabled", "labels", "overlap",
             "timeout_s")
SUB_KEYS = ("name", "type", "url", "branch", "alias", "schedule", "default_schedule",
            "whitelist", "blacklist", "dependences", "extensions", "auto_add", "auto_delete",
            "vanished", "sub_before", "sub_after", "enabled", "username", "secret")
_json = msgspec.json.Decoder()


async def mapped(tx: Tx, source: str) -> dict[str, Mapped]:
    """What earlier imports of this source wrote: {"<kind>:<key>": Mapped}."""
    rows = await tx.all("SELECT kind, source_key, target_id, source_fp, written_fp"
                        " FROM import_map WHERE source = ?", (source,))
    return {f"{r['kind']}:{r['source_key']}": Mapped(
        target_id=r["target_id"], source_fp=r["source_fp"], written_fp=r["written_fp"])
        for r in rows}


async def target(tx: Tx, source: str, *, files: dict[str, dict[str, Any]],
                 folders: list[str], log_files: list[str]) -> Target:
    """qledge's side for planning; `files` (path → fields) and the rest come from the
    caller, which reads the scripts folder and the logs volume."""
    objects: dict[str, dict[str, Any]] = dict(files)
    by_command: dict[str, list[str]] = {}
    for r in await tx.all("SELECT * FROM tasks ORDER BY num"):
        t = dict(r)
        objects[t["id"]] = {
            "name": t["name"], "command": t["command"], "schedule": t["schedule"],
            "extra_schedules": _json.decode(t["extra_schedules_json"]),
            "enabled": bool(t["enabled"]), "labels": _json.decode(t["labels_json"]),
            "overlap": t["overlap"], "timeout_s": t["timeout_s"]}
        by_command.setdefault(t["command"], []).append(t["id"])
    by_name: dict[str, list[tuple[str, str]]] = {}
    for r in await tx.all("SELECT * FROM envs ORDER BY position DESC, num"):
        objects[r["id"]] = {"name": r["name"], "value": r["value"], "remarks": r["remarks"],
                            "enabled": bool(r["enabled"])}
        by_name.setdefault(r["name"], []).append((r["id"], r["value"]))
    aliases = {}
    for r in await tx.all("SELECT * FROM subscriptions"):
        row = dict(r)
        row["extensions"] = _json.decode(row["extensions_json"])
        for flag in ("auto_add", "auto_delete", "enabled"):
            row[flag] = bool(row[flag])
        objects[row["id"]] = {k: row[k] for k in SUB_KEYS}
        aliases[row["alias"]] = row["id"]
    apps_by_name: dict[str, str] = {}
    apps_by_client: dict[str, str] = {}
    for r in await tx.all("SELECT id, name, client_id, secret_hash, scopes_json FROM apps"):
        objects[r["id"]] = {"name": r["name"], "client_id": r["client_id"],
                            "secret_hash": bytes(r["secret_hash"]).hex(),
                            "scopes": _json.decode(r["scopes_json"])}
        apps_by_name[r["name"]] = r["id"]
        apps_by_client[r["client_id"]] = r["id"]
    channels_by_name: dict[str, str] = {}
    channel_urls: dict[str, str] = {}
    for ch in await notifications.channels(tx):
        objects[ch.id] = {"name": ch.name, "url": ch.url, "enabled": ch.enabled}
        channels_by_name[ch.name] = ch.id
        channel_urls.setdefault(ch.url, ch.id)
    return Target(mapped=await mapped(tx, source), objects=objects, tasks=by_command,
                  envs=by_name, aliases=aliases, folders=folders, apps_by_name=apps_by_name,
                  apps_by_client=apps_by_client, channels_by_name=channels_by_name,
                  channel_urls=channel_urls, log_files=log_files)


async def dependency_items(tx: Tx, source: str, deps: list[QlDependency], now_ms: int, *,
                           apply: bool, npm: bool) -> list[Item]:
    """QingLong's nodejs (type 0) and python3 (type 1) dependencies as qledge's declared
    packages (docs/dependencies.md). Skipped, with the reason: one imported before, a
    name qledge already declares (its own row wins), a spec qledge refuses, a nodejs
    package where this image has no npm (`npm`: the -node variant's). With
    `apply` — inside the import's transaction — the new ones are declared and
    remembered; the caller queues their installs in the same transaction."""
    done = await mapped(tx, source)
    items: list[Item] = []
    seen: set[tuple[str, str]] = set()
    for dep in deps:
        if dep.type not in _DEP_TYPES:
            continue
        eco, ql_type = _DEP_TYPES[dep.type]
        key, label = str(dep.id), f"{dep.name[:100]} ({ql_type})"
        skip = Item(kind="dependency", key=key, label=label, action=Action.SKIP)
        if f"dependency:{key}" in done:
            items.append(msgspec.structs.replace(skip, reason=said("IMPORTED_BEFORE",
                                                                   "imported before")))
            continue
        if eco == "node" and not npm:
            items.append(msgspec.structs.replace(
                skip, reason=said("NEEDS_NODE", "not imported: nodejs packages need the"
                                  " image's -node variant")))
            continue
        spec = _qinglong_spec(eco, dep.name)
        try:
            pkg = dependency_spec.package(eco, spec)
        except dependency_spec.SpecError as exc:
            items.append(msgspec.structs.replace(skip, reason=said(
                "BAD_PACKAGE", f"not imported: {exc}")))
            continue
        if (eco, pkg.name) in seen or await dependencies.name_taken(tx, eco, pkg.name, ""):
            items.append(msgspec.structs.replace(
                skip, reason=said("DECLARED", "not imported: qledge already declares this"
                                  " package")))
            continue
        seen.add((eco, pkg.name))
        item = Item(kind="dependency", key=key, label=label, action=Action.CREATE,
                    fields={"ecosystem": eco}, record=True)
        if apply:
            [dep_id] = await dependencies.declare(tx, eco, [spec], now_ms,
                                                  remark=dep.remark[:200] or None)
            item = msgspec.structs.replace(item, target_id=dep_id)
            await remember(tx, source, item, dep_id, now_ms)
        items.append(item)
    return items


_DEP_TYPES = {0: ("node", "nodejs"), 1: ("python", "python3")}


def _qinglong_spec(eco: str, name: str) -> str:
    """QingLong also pins a Python package as `x=1` (pip wants `x==1`)."""
    name = name.strip()
    if eco == "python" and "=" in name and not any(op in name for op in ("==", ">=", "<=",
                                                                          "!=", "~=")):
        return name.replace("=", "==", 1)
    return name


async def remember(tx: Tx, source: str, item: Item, target_id: str, now_ms: int) -> None:
    """The mapping of one imported (or adopted) item: how a later import knows it."""
    await tx.execute(
        "INSERT INTO import_map (source, kind, source_key, target_id, source_fp,"
        " written_fp, imported_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (source, kind, source_key) DO UPDATE SET target_id ="
        " excluded.target_id, source_fp = excluded.source_fp, written_fp ="
        " excluded.written_fp, imported_at_ms = excluded.imported_at_ms",
        (source, item.kind, item.key, target_id, item.source_fp, item.written_fp, now_ms))


async def apply(tx: Tx, plan: Plan, now_ms: int, *,
                pull_task: Callable[[subscriptions.Subscription], TaskFields]
                ) -> dict[str, str]:
    """Write every create/change item of `plan` and remember the mapping, inside the
    caller's transaction; returns {"<kind>:<key>": qledge id} of what was written.
    Files (scripts, logs) are the caller's: here only their mapping is recorded."""
    written: dict[str, str] = {}
    for item in plan.items:
        if item.kind == "dependency":
            continue  # dependency_items's
        if item.action in (Action.CREATE, Action.CHANGE):
            target_id = await _write(tx, item, now_ms, pull_task)
            written[f"{item.kind}:{item.key}"] = target_id
        elif item.record and item.target_id is not None:
            target_id = item.target_id  # found identical: remembered, not written
        else:
            continue
        if item.record:
            await remember(tx, plan.source, item, target_id, now_ms)
    return written


async def _write(tx: Tx, item: Item, now: int,
                 pull_task: Callable[[subscriptions.Subscription], TaskFields]) -> str:
    f, new = item.fields, item.action is Action.CREATE
    if item.kind == "cron":
        if new:
            return (await tasks.create_task(tx, ids.uuid7(), task_fields({**f, "env": {}}),
                                            now)).id
        assert item.target_id is not None
        return (await tasks.update_task(tx, item.target_id, task_fields(f), now)).id
    if item.kind == "env":
        if new:
            return (await envs.create_env(tx, ids.uuid7(), f, now)).id
        assert item.target_id is not None
        return (await envs.update_env(tx, item.target_id, f, now)).id
    if item.kind == "subscription":
        return await _subscription(tx, item, now, pull_task)
    if item.kind == "app":
        values = {**f, "secret_hash": bytes.fromhex(f["secret_hash"])} \
            if "secret_hash" in f else dict(f)
        if new:
            return (await apps.create_app(tx, app_id=ids.uuid7(), now_ms=now, **values)).id
        assert item.target_id is not None
        old = await apps.app_secret(tx, str(f.get("client_id", "")))
        if old is not None and old == (item.target_id, values.get("secret_hash")):
            values.pop("client_id", None)  # the same credentials: keep its tokens
            values.pop("secret_hash", None)
        return (await apps.update_app(tx, item.target_id, values, now)).id
    if item.kind == "channel":
        if new:
            return (await notifications.add_channel(tx, f["name"], f["url"], f["enabled"],
                                                    now)).id
        assert item.target_id is not None
        return (await notifications.update_channel(tx, item.target_id, dict(f), now)).id
    if item.kind in ("script", "log"):
        return str(f.get("path", item.key))
    raise ValueError(f"cannot write an item of kind {item.kind!r}")


async def _subscription(tx: Tx, item: Item, now: int,
                        pull_task: Callable[[subscriptions.Subscription], TaskFields]
                        ) -> str:
    """A subscription and its pull task, as runtime/subscriptions.py keeps them."""
    if item.action is Action.CREATE:
        sub = await subscriptions.create(tx, ids.uuid7(), item.fields, now)
    else:
        assert item.target_id is not None
        sub = await subscriptions.update(tx, item.target_id, item.fields, now)
    fields = pull_task(sub)
    if sub.pull_task_id is not None:
        rows = await tx.all("SELECT id FROM tasks WHERE id = ?", (sub.pull_task_id,))
        if rows:
            await tasks.update_task(tx, sub.pull_task_id, fields, now)
            return sub.id
    task = await tasks.create_task(tx, ids.uuid7(), fields, now)
    await subscriptions.update(tx, sub.id, {"pull_task_id": task.id}, now)
    return sub.id
