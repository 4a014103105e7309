"""What `qledge import qinglong` would do with each thing QingLong has (pure).

`plan(source, target)` builds one `Item` per cron, env, script file, subscription,
app, notification channel, dependency, setting and (with --with-logs) log folder;
plan.py holds the types and the decision rule, db/imports.py applies a
plan. How each QingLong field maps is in docs/migrating-from-qinglong.md.
"""

from __future__ import annotations

import shlex
from hashlib import sha256
from typing import Any

from .. import interval, taskform
from ..envs.spec import validate_env
from ..fields import FieldError
from ..notifications import qinglong as qinglong_notify
from ..subscriptions.spec import DEFAULT_EXTENSIONS
from ..subscriptions.spec import validate as validate_subscription
from ..tasks.spec import validated as validate_task
from ..tasks.writable import given
from . import _items
from ._items import timeout_s
from .plan import (
    CONFLICT_MODES,
    Action,
    Ctx,
    Item,
    Plan,
    Target,
    decide,
    skip,
    source_key,
)
from .said import said
from .source import QlCron, Source

TASK_KEYS = ("name", "command", "schedule", "extra_schedules", "enabled", "labels", "overlap",
             "timeout_s")
RENAMED = " (QingLong)"
# QingLong's own settings in config.sh (sample/config.sample.sh): not variables for scripts.
QL_SETTINGS = frozenset((
    "AutoDelCron", "AutoAddCron", "DefaultCronRule", "RepoFileExtensions", "ProxyUrl",
    "CpuWarn", "MemoryWarn", "DiskWarn", "CommandTimeoutTime", "RandomDelay",
    "RandomDelayFileExtensions", "RandomDelayIgnoredMinutes", "EnableExtraShell",
    "AutoStartBot", "BotRepoUrl"))


def plan(source: Source, target: Target, *, apply: bool = False,
         on_conflict: str | None = None, choices: dict[str, str] | None = None) -> Plan:
    """The plan for importing `source` into a qledge whose state is `target`; `choices`
    decides single conflicts ("<kind>:<key>" → a mode), `on_conflict` the others."""
    for mode in [on_conflict, *(choices or {}).values()]:
        if mode is not None and mode not in CONFLICT_MODES:
            raise ValueError(f"on_conflict must be one of {', '.join(CONFLICT_MODES)}")
    ctx = Ctx(source, target, on_conflict, choices)
    items = [*_crons(ctx), *_envs(ctx), *_scripts(ctx), *_subscriptions(ctx), *_items.apps(ctx),
             *_items.channels(ctx), *_items.linux_dependencies(ctx), *_items.settings(ctx),
             *_items.logs(ctx)]
    return Plan(source=source_key(source.instance), root=source.root, apply=apply,
                on_conflict=on_conflict, items=items, notes=ctx.notes)


DISABLED = said("DISABLED", "disabled in QingLong: imported disabled")


def refused(exc: FieldError) -> str:
    """A rule of qledge's refuses the item: the rule and field say it in any language."""
    return said("NOT_VALID", f"not valid in qledge: {exc.message}", rule=exc.code,
                field=exc.field)


# -- crons → tasks -----------------------------------------------------------------------

