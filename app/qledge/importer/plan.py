"""The import plan's types and its one decision rule (pure; build.py builds
the items, db/imports.py applies them).

The rule (docs/migrating-from-qinglong.md):

* An item imported before (the mapping knows its QingLong id) is skipped when
  QingLong's side is unchanged, changed when only QingLong changed it, a
  conflict when both sides did, and skipped when it was deleted in qledge.
* A new item meeting a qledge object of the same identity (a task with the same
  command, an env of the same name, an alias, an app's client id or name, a
  channel's name, a file's path) is skipped when identical (and remembered),
  else a conflict: listed and skipped unless `on_conflict` says `rename` (create
  beside it under another name) or `replace` (overwrite it).

Fields hold secrets (env values, app secrets, credentials, channel URLs): a report
shows labels and reasons only.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable
from typing import Any

import msgspec

from .source import Source


class ImportFailed(Exception):
    """An apply failed and was undone: nothing was imported; the message says why."""


class Action(enum.StrEnum):
    CREATE = "create"
    CHANGE = "change"
    SKIP = "skip"
    CONFLICT = "conflict"


KINDS = ("cron", "env", "script", "subscription", "app", "channel", "dependency", "setting",
         "log")
CONFLICT_MODES = ("rename", "replace")


class Item(msgspec.Struct, frozen=True, kw_only=True):
    kind: str
    key: str  # the QingLong side's id (or path, or variable name): the mapping key
    label: str  # what the report shows: a name, never a secret
    action: Action
    reason: str = ""
    notes: list[str] = []
    target_id: str | None = None  # the qledge object changed, replaced or adopted
    fields: dict[str, Any] = {}  # what is written (secrets included: never shown)
    source_fp: str = ""  # fingerprint of what QingLong has
    written_fp: str = ""  # fingerprint of what qledge will hold (mapping: edit detection)
    record: bool = False  # remember the mapping when applied


class Mapped(msgspec.Struct, frozen=True, kw_only=True):
    target_id: str
    source_fp: str
    written_fp: str


class Target(msgspec.Struct, frozen=True, kw_only=True):
    """qledge's side, read once before planning (nothing here is shown)."""

    mapped: dict[str, Mapped] = {}  # "<kind>:<key>" → what an earlier import wrote
    objects: dict[str, dict[str, Any]] = {}  # id (a file: its path) → its fields now
    tasks: dict[str, list[str]] = {}  # command → task ids
    envs: dict[str, list[tuple[str, str]]] = {}  # name → [(env id, value)], in order
    aliases: dict[str, str] = {}  # subscription alias → id
    folders: list[str] = []  # top-level names in scripts/
    apps_by_name: dict[str, str] = {}
    apps_by_client: dict[str, str] = {}
    channels_by_name: dict[str, str] = {}
    channel_urls: dict[str, str] = {}  # URL → channel id
    log_files: list[str] = []  # destination files of --with-logs that exist


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    source: str  # "qinglong:<instance>": the mapping's namespace
    root: str
    apply: bool
    on_conflict: str | None
    items: list[Item]
    notes: list[str] = []


def skip(kind: str, key: str, label: str, reason: str, notes: list[str] | None = None) -> Item:
    return Item(kind=kind, key=key, label=label, action=Action.SKIP, reason=reason,
                notes=notes or [])


def fingerprint(fields: dict[str, Any]) -> str:
    data = msgspec.json.encode(fields, order="sorted")
    return hashlib.sha256(data).hexdigest()[:32]


def source_key(instance: str) -> str:
    """The mapping's namespace for one QingLong instance: its `system` app's client id
    (random, made at its first start, kept in the database and its backups)."""
    digest = hashlib.sha256(f"qinglong:{instance}".encode()).hexdigest()[:16]
    return f"qinglong:{digest}"


