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
  beside it under another name), `replace` (overwrite it) or `skip` (keep qledge's,
  said as decided). A choice for one item (`choices`, "<kind>:<key>" → mode: the
  panel's select per conflict row) wins over `on_conflict` for that item.

Fields hold secrets (env values, app secrets, credentials, channel URLs): a report
shows labels and reasons only.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable
from typing import Any

import msgspec

from .said import Said, said
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
CONFLICT_MODES = ("rename", "replace", "skip")


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
    choices: list[str] = []  # a conflict: the modes that can decide it (CONFLICT_MODES)


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


NO_CLASH = Said("", "")


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
           notes: list[str], existing: str | None = None, clash: Said = NO_CLASH,
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
                        reason=said("DELETED_IN_QLEDGE", "imported before and deleted in"
                                    " qledge since: not re-created"))
        if src_fp == m.source_fp:
            return Item(**base, action=Action.SKIP, target_id=m.target_id,
                        reason=said("UNCHANGED", "imported before; unchanged in QingLong"))
        if fingerprint(target.objects[m.target_id]) == m.written_fp:
            return change(m.target_id, said("CHANGED_IN_QINGLONG", "changed in QingLong"
                                            " since the last import"))
        mode = ctx.mode(kind, key)
        if mode == "replace":
            return change(m.target_id, said("BOTH_CHANGED_REPLACED", "changed on both sides"
                          " since the last import: qledge's version replaced"))
        if mode == "skip":
            return Item(**base, action=Action.SKIP, target_id=m.target_id,
                        reason=said("BOTH_CHANGED_KEPT", "changed on both sides since the"
                                    " last import: qledge's version kept"))
        return Item(**base, action=Action.CONFLICT, target_id=m.target_id,
                    choices=["replace", "skip"],
                    reason=said("BOTH_CHANGED", "changed in QingLong and in qledge since the"
                                " last import (--on-conflict=replace takes QingLong's"
                                " version)"))
    if existing is not None:
        now = target.objects.get(existing)
        if now is not None and fingerprint(now) == src_fp:
            return Item(**base, action=Action.SKIP, target_id=existing, record=True,
                        written_fp=src_fp, reason=said("IDENTICAL", "identical in qledge"
                                                       " already"))
        mode = ctx.mode(kind, key)
        if mode == "replace" and now is not None:
            return change(existing, said("CLASH_REPLACED", f"{clash}: replaced",
                                         clash=clash.code, **clash.params))
        if mode == "rename" and rename is not None:
            return write(Action.CREATE, None, rename(fields),
                         said("CLASH_RENAMED", f"{clash}: created beside it",
                              clash=clash.code, **clash.params))
        if mode == "skip":
            return Item(**base, action=Action.SKIP, target_id=existing,
                        reason=said("CLASH_KEPT", f"{clash}: qledge's kept", clash=clash.code,
                                    **clash.params))
        hint = "--on-conflict=rename or replace" if rename is not None else \
            "--on-conflict=replace"
        return Item(**base, action=Action.CONFLICT, target_id=existing,
                    choices=["rename", "replace", "skip"] if rename else ["replace", "skip"],
                    reason=said("CLASH", f"{clash} ({hint})", clash=clash.code, **clash.params))
    return write(Action.CREATE, None, fields, "")


class Ctx:
    """What the item builders share while one plan is made."""

    def __init__(self, source: Source, target: Target, on_conflict: str | None,
                 choices: dict[str, str] | None = None) -> None:
        self.source = source
        self.target = target
        self.on_conflict = on_conflict
        self.choices = choices or {}
        self.notes: list[str] = []
        self.claimed: set[str] = set()  # qledge ids an item of this plan already took

    def mode(self, kind: str, key: str) -> str | None:
        """How a conflict of this item is decided: its own choice, else the default."""
        return self.choices.get(f"{kind}:{key}", self.on_conflict)

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