def _command(c: QlCron, ctx: Ctx, notes: list[str]) -> str:
    command = c.command.strip()
    if taskform.is_task_form(command):
        try:
            form = taskform.parse(command)
        except taskform.TaskFormError as exc:
            notes.append(said("TASK_FORM_REFUSED", "qledge will refuse this task form at run"
                              f" time: {exc.message}", reason=exc.reason.value))
            return command
        if form.timeout_s is not None:
            notes.append(said("M_TIMEOUT", "the -m timeout stays in the command (qledge's"
                              " run deadline)"))
        files = {f.path for f in ctx.source.scripts.files} if ctx.source.scripts else set()
        if ctx.source.scripts is not None and form.path not in files:
            notes.append(said("SCRIPT_NOT_IMPORTED", "its script is not among the files"
                              " imported"))
        return command
    try:
        words = shlex.split(command)
    except ValueError:
        words = []
    files = {f.path for f in ctx.source.scripts.files} if ctx.source.scripts else set()
    if words[:1] and words[0] in files:
        notes.append(said("TASK_PREFIX", "QingLong ran it as `task …`: imported with the"
                          " `task ` prefix"))
        return f"task {command}"
    named = _named_scripts(words, files)
    if named:
        # QingLong ran every other command from its scripts folder (its task.sh cds
        # there first); qledge runs a shell command in the work folder, one level up,
        # where `bash backup.sh` finds nothing (exit 127). Going there first keeps the
        # command exactly as written, relative paths and all.
        notes.append(said("IN_SCRIPTS", f"names {', '.join(named[:3])} in scripts/: imported"
                          f" as `{_IN_SCRIPTS} …` (QingLong ran it from its scripts folder)",
                          names=", ".join(named[:3]), prefix=_IN_SCRIPTS))
        command = command.replace(QL_SCRIPTS, "./")
        if "\n" in command:
            return f"cd scripts || exit 1\n{command}"
        return f"{_IN_SCRIPTS} {command}"
    notes.append(said("SHELL_COMMAND", "a shell command: qledge runs it with /bin/sh in its"
                      " work folder (QingLong ran it through `task` from scripts/)"))
    return command


QL_SCRIPTS = "/ql/data/scripts/"  # QingLong's scripts folder, as its crons spell it
_IN_SCRIPTS = "cd scripts &&"  # the work folder's scripts/ (qledge runs commands there)


def _named_scripts(words: list[str], files: set[str]) -> list[str]:
    """The imported scripts a shell command's words name (`bash backup.sh`,
    `python3 ./tools/util.py`, `node /ql/data/scripts/greet.js`)."""
    named = []
    for word in words:
        path = word.removeprefix(QL_SCRIPTS) if word.startswith(QL_SCRIPTS) else \
            word.removeprefix("./")
        if path in files and path not in named:
            named.append(path)
    return named


def _crons(ctx: Ctx) -> list[Item]:
    out = []
    timeout = timeout_s(ctx)
    subs = {s.id: s.alias for s in ctx.source.subscriptions}
    for c in ctx.source.crons:
        key, label = str(c.id), (c.name or c.command)[:120]
        words = c.command.split()
        if c.is_system:
            out.append(skip("cron", key, label, said("SYSTEM_CRON", "a QingLong system cron")))
            continue
        if words[:1] == ["ql"]:
            why = said("QL_REPO", "a legacy `ql repo`/`ql raw` pull: add it as a subscription") \
                if words[1:2] in (["repo"], ["raw"]) else said(
                    "QL_COMMAND", "a QingLong maintenance command (`ql …`): no equivalent")
            out.append(skip("cron", key, label, why))
            continue
        notes: list[str] = [DISABLED] if c.disabled else []
        command = _command(c, ctx, notes)
        if c.task_before or c.task_after:
            notes.append(said("CRON_HOOKS", "per-cron task_before/task_after not imported"
                              " (qledge runs scripts/task_before.sh and task_after.sh around"
                              " every task)"))
        if c.work_dir:
            notes.append(said("WORK_DIR", "work_dir not imported (a `task` script runs in its"
                              " own folder)"))
        if c.log_name == "/dev/null":
            notes.append(said("NO_LOG_KEPT", "QingLong kept no log (log_name /dev/null);"
                              " qledge keeps each run's"))
        if c.sub_id in subs:
            notes.append(said("FROM_SUBSCRIPTION", f"from subscription {subs[c.sub_id]}: its"
                              " first pull adopts this task", alias=subs[c.sub_id]))
        # QingLong: 0 stops the running instance first (replace), 1 runs both; NULL
        # (crons older than the column) never stopped anything.
        overlap = "replace" if c.allow_multiple_instances == 0 else "allow"
        fields: dict[str, Any] = {
            "name": (c.name or "").strip() or command.splitlines()[0][:200],
            "command": command, "schedule": c.schedule, "extra_schedules": c.extra_schedules,
            "enabled": not c.disabled, "labels": c.labels, "overlap": overlap,
            "timeout_s": timeout}
        try:
            checked = given(validate_task(fields))
        except FieldError as exc:
            out.append(skip("cron", key, label, refused(exc), notes))
            continue
        # The plan's item holds plain values (fingerprinted, shown); db/imports.py
        # writes them as TaskFields (tasks/writable.py task_fields).
        fields = {k: checked.get(k) for k in TASK_KEYS}
        existing = next((t for t in ctx.target.tasks.get(command, []) if t not in ctx.claimed),
                        None)
        item = decide(ctx, kind="cron", key=key, label=label, fields=fields, notes=notes,
                      existing=existing,
                      clash=said("SAME_COMMAND", "a qledge task runs the same command"),
                      rename=lambda f: {**f, "name": f["name"][:200 - len(RENAMED)] + RENAMED})
        ctx.claim(item.target_id)
        out.append(item)
    return out


