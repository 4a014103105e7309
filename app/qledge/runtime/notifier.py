"""The notification outbox: rows written with the result, a sender loop delivering them.

* `on_terminal` (a `Database.on_terminal` listener) matches a run that just
  became terminal against the rules and writes one outbox row per enabled
  channel in that same transaction: the message commits with the result or
  not at all.
* The sender loop (explicit start/stop, bounded rounds: at most `BATCH` rows a
  round) delivers through apprise in a process of its own per send
  (launch/notify_send.py: its memory capped, killed at SEND_TIMEOUT_S whatever the
  URL's `cto`/`rto` say), OUTBOX_SENDS at a time, and marks each row sent, or
  schedules a retry with exponential backoff, or gives it up after `max_tries`
  sends or `max_age_s` past its due time, keeping the (redacted) error. Delivery
  is at-least-once: a worker killed between a send and its mark sends that row
  once more after the restart.
* Fleet mode: the outbox is shared, so only the scheduler lease's holder sends
  (runtime/leader.py); every node still queues its own results' messages. A
  handover mid-send may send a row twice — the same at-least-once as a kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec

from .. import failpoints
from ..clock import now_ms
from ..db import envs, rows, tasks
from ..db import notifications as q
from ..db.interface import Database, Tx
from ..launch import logs, notify_send
from ..model import Run, RunStatus
from ..notifications import digest, transitions, words
from ..notifications import qinglong as qinglong_notify
from ..notifications import rules as notify
from .leader import Leader
from .loop import PeriodicLoop, settle

log = logging.getLogger("qledge.notify")

BATCH = 16
LOG_TAIL_BYTES = 8192
KEEP_DONE_MS = 7 * 24 * 3600 * 1000
SEND_TIMEOUT_S = 30.0  # per send, set here: the URL's own cto/rto never extend it
# Sends at once: the outbox's, and the API's test messages apart from them, so a
# receiver that hangs holds one slot until its deadline and no other kind of work.
OUTBOX_SENDS = 2
TEST_SENDS = 2
# A script's message also goes to the services QingLong envs describe: channel
# "env:NAME" (notify/qinglong.py), its URL built from the envs at send time.
ENV_CHANNEL = "env:"
PRUNE_EVERY = 20  # rounds; sent and given-up rows are kept KEEP_DONE_MS for the API
PRUNE_PAGE = 256
# Fleet mode: rows were queued (on any node); the lease holder sends them.
NOTIFY_CHANNEL = "qledge_notify"


class SendResult(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool
    error: str | None = None


async def deliver(url: str, title: str, body: str, timeout_s: float,
                  notify_type: str = "info") -> SendResult:
    """One message to one apprise URL, in a process of its own within `timeout_s`
    (launch/notify_send.py). The error text is redacted of the URL's secrets."""
    ok, error = await notify_send.send(url, title, body, timeout_s, notify_type)
    return SendResult(ok=ok, error=error)


def _new_pool() -> ThreadPoolExecutor:
    # URL checks and log tails only (quick, bounded): no send ever waits here.
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="notify")


def _parses(url: str) -> bool:
    import apprise

    notify_send.quiet(apprise.logger)
    return bool(apprise.Apprise().add(url))


async def env_of(tx: Tx, task_id: str | None) -> dict[str, str]:
    """The environment a task's run gets from envs: the enabled envs, then its own."""
    env = await envs.global_env(tx)
    if task_id is not None:
        with contextlib.suppress(rows.NotFound):
            env = {**env, **(await tasks.get_task(tx, task_id)).env}
    return env