def decide(ctx: Ctx, *, kind: str, key: str, label: str, fields: dict[str, Any],
           notes: list[str], existing: str | None = None, clash: str = "",
           rename: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
           keep_on_change: tuple[str, ...] = ()) -> Item:
    """The action for one item (the rules in the module docstring)."""
    target: Target = ctx.target
    src_fp = fingerprint(fields)
    base: dict[str, Any] = {"kind": kind, "key": key, "label": label, "notes": notes,
                            "source_fp": src_fp}

    def write(action: Action, target_id: str | None, values: dict[str, Any],
              reason: str) -> Item:
        return Item(**base, action=action, target_id=target_id, fields=values, reason=reason,
                    written_fp=fingerprint(values), record=True)

    def change(target_id: str, reason: str) -> Item:
        """Overwrite `target_id` with `fields`, but for the keys kept as they are."""
        now = target.objects[target_id]
        kept = {k: now[k] for k in keep_on_change if k in now}
        return Item(**base, action=Action.CHANGE, target_id=target_id, reason=reason,
                    fields={k: v for k, v in fields.items() if k not in kept},
                    written_fp=fingerprint({**fields, **kept}), record=True)

    m = target.mapped.get(f"{kind}:{key}")
    if m is not None:
        if m.target_id not in target.objects:
            return Item(**base, action=Action.SKIP, target_id=m.target_id,
                        reason="imported before and deleted in qledge since: not re-created")
        if src_fp == m.source_fp:
            return Item(**base, action=Action.SKIP, target_id=m.target_id,
                        reason="imported before; unchanged in QingLong")
        if fingerprint(target.objects[m.target_id]) == m.written_fp:
            return change(m.target_id, "changed in QingLong since the last import")
        if ctx.on_conflict == "replace":
            return change(m.target_id, "changed on both sides since the last import:"
                          " qledge's version replaced (--on-conflict=replace)")
        return Item(**base, action=Action.CONFLICT, target_id=m.target_id,
                    reason="changed in QingLong and in qledge since the last import"
                           " (--on-conflict=replace takes QingLong's version)")
    if existing is not None:
        now = target.objects.get(existing)
        if now is not None and fingerprint(now) == src_fp:
            return Item(**base, action=Action.SKIP, target_id=existing, record=True,
                        written_fp=src_fp, reason="identical in qledge already")
        if ctx.on_conflict == "replace" and now is not None:
            return change(existing, f"{clash}: replaced (--on-conflict=replace)")
        if ctx.on_conflict == "rename" and rename is not None:
            return write(Action.CREATE, None, rename(fields),
                         f"{clash}: created beside it (--on-conflict=rename)")
        hint = "--on-conflict=rename or replace" if rename is not None else \
            "--on-conflict=replace"
        return Item(**base, action=Action.CONFLICT, target_id=existing,
                    reason=f"{clash} ({hint})")
    return write(Action.CREATE, None, fields, "")


class Ctx:
    """What the item builders share while one plan is made."""

    def __init__(self, source: Source, target: Target, on_conflict: str | None) -> None:
        self.source = source
        self.target = target
        self.on_conflict = on_conflict
        self.notes: list[str] = []
        self.claimed: set[str] = set()  # qledge ids an item of this plan already took

    def config(self, name: str) -> str:
        config = self.source.config
        return config.values.get(name, "").strip() if config else ""

    def claim(self, target_id: str | None) -> str | None:
        """`target_id` unless another item of this plan took it first."""
        if target_id is None or target_id in self.claimed:
            return None
        self.claimed.add(target_id)
        return target_id

    @staticmethod
    def free_name(name: str, taken: dict[str, str], limit: int = 100) -> str:
        """`name (QingLong)`, `name (QingLong 2)`, …: a name not in `taken`."""
        for n in range(1, 1000):
            suffix = " (QingLong)" if n == 1 else f" (QingLong {n})"
            candidate = name[:limit - len(suffix)] + suffix
            if candidate not in taken:
                return candidate
        raise ValueError("no free name")