# -- envs --------------------------------------------------------------------------------

def _envs(ctx: Ctx) -> list[Item]:
    """In QingLong's order (position, larger first), so &-joined values stay identical;
    then the variables config.sh exports to every task (not its settings or
    notification variables), below them."""
    rows = [(str(e.id), e.name, e.value, e.remarks, e.enabled)
            for e in sorted(ctx.source.envs, key=lambda e: (-e.position, e.id))]
    config = ctx.source.config
    for name in config.exported if config is not None else []:
        assert config is not None
        if name not in QL_SETTINGS and name not in qinglong_notify.NAMES and \
                name not in config.computed and config.values[name]:
            rows.append((f"config.sh:{name}", name, config.values[name],
                         "from QingLong config.sh", True))
    out = []
    for key, name, value, remarks, enabled in rows:
        label = f"{name} ({remarks[:60]})" if remarks else name
        fields = {"name": name, "value": value, "remarks": remarks, "enabled": enabled}
        try:
            validate_env(fields)
        except FieldError as exc:
            out.append(skip("env", key, label, refused(exc)))
            continue
        mine = [(i, v) for i, v in ctx.target.envs.get(name, []) if i not in ctx.claimed]
        same = next((i for i, v in mine if v == value), None)
        existing = same or (mine[0][0] if mine else None)
        clash = said("ENV_SAME_VALUE", f"{name} holds this value in qledge already (remarks or"
                     " state differ)", name=name) if same else said(
            "ENV_OTHER_VALUE", f"qledge has {name} with another value: adding this one"
            " changes the &-joined value", name=name)
        item = decide(ctx, kind="env", key=key, label=label, fields=fields,
                      notes=[] if enabled else [DISABLED],
                      existing=existing, clash=clash, rename=lambda f: f)
        ctx.claim(item.target_id)
        out.append(item)
    return out


# -- scripts ------------------------------------------------------------------------------

def _scripts(ctx: Ctx) -> list[Item]:
    """Files of scripts/, then QingLong's global hooks (config/task_*.sh → scripts/)."""
    src, out = ctx.source, []
    if src.scripts is None:
        out.append(skip("script", "scripts/", "scripts/", said(
            "NO_SCRIPTS", "not in this source (a panel backup made without 'scripts')")))
    else:
        for f in src.scripts.files:
            out.append(_file(ctx, f.path, f.path, f.sha256))
        out += [skip("script", p, p, why) for p, why in src.scripts.skipped]
    hooks = src.config.hooks if src.config else {}
    for name in ("task_before.sh", "task_after.sh"):
        if name in hooks:
            out.append(_file(ctx, f"config/{name}", name,
                             sha256(hooks[name].encode()).hexdigest()))
    for name in ("task_before.js", "task_before.py"):
        if name in hooks:
            out.append(skip("script", f"config/{name}", f"config/{name}", said(
                "HOOK_KIND", "no equivalent: qledge's hooks are scripts/task_before.sh and"
                " task_after.sh")))
    return out