class Notifier:
    def __init__(self, db: Database, *, logs_root: Path, base_url: str, interval_s: float,
                 retry_base_s: float, max_tries: int, max_age_s: float,
                 started_at_ms: int, leader: Leader | None = None) -> None:
        self.db = db
        # Fleet mode: send only while this node holds the lease (None: always).
        self.leader = leader
        self.logs_root = logs_root
        self.base_url = base_url
        self.retry_base_s = retry_base_s
        self.max_tries = max_tries
        self.max_age_s = max_age_s
        self.started_at_ms = started_at_ms
        self.sent = 0
        self.failures = 0
        self.given_up = 0
        self._bg: set[asyncio.Task[None]] = set()
        self._pool = _new_pool()
        self.send_timeout_s = SEND_TIMEOUT_S
        self._outbox_slots = asyncio.Semaphore(OUTBOX_SENDS)
        self._test_slots = asyncio.Semaphore(TEST_SENDS)
        # Stopping cancels a round still sending after the usual bound: an unmarked
        # row is sent again by the next worker (at least once), shutdown stays quick.
        self.loop = PeriodicLoop("notifier", interval_s, self._round)
        db.on_terminal(self.on_terminal)
        if leader is not None:
            leader.on_change(self._leadership)

    def _leadership(self, leading: bool) -> None:
        if leading:  # the rows the previous sender left go out now
            self.loop.poke()

    def start(self) -> None:
        self.loop.start()
        self.loop.poke()  # rows left by the previous worker go out now

    async def stop(self) -> None:
        await settle(self._bg, 5.0)
        await self.loop.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = _new_pool()  # for a start after this stop (threads start on use)

    def link_base(self, settings: notify.Settings) -> str:
        """The run links' base: the setting, else QLEDGE_NOTIFY_BASE_URL."""
        return settings.base_url or self.base_url

    # -- in the terminal transaction ---------------------------------------------

    async def _queued(self, tx: Tx) -> None:
        """Rows queued in this transaction: the sender looks at its commit — here, and in
        a fleet on the lease holder, which may be another node (NOTIFY on commit)."""
        tx.on_commit(self.loop.poke)
        await tx.notify(NOTIFY_CHANNEL)

    async def on_terminal(self, tx: Tx, old: Run, new: Run, now: int) -> None:
        if new.status is RunStatus.CANCELLED:
            return
        chans = await q.channels(tx, enabled_only=True)
        if not chans:  # the completion path pays this one read, nothing more
            return
        # A message must never cost a result: whatever goes wrong here (a rules row
        # this version cannot read, say) is undone alone and the completion commits.
        try:
            async with tx.savepoint():
                await self._queue_run(tx, new, now, chans)
        except Exception:
            log.exception("run %s: its notification could not be queued", new.id)

    async def _queue_run(self, tx: Tx, new: Run, now: int, chans: list[q.Channel]) -> None:
        brief = await q.task_brief(tx, new.task_id)
        # A hidden task is a debug Run from the script editor: the user is watching it.
        if brief is None or await q.task_hidden(tx, new.task_id):
            return
        rules = notify.effective(await q.global_rules(tx), await q.task_rules(tx, new.task_id))
        if rules is None:
            return
        recovered = (not (new.reason_code or "").startswith("RECOVERY_")
                     and await q.attempt_started_before(tx, new.id, self.started_at_ms))
        # The task's state before this run, read in the transaction that ends it: two
        # completions of one task never both see "the first failure".
        before = 0
        if rules.mode == "transitions" or (rules.streak and notify.is_failure(new.status)):
            before = await q.failures_before(tx, new.task_id, new.id,
                                             transitions.threshold(rules.streak))
        settings = await q.settings(tx)
        decision = notify.decide(rules, run=new, task_name=brief[0], task_num=brief[1],
                                 recovered=recovered, failures_before=before,
                                 base_url=self.link_base(settings),
                                 language=words.lang(settings.language))
        if decision is None:
            return
        due = notify.quiet_until(rules, now) or now
        await q.enqueue(tx, channel_ids=[c.id for c in chans], kind="run", run_id=new.id,
                        task_id=new.task_id, title=decision.title, body=decision.body,
                        log_lines=decision.log_lines, due_at_ms=due, now_ms=now,
                        notify_type=decision.level)
        await self._queued(tx)

    async def enqueue(self, tx: Tx, *, kind: str, title: str, body: str,
                      run_id: str | None = None, task_id: str | None = None,
                      channel_ids: list[str] | None = None, notify_type: str = "info") -> int:
        """A message outside a run's completion (a script's send(), a test): to the
        given channels, or every enabled one. Returns how many rows were written."""
        now = now_ms()
        if channel_ids is None:
            channel_ids = [c.id for c in await q.channels(tx, enabled_only=True)]
            if kind == "script":
                env = await env_of(tx, task_id)
                channel_ids += [ENV_CHANNEL + name for name in qinglong_notify.urls(env)]
        written = await q.enqueue(tx, channel_ids=channel_ids, kind=kind, run_id=run_id,
                                  task_id=task_id, title=title, body=body, log_lines=0,
                                  due_at_ms=now, now_ms=now, notify_type=notify_type)
        await self._queued(tx)
        return len(written)

    def pressure_changed(self, pressure: bool, report: dict[str, object]) -> None:
        """DiskKeeper's hook (synchronous): queue the hold entered/left message."""
        task = asyncio.create_task(self._pressure_message(pressure, report),
                                   name="notify:disk-pressure")
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    async def _pressure_message(self, pressure: bool, report: dict[str, object]) -> None:
        reason = str(report.get("reason") or "DISK_PRESSURE")
        volumes = report.get("volumes") or []
        where = ", ".join(str(v) for v in volumes) if isinstance(volumes, list) else ""
        try:
            async with self.db.write() as tx:
                rules = await q.global_rules(tx)
                if not rules.disk_pressure:
                    return
                lang = words.lang((await q.settings(tx)).language)
                if pressure:
                    title = words.text(lang, "disk_on")
                    body = words.text(lang, "disk_on_body",
                                      words.reason(lang, reason, notify.REASONS.get(reason)),
                                      where or words.text(lang, "unknown"))
                else:
                    title, body = words.text(lang, "disk_off"), words.text(lang, "disk_off_body")
                await self.enqueue(tx, kind="disk", title=title, body=body,
                                   notify_type="warning" if pressure else "success")
        except Exception:
            log.exception("could not queue the disk-pressure message")

    # -- the sender loop -----------------------------------------------------------

    async def _round(self) -> float | None:
        if self.leader is not None and not self.leader.is_leader:
            return None  # another node sends; gaining the lease pokes this loop
        now = now_ms()
        async with self.db.read() as tx:
            batch = await q.due(tx, now, BATCH)
            urls = {c.id: c.url for c in await q.channels(tx)}
        if batch:  # the rate limit decides, in one write: two rounds never both count
            async with self.db.write() as tx:
                batch = await self._limited(tx, await q.due(tx, now, BATCH), now)
        # OUTBOX_SENDS at a time: a receiver that hangs delays the others by nothing.
        await asyncio.gather(*(self._send_in_slot(msg, urls) for msg in batch))
        if self.loop.rounds % PRUNE_EVERY == 0:
            async with self.db.write(durable=False) as tx:
                await q.prune(tx, now - KEEP_DONE_MS, PRUNE_PAGE)
        if len(batch) == BATCH:
            return 0.0
        async with self.db.read() as tx:
            nxt = await q.next_due_ms(tx)
        return None if nxt is None else max(0.0, (nxt - now_ms()) / 1000)

    async def _limited(self, tx: Tx, batch: list[q.Message], now: int) -> list[q.Message]:
        """What of `batch` goes out now: within each channel's rate limit, the rest
        held for its digest; a held row come due brings its channel's digest."""
        rules = await q.global_rules(tx)
        window_ms = rules.rate_window_s * 1000
        sent = await q.sent_since(tx, now - window_ms)
        used = {ch: n for ch, (n, _) in sent.items()}
        out: list[q.Message] = []
        digested: set[str] = set()
        for msg in batch:
            if msg.kind not in q.LIMITED_KINDS:
                out.append(msg)
            elif msg.held_at_ms is not None:
                if msg.channel_id not in digested:
                    digested.add(msg.channel_id)
                    out.append(await self._digest(tx, msg.channel_id, rules, now))
            elif rules.rate_limit == 0 or digest.budget(rules.rate_limit,
                                                        used.get(msg.channel_id, 0)):
                used[msg.channel_id] = used.get(msg.channel_id, 0) + 1
                out.append(msg)
            else:
                first = sent.get(msg.channel_id, (0, None))[1]
                await q.hold(tx, msg.id, now, digest.hold_until(now, rules.rate_window_s, first))
        return out

    async def _digest(self, tx: Tx, channel_id: str, rules: notify.Rules,
                      now: int) -> q.Message:
        """ONE message for every row the channel's rate limit holds; those rows are
        marked digested (kept in the delivery log, never sent alone)."""
        held = await q.held(tx, channel_id)
        settings = await q.settings(tx)
        made = digest.compose(
            [digest.Item(title=m.title, run_id=m.run_id, notify_type=m.notify_type)
             for m in held], language=words.lang(settings.language),
            limit=rules.rate_limit, window_s=rules.rate_window_s,
            link=self.link_base(settings))
        (mid,) = await q.enqueue(tx, channel_ids=[channel_id], kind=q.DIGEST, run_id=None,
                                 task_id=None, title=made.title, body=made.body, log_lines=0,
                                 due_at_ms=now, now_ms=now, notify_type=made.notify_type)
        await q.digested(tx, [m.id for m in held], mid, now)
        return await q.get_message(tx, mid)

    async def _send_in_slot(self, msg: q.Message, urls: dict[str, str]) -> None:
        async with self._outbox_slots:
            url = urls.get(msg.channel_id)
            if msg.channel_id.startswith(ENV_CHANNEL):
                url = await self._env_url(msg)
            await self._send(msg, url)

    async def _send(self, msg: q.Message, url: str | None) -> None:
        if url is None:
            result = SendResult(ok=False, error="channel deleted")
        else:
            try:
                result = await self._deliver(msg, url)
            except Exception as exc:  # one bad row must not stall the others
                log.exception("notification %s: sending failed", msg.id)
                result = SendResult(ok=False, error=f"internal error ({type(exc).__name__})")
        now = now_ms()
        async with self.db.write() as tx:
            if result.ok:
                await q.mark_sent(tx, msg.id, now)
                self.sent += 1
                return
            self.failures += 1
            tries = msg.tries + 1
            give_up = (url is None or tries >= self.max_tries
                       or now - msg.due_at_ms >= self.max_age_s * 1000)
            next_at = None if give_up else now + int(
                self.retry_base_s * 1000 * 2 ** min(tries - 1, 16))
            if next_at is not None and next_at - msg.due_at_ms > self.max_age_s * 1000:
                next_at = msg.due_at_ms + int(self.max_age_s * 1000)
            await q.mark_failed(tx, msg.id, result.error or "failed", next_at, now)
        if give_up:
            self.given_up += 1
            log.warning("notification %s given up after %d tries", msg.id, tries)

    async def _deliver(self, msg: q.Message, url: str) -> SendResult:
        body = msg.body
        if msg.log_lines and msg.run_id:
            body += await self._log_tail(msg.run_id, msg.log_lines)
        failpoints.hit("notify.before_send")
        result = await deliver(url, msg.title, body, self.send_timeout_s, msg.notify_type)
        failpoints.hit("notify.after_send")
        return result

    async def _env_url(self, msg: q.Message) -> str | None:
        """A QingLong env channel's URL, from the envs as they are now (never stored)."""
        async with self.db.read() as tx:
            env = await env_of(tx, msg.task_id)
        return qinglong_notify.urls(env).get(msg.channel_id.removeprefix(ENV_CHANNEL))

    async def _log_tail(self, run_id: str, lines: int) -> str:
        async with self.db.read() as tx:
            rel = await q.last_log_path(tx, run_id)
            language = (await q.settings(tx)).language or "en"
        if rel is None:
            return ""
        try:
            data, _ = await asyncio.get_running_loop().run_in_executor(
                self._pool, logs.tail, self.logs_root, rel, LOG_TAIL_BYTES)
        except (OSError, logs.LogPathError, logs.UnsafeLogFile):
            return "\n\n" + words.text(language, "log_unavailable")
        text = data.decode("utf-8", "replace").splitlines()[-lines:]
        return "\n\n" + words.text(language, "log_tail", len(text)) + "\n" + "\n".join(text)

    async def valid(self, url: str) -> bool:
        """Does apprise know this URL's service and syntax? (Checked off the event loop.)"""
        return await asyncio.get_running_loop().run_in_executor(self._pool, _parses, url)

    async def send_now(self, url: str, title: str, body: str) -> SendResult:
        """The API's "send test": one delivery, bounded in time (the wait for a free
        test slot included); outbox sends and URL checks never wait for it."""
        limit = self.send_timeout_s
        try:
            await asyncio.wait_for(self._test_slots.acquire(), limit)
        except TimeoutError:
            return SendResult(ok=False, error="other test messages are still being sent")
        try:
            return await deliver(url, title, body, limit)
        finally:
            self._test_slots.release()
