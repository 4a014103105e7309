"""Reading a QingLong data directory (2.12 and later) without writing to it.

The layout and columns are QingLong's (docs/migrating-from-qinglong.md lists them,
read from whyour/qinglong back/data/*.ts). The database is read by db/qinglong.py
(read-only, immutable: nothing in the source changes). Missing
optional columns (older 2.x releases added them one by one) read as their
QingLong default. Everything read is bounded; secrets (env values, app secrets,
subscription passwords, channel tokens) stay in these Structs and are never put
into an error message.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import msgspec

from ..db import qinglong
from . import _archive as _qinglong_archive
from ._config import ConfigUnreadable
from ._config import QlConfig as QlConfig
from ._config import read_config as read_config
from ._scripts import FileSet as FileSet
from ._scripts import SourceFile as SourceFile
from ._scripts import list_files

NEDB = ("crontab.db", "env.db", "app.db", "auth.db", "dependence.db")
_OLD_PATHS = re.compile(r"/ql/(scripts|config|log|db)/")


class SourceError(Exception):
    """The source cannot be imported; the message says why and what to do."""


class QlCron(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    name: str | None
    command: str
    schedule: str
    disabled: bool
    is_system: bool
    labels: list[str]
    sub_id: int | None
    extra_schedules: list[str]
    task_before: str | None
    task_after: str | None
    log_name: str | None
    log_path: str | None
    allow_multiple_instances: int | None
    work_dir: str | None


class QlEnv(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    name: str
    value: str
    remarks: str
    enabled: bool
    position: float


class QlSubscription(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    name: str
    type: str
    url: str
    branch: str
    alias: str
    schedule_type: str
    schedule: str
    interval: dict[str, Any] | None
    whitelist: str
    blacklist: str
    dependences: str
    extensions: str
    sub_before: str
    sub_after: str
    pull_type: str
    username: str | None
    password: str | None
    has_private_key: bool
    disabled: bool
    proxy: str
    auto_add: bool
    auto_delete: bool


class QlDependency(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    name: str
    type: int  # 0 nodejs, 1 python3, 2 linux
    remark: str


class QlApp(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    name: str
    client_id: str
    client_secret: str
    scopes: list[str]


class QlLogs(msgspec.Struct, frozen=True, kw_only=True):
    cron_id: int
    folder: str  # below log/
    files: list[str]  # newest first


class Source(msgspec.Struct, frozen=True, kw_only=True):
    root: str  # the data directory read
    instance: str  # stable key of this QingLong instance (its 'system' app)
    crons: list[QlCron]
    envs: list[QlEnv]
    subscriptions: list[QlSubscription]
    dependencies: list[QlDependency]
    apps: list[QlApp]
    notification: dict[str, Any] | None  # Auths(type='notification').info
    system: dict[str, Any]  # Auths(type='systemConfig').info
    config: QlConfig | None  # None: no config/ (a panel backup without it)
    scripts: FileSet | None  # None: no scripts/
    logs: list[QlLogs]


def unpack(archive: Path, into: Path) -> list[str]:
    """A backup .tgz unpacked into the empty private folder `into` (_archive.py);
    returns what was left out and why."""
    try:
        return _qinglong_archive.unpack(archive, into).skipped
    except _qinglong_archive.ArchiveError as exc:
        raise SourceError(f"{archive}: {exc}") from None


def locate(path: Path) -> Path:
    """The data directory at or below `path`, or SourceError naming what is missing."""
    if not path.exists():
        raise SourceError(f"{path} does not exist")
    if not path.is_dir():
        raise SourceError(f"{path} is not a directory (or a .tgz backup archive)")
    for root in (path, path / "data"):
        if (root / "db" / "database.sqlite").is_file():
            if root == path and (path / "shell").is_dir() and (path / "config").is_dir():
                raise SourceError(
                    f"{path} is a QingLong program folder from before 2.12 (its data is not in"
                    " a data/ folder): start QingLong 2.12 or later on it once (it moves the"
                    " data to /ql/data), then import /ql/data")
            return root
        db = root / "db"
        if db.is_dir() and any((db / n).is_file() for n in NEDB):
            raise SourceError(
                f"{db} holds NeDB files ({', '.join(n for n in NEDB if (db / n).is_file())}):"
                " data of QingLong 2.10 or older. Start QingLong 2.12 or later on it once"
                " (it converts them to db/database.sqlite), then import")
    raise SourceError(f"{path} is not a QingLong data directory: db/database.sqlite is missing"
                      " (QingLong 2.12 and later keep it in /ql/data/db/)")


def _json(raw: Any, default: Any) -> Any:
    if raw is None or raw == "":
        return default
    if not isinstance(raw, str):
        return raw
    try:
        value = json.loads(raw)
    except ValueError:
        return default
    return default if value is None else value


def _strings(raw: Any) -> list[str]:
    value = _json(raw, [])
    return [str(x) for x in value if isinstance(x, str | int)] if isinstance(value, list) \
        else []


def _cron(r: dict[str, Any]) -> QlCron:
    extra = _json(r.get("extra_schedules"), [])
    return QlCron(
        id=int(r["id"]), name=r.get("name"), command=str(r.get("command") or ""),
        schedule=str(r.get("schedule") or ""), disabled=r.get("isDisabled") == 1,
        is_system=r.get("isSystem") == 1, labels=_strings(r.get("labels")),
        sub_id=r.get("sub_id"),
        extra_schedules=[str(e.get("schedule")) for e in extra
                         if isinstance(e, dict) and e.get("schedule")] if isinstance(
                             extra, list) else [],
        task_before=r.get("task_before") or None, task_after=r.get("task_after") or None,
        log_name=r.get("log_name") or None, log_path=r.get("log_path") or None,
        allow_multiple_instances=r.get("allow_multiple_instances"),
        work_dir=r.get("work_dir") or None)


def _subscription(r: dict[str, Any]) -> QlSubscription:
    option = _json(r.get("pull_option"), {})
    option = option if isinstance(option, dict) else {}
    interval = _json(r.get("interval_schedule"), None)
    return QlSubscription(
        id=int(r["id"]), name=str(r.get("name") or r.get("alias") or ""),
        type=str(r.get("type") or ""), url=str(r.get("url") or ""),
        branch=str(r.get("branch") or ""), alias=str(r.get("alias") or ""),
        schedule_type=str(r.get("schedule_type") or "crontab"),
        schedule=str(r.get("schedule") or ""),
        interval=interval if isinstance(interval, dict) else None,
        whitelist=str(r.get("whitelist") or ""), blacklist=str(r.get("blacklist") or ""),
        dependences=str(r.get("dependences") or ""),
        extensions=str(r.get("extensions") or ""),
        sub_before=str(r.get("sub_before") or ""), sub_after=str(r.get("sub_after") or ""),
        pull_type=str(r.get("pull_type") or ""),
        username=str(option["username"]) if option.get("username") else None,
        password=str(option["password"]) if option.get("password") else None,
        has_private_key=bool(option.get("private_key")),
        disabled=r.get("is_disabled") == 1, proxy=str(r.get("proxy") or ""),
        auto_add=r.get("autoAddCron") != 0, auto_delete=r.get("autoDelCron") != 0)


def read_db(file: Path) -> dict[str, Any]:
    try:
        rows = qinglong.read(file)
        crons = [_cron(r) for r in rows["Crontabs"]]
        envs = [QlEnv(id=int(r["id"]), name=str(r.get("name") or ""),
                      value=str(r.get("value") or ""), remarks=str(r.get("remarks") or ""),
                      enabled=r.get("status") != 1, position=float(r.get("position") or 0))
                for r in rows["Envs"]]
        subs = [_subscription(r) for r in rows["Subscriptions"]]
        deps = [QlDependency(id=int(r["id"]), name=str(r.get("name") or ""),
                             type=int(r.get("type") or 0), remark=str(r.get("remark") or ""))
                for r in rows["Dependences"]]
        apps = [QlApp(id=int(r["id"]), name=str(r.get("name") or ""),
                      client_id=str(r.get("client_id") or ""),
                      client_secret=str(r.get("client_secret") or ""),
                      scopes=_strings(r.get("scopes"))) for r in rows["Apps"]]
        auths = {str(r.get("type")): _json(r.get("info"), {}) for r in rows["Auths"]}
    except qinglong.Unreadable as exc:
        raise SourceError(str(exc)) from None
    except (KeyError, TypeError, ValueError) as exc:
        raise SourceError(f"{file}: a row does not have QingLong's shape ({exc})") from None
    if any(_OLD_PATHS.search(c.command) for c in crons):
        raise SourceError(
            "crons name /ql/scripts/, /ql/config/… paths of QingLong before 2.12 (no data/"
            " folder): start QingLong 2.12 or later on this data once (it rewrites them),"
            " then import")
    system = next((a for a in apps if a.name == "system"), None)
    return {"crons": crons, "envs": envs, "subscriptions": subs, "dependencies": deps,
            "apps": apps, "instance": system.client_id if system else "",
            "notification": auths.get("notification") or None,
            "system": auths.get("systemConfig") or {}}


def _logs(root: Path, crons: list[QlCron], per_cron: int) -> list[QlLogs]:
    out = []
    for c in crons:
        folder = c.log_path.rsplit("/", 1)[0] if c.log_path and "/" in c.log_path else \
            (c.log_name if c.log_name and c.log_name != "/dev/null" else None)
        if not folder or folder.startswith("/") or ".." in folder.split("/"):
            continue
        path = root / "log" / folder
        try:
            names = sorted((e.name for e in os.scandir(path)
                            if e.name.endswith(".log") and e.is_file(follow_symlinks=False)),
                           reverse=True)
        except OSError:
            continue
        if names:
            out.append(QlLogs(cron_id=c.id, folder=folder, files=names[:per_cron]))
    return out


def _config(folder: Path) -> QlConfig | None:
    try:
        return read_config(folder)
    except ConfigUnreadable as exc:
        raise SourceError(str(exc)) from None


def _scripts(folder: Path) -> FileSet | None:
    """The scripts folder's files; None without one. The walk never follows a link (a
    link could lead anywhere on the machine), so a `scripts` that is one is named as
    such here rather than failing inside the walk as "Not a directory"."""
    try:
        st = folder.lstat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SourceError(f"{folder}: cannot be read ({exc.strerror})") from None
    if stat.S_ISLNK(st.st_mode):
        raise SourceError(
            f"{folder} is a symbolic link (to {os.readlink(folder)}): the import does not"
            " follow links out of the data folder. Mount or copy the real scripts folder"
            " at that place (e.g. `cp -rL`), then import again")
    if not stat.S_ISDIR(st.st_mode):
        raise SourceError(f"{folder} is not a folder: QingLong keeps its scripts in a"
                          " scripts/ folder; move that file away, then import again")
    try:
        return list_files(folder)
    except OSError as exc:
        raise SourceError(f"{folder}: cannot be read ({exc.strerror})") from None


def read(path: Path, *, with_logs: int = 0) -> Source:
    """Everything importable under `path` (a data directory), read-only."""
    root = locate(path)
    found = read_db(root / "db" / "database.sqlite")
    scripts = _scripts(root / "scripts")
    return Source(root=str(root), instance=found.pop("instance"), **found,
                  config=_config(root / "config"), scripts=scripts,
                  logs=_logs(root, found["crons"], with_logs) if with_logs > 0 else [])
