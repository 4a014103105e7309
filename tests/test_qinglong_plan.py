"""The import plan on made-up QingLong data (pure: no database, no files)."""

from __future__ import annotations

from typing import Any

from qledge.importer import build as qinglong_import
from qledge.importer.plan import Action, Item, Mapped, Target, fingerprint
from qledge.importer.source import (
    FileSet,
    QlApp,
    QlConfig,
    QlCron,
    QlSubscription,
    Source,
    SourceFile,
)


def cron(id_: int, command: str, **kw: Any) -> QlCron:
    base: dict[str, Any] = dict(
        id=id_, name=f"c{id_}", command=command, schedule="0 8 * * *", disabled=False,
        is_system=False, labels=[], sub_id=None, extra_schedules=[], task_before=None,
        task_after=None, log_name=None, log_path=None, allow_multiple_instances=None,
        work_dir=None)
    return QlCron(**{**base, **kw})


def sub(id_: int, **kw: Any) -> QlSubscription:
    base: dict[str, Any] = dict(
        id=id_, name=f"s{id_}", type="public-repo", url="https://example.com/r.git",
        branch="", alias=f"alias{id_}", schedule_type="crontab", schedule="0 1 * * *",
        interval=None, whitelist="", blacklist="", dependences="", extensions="",
        sub_before="", sub_after="", pull_type="", username=None, password=None,
        has_private_key=False, disabled=False, proxy="", auto_add=True, auto_delete=True)
    return QlSubscription(**{**base, **kw})


def source(**kw: Any) -> Source:
    base: dict[str, Any] = dict(
        root="/ql/data", instance="abc", crons=[], envs=[], subscriptions=[],
        dependencies=[], apps=[], notification=None, system={}, config=None,
        scripts=FileSet(files=[SourceFile(path="hello.py", size=1, sha256="s", mode=0o644)],
                        skipped=[]), logs=[])
    return Source(**{**base, **kw})


def by_key(items: list[Item], kind: str) -> dict[str, Item]:
    return {i.key: i for i in items if i.kind == kind}


def test_commands_as_qinglong_ran_them() -> None:
    plan = qinglong_import.plan(source(crons=[
        cron(1, "hello.py now"), cron(2, "echo hi && date"), cron(3, "ql raw https://x/y.js"),
        cron(4, "ql update"), cron(5, "task x.js", is_system=True),
        cron(6, "task hello.py", schedule="61 * * * *"),
        cron(7, "task hello.py", allow_multiple_instances=1)]), Target())
    items = by_key(plan.items, "cron")
    assert items["1"].fields["command"] == "task hello.py now"
    assert items["2"].fields["command"] == "echo hi && date"
    assert "/bin/sh" in items["2"].notes[0]
    assert items["3"].action is Action.SKIP and "subscription" in items["3"].reason
    assert items["4"].action is Action.SKIP and "maintenance" in items["4"].reason
    assert items["5"].action is Action.SKIP
    assert items["6"].action is Action.SKIP and "not valid in qledge" in items["6"].reason
    assert items["1"].fields["overlap"] == "allow"  # NULL: QingLong never stopped one
    assert items["7"].fields["overlap"] == "allow"


def test_subscriptions_qledge_cannot_pull_are_skipped_with_the_reason() -> None:
    plan = qinglong_import.plan(source(subscriptions=[
        sub(1, pull_type="ssh-key", url="git@github.com:me/r.git", has_private_key=True),
        sub(2, schedule_type="interval", interval={"type": "weeks", "value": 1}),
        sub(3, schedule_type="interval", interval={"type": "minutes", "value": 90})]),
        Target())
    items = by_key(plan.items, "subscription")
    assert items["1"].action is Action.SKIP and "HTTPS" in items["1"].reason
    assert items["2"].fields["schedule"] is None and "on demand" in items["2"].notes[0]
    assert items["3"].fields["schedule"] == "@every 1h30m"


def test_apps_keep_their_credentials_and_lose_unknown_scopes() -> None:
    plan = qinglong_import.plan(source(apps=[
        QlApp(id=1, name="bot", client_id="cid", client_secret="sec",
              scopes=["crons", "system", "envs"]),
        QlApp(id=2, name="dash", client_id="cid2", client_secret="sec2",
              scopes=["dashboard"])]), Target())
    items = by_key(plan.items, "app")
    assert items["1"].fields["scopes"] == ["crons", "envs"]
    assert items["1"].notes == [
        "scopes without a qledge equivalent dropped: system",
        "crons, envs: running any code as the task user, every env value in reach"
        " (docs/security.md)"]  # as when an app is created (issue 35, finding 6)
    assert items["2"].action is Action.SKIP


def test_channels_map_where_apprise_can_and_say_so_where_not() -> None:
    config = QlConfig(values={"DD_BOT_TOKEN": "tok", "PUSHME_KEY": "k", "TG_BOT_TOKEN": "t"},
                      exported=[], computed=[], hooks={}, extra_sh=False)
    plan = qinglong_import.plan(source(
        notification={"type": "pushMe", "pushMeKey": "k"}, config=config), Target())
    items = by_key(plan.items, "channel")
    assert items["system"].action is Action.SKIP and "no apprise mapping" in \
        items["system"].reason
    assert items["DD_BOT_TOKEN"].fields["url"] == "dingtalk://tok/"
    assert items["PUSHME_KEY"].action is Action.SKIP
    assert "TG_BOT_TOKEN" not in items  # without TG_USER_ID it configures nothing


def test_the_decision_rule() -> None:
    src = source(crons=[cron(1, "task hello.py")])
    fields = qinglong_import.plan(src, Target()).items[0].fields
    fp = fingerprint(fields)
    mapped = {"cron:1": Mapped(target_id="t1", source_fp=fp, written_fp=fp)}
    edited = {**fields, "name": "edited"}

    def action(target: Target, on_conflict: str | None = None) -> tuple[Action, str]:
        item = qinglong_import.plan(src, target, on_conflict=on_conflict).items[0]
        return item.action, item.reason

    assert action(Target(mapped=mapped, objects={"t1": fields}))[1].startswith(
        "imported before; unchanged")
    assert action(Target(mapped=mapped))[1].startswith("imported before and deleted")
    moved = {"cron:1": Mapped(target_id="t1", source_fp="old", written_fp=fp)}
    assert action(Target(mapped=moved, objects={"t1": fields}))[0] is Action.CHANGE
    assert action(Target(mapped=moved, objects={"t1": edited}))[0] is Action.CONFLICT
    assert action(Target(mapped=moved, objects={"t1": edited}), "replace")[0] is \
        Action.CHANGE
    same = Target(tasks={"task hello.py": ["t2"]}, objects={"t2": fields})
    assert action(same) == (Action.SKIP, "identical in qledge already")
    other = Target(tasks={"task hello.py": ["t2"]}, objects={"t2": edited})
    assert action(other)[0] is Action.CONFLICT
    assert action(other, "rename")[0] is Action.CREATE
    assert action(other, "replace")[0] is Action.CHANGE


def test_qinglong_system_settings_are_named_not_shown() -> None:
    plan = qinglong_import.plan(source(system={
        "timezone": "Asia/Shanghai", "logRemoveFrequency": 7, "globalSshKey": "PRIVATE",
        "nodeMirror": ""}), Target())
    settings = {i.key: i for i in plan.items if i.kind == "setting"}
    assert set(settings) == {"login", "timezone", "logRemoveFrequency", "globalSshKey"}
    assert all("PRIVATE" not in i.label + i.reason for i in plan.items)
