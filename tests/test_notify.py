"""The pure parts of notifications: rules, messages, quiet hours, redaction, the
scripts' credential, QingLong's env names; the after-commit hook; the shipped helpers."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
import pytest

from qledge.db.sqlite import Database
from qledge.model import Run, RunStatus, Trigger
from qledge.notifications import digest, transitions, words
from qledge.notifications import qinglong as qinglong_notify
from qledge.notifications import rules as notify
from qledge.scripts import ship as shipped_scripts
from qledge.settings import Settings
from qledge.tasks.writable import TaskFields

RUN = Run(id="0190c2e0-0000-7000-8000-000000000001", task_id="t", trigger=Trigger.MANUAL,
          status=RunStatus.FAILED, version=3, event_seq=6, cancel_reason=None,
          cancel_requested_at_ms=None, created_at_ms=0, started_at_ms=1_000,
          finished_at_ms=75_500, exit_code=2, reason_code="EXITED")


def decide(rules: notify.Rules | None, run: Run = RUN, *, recovered: bool = False,
           before: int = 0) -> notify.Decision | None:
    return notify.decide(rules, run=run, task_name="backup", task_num=7, recovered=recovered,
                         failures_before=before, base_url="http://pi:5700/")


def with_status(status: RunStatus) -> Run:
    import msgspec

    return msgspec.structs.replace(RUN, status=status)


def test_defaults_notify_failures_not_successes_or_cancels() -> None:
    rules = notify.Rules()
    for status in (RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.LOST, RunStatus.BLOCKED):
        assert decide(rules, with_status(status)) is not None, status
    for status in (RunStatus.SUCCEEDED, RunStatus.CANCELLED):
        assert decide(rules, with_status(status)) is None, status
    ok = with_status(RunStatus.SUCCEEDED)
    assert decide(rules, ok, recovered=True) is None
    assert decide(notify.Rules(recovered=True), ok, recovered=True) is not None
    assert decide(None) is None  # a muted task


def test_message_says_what_the_issue_lists() -> None:
    d = decide(notify.Rules(log_lines=5), recovered=True)
    assert d is not None and d.title == "[qledge] backup: failed" and d.log_lines == 5
    assert d.body.splitlines() == [
        "Task: backup (#7)", "Status: failed",
        "Reason: the command exited on its own (EXITED)", "Exit code: 2 (a usage error)",
        "Duration: 1m14s",
        "Recovered after a restart: the result was read from the run's receipt by the"
        " next worker.",
        f"Run: http://pi:5700/#/runs/{RUN.id}"]


def test_streak_sends_one_message_at_the_nth_failure() -> None:
    for mode in ("transitions", "every_run"):
        rules = notify.Rules(streak=3, mode=mode)
        sent = [before for before in range(6) if decide(rules, before=before) is not None]
        assert sent == [2], mode
        d = decide(rules, before=2)
        assert d is not None and d.title == "[qledge] backup: failed, 3 times in a row"
        assert d.level == "failure"


def replay(rules: notify.Rules, outcomes: str) -> list[notify.Decision]:
    """The messages a task's runs produce, `outcomes` one letter a run (f: failed,
    s: succeeded), counting failures in a row as runtime/notifier.py does."""
    out, streak = [], 0
    for letter in outcomes:
        run = with_status(RunStatus.FAILED if letter == "f" else RunStatus.SUCCEEDED)
        d = decide(rules, run, before=min(streak, transitions.threshold(rules.streak)))
        if d is not None:
            out.append(d)
        streak = streak + 1 if letter == "f" else 0
    return out


def test_transitions_by_default_fail_fail_fail_succeed_is_two_messages() -> None:
    got = replay(notify.Rules(), "fffs")
    assert [(d.title, d.level) for d in got] == [
        ("[qledge] backup: failed", "failure"), ("[qledge] backup: recovered", "success")]
    assert "the failing spell is over" in got[1].body
    assert replay(notify.Rules(), "sssfsfffs") == replay(notify.Rules(), "fsfffs")
    assert len(replay(notify.Rules(), "sssfsfffs")) == 4  # two spells, two recoveries
    # a spell under the streak was never announced: its end is not news either
    assert [d.title for d in replay(notify.Rules(streak=3), "ffsfffs")] == [
        "[qledge] backup: failed, 3 times in a row", "[qledge] backup: recovered"]
    # the per-run behaviour is still a rule away
    assert len(replay(notify.Rules(mode="every_run"), "fffs")) == 3
    assert replay(notify.Rules(), "ssss") == []


def test_transitions_are_pure_state_changes() -> None:
    ch = transitions.change
    assert ch("transitions", failure=True, failures_before=0, streak=0) is \
        transitions.Change.FAILING
    assert ch("transitions", failure=True, failures_before=1, streak=0) is None
    assert ch("transitions", failure=False, failures_before=1, streak=0) is \
        transitions.Change.RECOVERED
    assert ch("transitions", failure=False, failures_before=0, streak=0) is None
    assert ch("every_run", failure=True, failures_before=7, streak=0) is \
        transitions.Change.FAILING
    assert ch("every_run", failure=False, failures_before=7, streak=0) is None


def test_a_message_in_chinese_with_its_words_and_link() -> None:
    run = msgspec.structs.replace(RUN, status=RunStatus.TIMED_OUT, reason_code="TIMEOUT",
                                  exit_code=None)
    d = notify.decide(notify.Rules(), run=run, task_name="种豆得豆", task_num=7,
                      recovered=False, failures_before=0, base_url="http://pi:5700/",
                      language="zh-CN")
    assert d is not None and d.title == "[qledge] 种豆得豆：超时" and d.level == "failure"
    assert d.body.splitlines() == [
        "任务：种豆得豆（#7）", "状态：超时", "原因：运行超过任务的超时时间，已被停止 (TIMEOUT)",
        "退出码：无", "耗时：1m14s",
        f"运行：http://pi:5700/#/runs/{RUN.id}"]
    assert "timed_out" not in d.body and "timed_out" not in d.title
    assert words.exit_code("zh-CN", 127) == "127 (找不到命令)"


def test_every_reason_has_its_chinese() -> None:
    assert set(words.REASONS_ZH) == set(notify.REASONS)
    for table in (words.STATUS, words.EXIT_CODES, words.TEXT):
        assert set(table["en"]) == set(table["zh-CN"])
    assert set(notify.RULE_STATUSES) <= set(words.STATUS["zh-CN"])


@pytest.mark.parametrize(("settings", "field"), [
    (notify.Settings(language="fr"), "language"),
    (notify.Settings(base_url="ftp://pi"), "base_url"),
    (notify.Settings(base_url="http://pi/?q=1"), "base_url"),
    (notify.Settings(base_url="http://user:pw@pi"), "base_url"),
    (notify.Settings(base_url="http://pi:99999"), "base_url"),
])
def test_bad_settings_name_their_field(settings: notify.Settings, field: str) -> None:
    with pytest.raises(notify.RuleError) as err:
        notify.check_settings(settings)
    assert err.value.field == field
    notify.check_settings(notify.Settings(language="zh-CN", base_url="https://pi.lan:5700/ql"))


def test_digest_lists_every_held_item_with_its_link() -> None:
    items = [digest.Item(title=f"[qledge] t{i}: failed", run_id=f"r{i}",
                         notify_type="failure") for i in range(55)]
    d = digest.compose(items, language="en", limit=5, window_s=600, link="http://pi/")
    lines = d.body.splitlines()
    assert d.title == "[qledge] 55 more notifications" and d.notify_type == "failure"
    assert lines[0] == "Held back by the rate limit (5 messages per 10 minutes on this channel):"
    assert lines[1] == "• t0: failed — http://pi/#/runs/r0"
    assert len(lines) == 1 + digest.MAX_ITEMS + 1 and lines[-1].startswith("… and 5 more")
    zh = digest.compose(items[:2], language="zh-CN", limit=5, window_s=600, link="")
    assert zh.title == "[qledge] 另有 2 条通知" and zh.body.splitlines()[2] == "• t1: failed — r1"
    assert digest.hold_until(1_000, 600, None) == 601_000
    assert digest.hold_until(1_000, 600, 400) == 600_400
    assert digest.budget(5, 7) == 0 and digest.budget(5, 2) == 3


def test_task_override_changes_only_what_it_sets() -> None:
    base = notify.Rules(log_lines=3)
    eff = notify.effective(base, notify.RulesPatch(statuses=("succeeded",)))
    assert eff == notify.Rules(statuses=("succeeded",), log_lines=3)
    assert notify.effective(base, notify.RulesPatch(muted=True)) is None
    assert notify.effective(base, None) is base


@pytest.mark.parametrize(("rules", "field"), [
    (notify.Rules(statuses=("failed", "cancelled")), "statuses"),
    (notify.Rules(streak=-1), "streak"),
    (notify.Rules(log_lines=notify.MAX_LOG_LINES + 1), "log_lines"),
    (notify.Rules(quiet_start="22:00"), "quiet_start"),
    (notify.Rules(quiet_start="22:00", quiet_end="7:00"), "quiet_end"),
])
def test_bad_rules_name_their_field(rules: notify.Rules, field: str) -> None:
    with pytest.raises(notify.RuleError) as err:
        notify.check(rules)
    assert err.value.field == field


def _at(hour: int, minute: int) -> tuple[int, time.struct_time]:
    lt = time.struct_time((2026, 1, 1, hour, minute, 30, 3, 1, 0))
    return 1_000_000_000_000 + 30_000, lt


def test_quiet_hours_hold_messages_until_the_window_ends() -> None:
    rules = notify.Rules(quiet_start="22:30", quiet_end="07:00")
    now, lt = _at(23, 0)
    assert notify.quiet_until(rules, now, lt) == now - 30_000 + 8 * 3600_000
    now, lt = _at(6, 59)
    assert notify.quiet_until(rules, now, lt) == now - 30_000 + 60_000
    now, lt = _at(12, 0)
    assert notify.quiet_until(rules, now, lt) is None
    assert notify.quiet_until(notify.Rules(), now, lt) is None
    day = notify.Rules(quiet_start="09:00", quiet_end="17:00")
    assert notify.quiet_until(day, now, lt) == now - 30_000 + 5 * 3600_000


def test_redaction_removes_every_token_part_of_a_url() -> None:
    url = "tgram://123456:AAbbCCdd/987654?token=zzzz9999&x=1"
    text = f"failed to post to {url}: 403 for bot 123456:AAbbCCdd chat 987654 zzzz9999"
    out = notify.redact(text, notify.secrets_of(url))
    for part in ("AAbbCCdd", "987654", "zzzz9999", "123456"):
        assert part not in out, out
    assert out.startswith("failed to post to ***")


def test_script_credential_names_its_attempt_and_cannot_be_forged() -> None:
    key = notify.script_key("admin-token-" + "x" * 30)
    attempt = "0190c2e0-0000-7000-8000-0000000000aa"
    token = notify.script_token(key, attempt)
    assert notify.script_attempt(key, token) == attempt
    other = "0190c2e0-0000-7000-8000-0000000000ab"
    assert notify.script_attempt(key, other + token[len(attempt):]) is None
    assert notify.script_attempt(notify.script_key("y" * 40), token) is None
    assert notify.script_attempt(key, token[:-1]) is None
    assert notify.script_attempt(key, "not-an-id.abc") is None


def test_qinglong_env_names_map_to_apprise_urls() -> None:
    env = {
        "PUSH_KEY": "SCT123", "BARK_PUSH": "https://bark.example.com/DevKey/",
        "TG_BOT_TOKEN": "123:abc", "TG_USER_ID": "42",
        "DD_BOT_TOKEN": "ddtok", "DD_BOT_SECRET": "SECx", "QYWX_KEY": "wxkey",
        "PUSH_PLUS_TOKEN": "0123456789abcdef0123456789abcdef", "GOTIFY_URL": "https://g.example.com:8443/base",
        "GOTIFY_TOKEN": "gt", "NTFY_TOPIC": "alerts", "FSKEY": "fs",
        "WEBHOOK_URL": "http://hook.local:8080/in",
        "SMTP_SERVER": "smtp.example.com:465", "SMTP_SSL": "true",
        "SMTP_EMAIL": "me@example.com", "SMTP_PASSWORD": "pw",
        "SMTP_EMAIL_TO": "a@example.com;b@example.com",
    }
    urls = qinglong_notify.urls(env)
    assert urls == {
        "PUSH_KEY": "schan://SCT123",
        "BARK_PUSH": "barks://bark.example.com/DevKey",
        "TG_BOT_TOKEN": "tgram://123:abc/42",
        "DD_BOT_TOKEN": "dingtalk://SECx@ddtok/",
        "QYWX_KEY": "wecombot://wxkey",
        "PUSH_PLUS_TOKEN": "pushplus://0123456789abcdef0123456789abcdef",
        "GOTIFY_URL": "gotifys://g.example.com:8443/base/gt",
        "NTFY_TOPIC": "ntfys://ntfy.sh/alerts",
        "FSKEY": "feishu://fs",
        "WEBHOOK_URL": "json://hook.local:8080/in",
        "SMTP_SERVER": "mailtos://me%40example.com:pw@smtp.example.com:465"
                       "?from=me%40example.com&to=a%40example.com%2Cb%40example.com&mode=ssl",
    }
    assert {name for name, _ in qinglong_notify.TABLE} == set(urls)
    import apprise

    for name, url in urls.items():  # every URL is one apprise accepts
        assert apprise.Apprise().add(url), (name, url)
    assert qinglong_notify.urls({"BARK_PUSH": "DevKey"}) == {
        "BARK_PUSH": "barks://api.day.app/DevKey"}
    assert qinglong_notify.urls({"TG_BOT_TOKEN": "123:abc"}) == {}  # no chat id: no channel


async def test_metrics_count_a_result_once_committed_never_a_rolled_back_one(
        db: Database) -> None:
    import msgspec

    from qledge import ids, transitions
    from qledge.db import runs, tasks
    from qledge.runtime.metrics import Metrics

    metrics = Metrics(db)
    async with db.write() as tx:
        task = await tasks.create_task(
            tx, ids.uuid7(), TaskFields(name="t", command="true", env={}, labels=[]), 1)
        run = await runs.create_run(tx, ids.uuid7(), task.id, Trigger.MANUAL, 2)
    tr = transitions.cancel_queued(run, 3)
    tr = msgspec.structs.replace(tr, run=msgspec.structs.replace(
        tr.run, status=RunStatus.FAILED, reason_code="SOMETHING_NEW", exit_code=1))
    counted = metrics.runs.labels("failed", "other")
    async with db.write() as tx:  # the consumer's way: one savepoint per receipt
        with pytest.raises(RuntimeError):
            async with tx.savepoint():
                await runs.apply(tx, run, tr, 3)
                raise RuntimeError("this receipt's completion is undone")
    assert counted._value.get() == 0
    async with db.write() as tx:
        await runs.apply(tx, run, tr, 3)
    assert counted._value.get() == 1  # an unknown reason code is "other", not a new label


def test_helpers_are_shipped_once_and_never_over_a_users_file(tmp_path: Path) -> None:
    scripts, work = tmp_path / "scripts", tmp_path
    scripts.mkdir()
    (scripts / "sendNotify.js").write_text("// mine\n")
    assert shipped_scripts.ship(scripts, work) == ["notify.py"]
    assert (scripts / "sendNotify.js").read_text() == "// mine\n"
    assert "def send(title" in (scripts / "notify.py").read_text()
    (scripts / "notify.py").unlink()
    (scripts / "sendNotify.js").unlink()
    assert shipped_scripts.ship(scripts, work) == []  # deleted by the user: stays deleted
    assert not (scripts / "notify.py").exists()


async def test_disk_pressure_hold_entered_and_left_are_queued_once_each(
        db: Database, conf: Settings) -> None:
    import asyncio

    import msgspec

    from qledge.db import notifications as q
    from qledge.runtime.diskwatch import MIB
    from qledge.runtime.notifier import Notifier
    from qledge.runtime.retention import DiskKeeper
    from test_diskpressure import FakeFs

    notifier = Notifier(db, logs_root=conf.logs_path, base_url="", interval_s=60,
                        retry_base_s=1, max_tries=3, max_age_s=60, started_at_ms=0)
    profile = msgspec.structs.replace(conf.profile_limits, low_water_mb=100, low_water_pct=0)
    keeper = DiskKeeper(db=db, settings=conf, profile=profile, wake_dispatcher=lambda: None,
                        on_pressure=notifier.pressure_changed)
    keeper.disk._statvfs = fs = FakeFs(total=1000 * MIB, free=900 * MIB)
    async with db.write() as tx:
        await q.add_channel(tx, "hook", "json://127.0.0.1:9/x", True, 1)

    async def titles() -> list[str]:
        await asyncio.gather(*notifier._bg)
        async with db.read() as tx:
            return [m.title for m in reversed(await q.recent(tx, 10))]

    assert await keeper.may_spawn() is None
    fs.free = 50 * MIB
    assert await keeper.may_spawn() == "DISK_PRESSURE"
    assert await keeper.may_spawn() == "DISK_PRESSURE"  # still held: no second message
    fs.free = 900 * MIB
    assert await keeper.may_spawn() is None
    assert await titles() == ["[qledge] disk pressure: new runs are held",
                              "[qledge] disk pressure is over: runs resume"]
    async with db.write() as tx:
        await q.set_rules(tx, q.GLOBAL, notify.Rules(disk_pressure=False), 2)
    fs.free = 50 * MIB
    assert await keeper.may_spawn() == "DISK_PRESSURE"
    assert len(await titles()) == 2  # the rule is off


async def test_prune_drops_only_old_finished_messages(db: Database) -> None:
    from qledge.db import notifications as q

    async with db.write() as tx:
        ids = {}
        for name, created in (("old-sent", 10), ("old-given-up", 11), ("old-pending", 12),
                              ("new-sent", 500)):
            (ids[name],) = await q.enqueue(tx, channel_ids=["c"], kind="run", run_id=None,
                                           task_id=None, title=name, body="", log_lines=0,
                                           due_at_ms=created, now_ms=created)
        await q.mark_sent(tx, ids["old-sent"], 20)
        await q.mark_failed(tx, ids["old-given-up"], "boom", None, 20)
        await q.mark_sent(tx, ids["new-sent"], 501)
        assert await q.prune(tx, 100, 256) == 2
    async with db.read() as tx:
        left = {m.title: m.state for m in await q.recent(tx, 10)}
        assert left == {"old-pending": "pending", "new-sent": "sent"}
        assert await q.counts(tx) == {"pending": 1, "sent": 1, "given_up": 0, "held": 0,
                                      "digested": 0}


async def test_the_outbox_row_commits_with_the_result_and_never_blocks_it(
        db: Database, conf: Settings) -> None:
    import msgspec

    from qledge import ids, transitions
    from qledge.db import notifications as q
    from qledge.db import runs, tasks
    from qledge.runtime.notifier import Notifier

    Notifier(db, logs_root=conf.logs_path, base_url="", interval_s=60, retry_base_s=1,
             max_tries=3, max_age_s=60, started_at_ms=0)
    async with db.write() as tx:
        await q.add_channel(tx, "hook", "json://127.0.0.1:9/x", True, 1)
        task = await tasks.create_task(
            tx, ids.uuid7(), TaskFields(name="t", command="true", env={}, labels=[]), 1)

    async def fail_one(boom: bool = False) -> str:
        async with db.write() as tx:
            run = await runs.create_run(tx, ids.uuid7(), task.id, Trigger.MANUAL, 2)
        tr = transitions.cancel_queued(run, 3)
        tr = msgspec.structs.replace(tr, run=msgspec.structs.replace(
            tr.run, status=RunStatus.FAILED, reason_code="EXITED", exit_code=1))
        async with db.write() as tx:
            await runs.apply(tx, run, tr, 3)
            if boom:
                raise RuntimeError("the completion fails after the listener ran")
        return run.id

    async def rows(run_id: str) -> list[str]:
        async with db.read() as tx:
            return [m.title for m in await q.recent(tx, 10, run_id=run_id)]

    run_id = await fail_one()
    assert await rows(run_id) == ["[qledge] t: failed"]
    with pytest.raises(RuntimeError):  # the result is rolled back: so is its message
        await fail_one(boom=True)
    async with db.read() as tx:
        assert await tx.one("SELECT 1 FROM notify_outbox WHERE run_id NOT IN"
                            " (SELECT id FROM runs WHERE status = 'failed')") is None
    async with db.write() as tx:  # a rules row this version cannot read
        await tx.execute("INSERT INTO notify_rules VALUES ('', '{\"nope\": 1}', 1)")
    run_id = await fail_one()
    async with db.read() as tx:
        assert (await runs.get_run(tx, run_id)).status is RunStatus.FAILED
    assert await rows(run_id) == []


async def test_a_message_due_in_quiet_hours_waits_for_their_end(
        db: Database, conf: Settings) -> None:
    import msgspec

    from qledge import ids, transitions
    from qledge.clock import now_ms
    from qledge.db import notifications as q
    from qledge.db import runs, tasks
    from qledge.runtime.notifier import Notifier

    Notifier(db, logs_root=conf.logs_path, base_url="", interval_s=60, retry_base_s=1,
             max_tries=3, max_age_s=60, started_at_ms=0)
    now = now_ms()
    lt = time.localtime(now / 1000)
    minute = lt.tm_hour * 60 + lt.tm_min
    start, end = (minute - 60) % 1440, (minute + 90) % 1440
    rules = notify.Rules(quiet_start=f"{start // 60:02d}:{start % 60:02d}",
                         quiet_end=f"{end // 60:02d}:{end % 60:02d}")
    async with db.write() as tx:
        await q.set_rules(tx, q.GLOBAL, rules, 1)
        await q.add_channel(tx, "hook", "json://127.0.0.1:9/x", True, 1)
        task = await tasks.create_task(
            tx, ids.uuid7(), TaskFields(name="t", command="true", env={}, labels=[]), 1)
        run = await runs.create_run(tx, ids.uuid7(), task.id, Trigger.MANUAL, 2)
    tr = transitions.cancel_queued(run, now)
    tr = msgspec.structs.replace(tr, run=msgspec.structs.replace(
        tr.run, status=RunStatus.LOST, reason_code="RECOVERY_BOOT_CHANGED"))
    async with db.write() as tx:
        await runs.apply(tx, run, tr, now)
    async with db.read() as tx:
        (msg,) = await q.recent(tx, 5, run_id=run.id)
        assert await q.due(tx, now + 3600_000, 10) == []  # held past the next hour
    wait = msg.next_at_ms - now
    assert 89 * 60_000 <= wait <= 90 * 60_000, wait
    assert msg.due_at_ms == msg.next_at_ms


async def test_rate_limit_holds_past_the_limit_and_digests_them_once(
        db: Database, conf: Settings) -> None:
    """The sender's choice on a real database: 8 rows for one channel, 2 for another, in
    a window that allows 5: 5 + 2 go now, 3 are held until the window's first send
    leaves it, then ONE digest carries the three (marked digested, none dropped). A
    sign-in message is never held. Rows due at a quiet window's end meet the same limit."""
    from qledge.db import notifications as q
    from qledge.runtime.notifier import Notifier

    notifier = Notifier(db, logs_root=conf.logs_path, base_url="http://pi", interval_s=60,
                        retry_base_s=1, max_tries=3, max_age_s=60, started_at_ms=0)
    t0 = 1_000_000

    async def choose(now: int) -> list[q.Message]:
        async with db.write() as tx:
            picked = await notifier._limited(tx, await q.due(tx, now, 100), now)
            for m in picked:  # what _send does after a delivery
                await q.mark_sent(tx, m.id, now)
            return picked

    async with db.write() as tx:
        await q.set_rules(tx, q.GLOBAL, notify.Rules(rate_limit=5, rate_window_s=60), 1)
        for i in range(8):
            await q.enqueue(tx, channel_ids=["a"], kind="run", run_id=f"r{i}", task_id="t",
                            title=f"[qledge] t{i}: failed", body="", log_lines=0,
                            due_at_ms=t0 + i, now_ms=t0 + i, notify_type="failure")
        await q.enqueue(tx, channel_ids=["b", "b"], kind="run", run_id="rb", task_id="t",
                        title="[qledge] b: failed", body="", log_lines=0, due_at_ms=t0,
                        now_ms=t0)
        await q.enqueue(tx, channel_ids=["a"], kind="signin", run_id=None, task_id=None,
                        title="[qledge] new sign-in to the panel", body="", log_lines=0,
                        due_at_ms=t0, now_ms=t0)
    first = await choose(t0 + 10)
    assert sorted((m.channel_id, m.kind) for m in first) == sorted(
        [("a", "run")] * 5 + [("b", "run")] * 2 + [("a", "signin")])
    async with db.read() as tx:
        held = await q.held(tx, "a")
        assert [m.run_id for m in held] == ["r5", "r6", "r7"]
        assert {m.next_at_ms for m in held} == {t0 + 10 + 60_000}
        assert (await q.counts(tx))["held"] == 3
    assert await choose(t0 + 30_000) == []  # nothing is due: the held wait for the window
    # a row come due at a quiet window's end, inside the same window: held as well
    async with db.write() as tx:
        await q.enqueue(tx, channel_ids=["a"], kind="run", run_id="r8", task_id="t",
                        title="[qledge] t8: failed", body="", log_lines=0,
                        due_at_ms=t0 + 40_000, now_ms=t0 + 35_000)
    assert await choose(t0 + 40_000) == []
    (dig,) = await choose(t0 + 10 + 60_000)
    assert (dig.kind, dig.channel_id, dig.notify_type) == ("digest", "a", "failure")
    assert dig.title == "[qledge] 4 more notifications"
    assert dig.body.splitlines()[1:] == [f"• t{i}: failed — http://pi/#/runs/r{i}"
                                         for i in (5, 6, 7, 8)]
    async with db.read() as tx:
        assert await q.held(tx, "a") == []
        rows = await q.recent(tx, 100)
        assert sorted(m.run_id for m in rows if m.digest_id == dig.id) == ["r5", "r6", "r7",
                                                                           "r8"]
        counts = await q.counts(tx)
        assert (counts["digested"], counts["held"], counts["pending"]) == (4, 0, 0)
        assert len(rows) == 8 + 2 + 1 + 1 + 1  # every message kept, and the digest