def _file(ctx: Ctx, key: str, dest: str, sha: str) -> Item:
    """A file to copy to scripts/`dest` (its mode comes from the source at copy time)."""
    fields = {"path": dest, "sha256": sha}
    existing = dest if dest in ctx.target.objects else None

    def renamed(f: dict[str, Any]) -> dict[str, Any]:
        stem, dot, ext = dest.rpartition(".")
        path = f"{stem}.qinglong.{ext}" if dot and "/" not in ext else f"{dest}.qinglong"
        return {**f, "path": path}

    return decide(ctx, kind="script", key=key, label=dest, fields=fields, notes=[],
                  existing=existing,
                  clash=said("OTHER_FILE", "a different file is there in qledge"),
                  rename=renamed)


# -- subscriptions ---------------------------------------------------------------------

def _subscriptions(ctx: Ctx) -> list[Item]:
    out = []
    default = ctx.config("DefaultCronRule") or None
    repo_ext = ctx.config("RepoFileExtensions").split() or list(DEFAULT_EXTENSIONS)
    for s in ctx.source.subscriptions:
        key, label = str(s.id), f"{s.name} ({s.alias})"
        notes: list[str] = [DISABLED] if s.disabled else []
        if s.pull_type == "ssh-key" or s.has_private_key or not s.url.startswith(
                ("http://", "https://")):
            out.append(skip("subscription", key, label, said(
                "SSH_SUBSCRIPTION", "SSH URL or key: qledge pulls over HTTPS only; re-create"
                " it with an HTTPS URL and a token")))
            continue
        schedule = s.schedule or None
        if s.schedule_type == "interval":
            try:
                schedule = interval.from_qinglong((s.interval or {}).get("type"),
                                                  (s.interval or {}).get("value"))
            except interval.IntervalError as exc:
                schedule = None
                notes.append(said("INTERVAL_UNREAD", f"its interval is not one qledge reads"
                                  f" ({exc}): pulls only on demand"))
        if s.proxy:
            notes.append(said("PROXY", "proxy not imported (qledge pulls directly)"))
        if default is None:
            notes.append(said("NO_DEFAULT_SCHEDULE", "scripts without a cron header get no"
                              " task (QingLong gave them a random daily time; set"
                              " default_schedule)"))
        fields: dict[str, Any] = {
            "name": s.name, "type": s.type, "url": s.url, "branch": s.branch or None,
            "alias": s.alias, "schedule": schedule, "default_schedule": default,
            "whitelist": s.whitelist, "blacklist": s.blacklist, "dependences": s.dependences,
            "extensions": s.extensions.split() or repo_ext, "auto_add": s.auto_add,
            "auto_delete": s.auto_delete, "vanished": "delete", "sub_before": s.sub_before,
            "sub_after": s.sub_after, "enabled": not s.disabled,
            "username": (s.username or "git") if s.password else None, "secret": s.password}
        try:
            fields = validate_subscription(fields)
        except FieldError as exc:
            out.append(skip("subscription", key, label, refused(exc), notes))
            continue
        existing = ctx.target.aliases.get(s.alias)
        mapped = f"subscription:{key}" in ctx.target.mapped
        if existing is None and not mapped and s.alias in ctx.target.folders:
            mode = ctx.mode("subscription", key)
            if mode == "skip":
                out.append(skip("subscription", key, label, said(
                    "FOLDER_KEPT", f"scripts/{s.alias}/ exists in qledge and is no"
                    " subscription's: kept, the subscription not imported", alias=s.alias),
                    notes))
                continue
            if mode != "replace":
                out.append(Item(kind="subscription", key=key, label=label, notes=notes,
                                action=Action.CONFLICT, choices=["replace", "skip"],
                                reason=said("FOLDER_EXISTS", f"scripts/{s.alias}/ exists in"
                                            " qledge and is no subscription's; its pulls"
                                            " would replace it (--on-conflict=replace)",
                                            alias=s.alias)))
                continue
            notes.append(said("TAKES_OVER_FOLDER", f"takes over scripts/{s.alias}/",
                              alias=s.alias))
        item = decide(ctx, kind="subscription", key=key, label=label, fields=fields,
                      notes=notes, existing=existing,
                      clash=said("SAME_ALIAS", "a qledge subscription has this alias"),
                      keep_on_change=("alias", "type"))
        out.append(item)
    return out
