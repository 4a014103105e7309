"""LocalProcess executor: the spawn protocol of docs/contract.md §3, in that order.

1. one transaction: attempt (preparing), token hash, sequence, deadline, log
   artifact and journal row, and the run `running` — if it fails, nothing is
   spawned; once it commits, a launcher may exist, so a cancel can no longer end
   the run as "nothing started" (it commits its intent; the attempt's end decides);
2. the log file, O_CREAT|O_EXCL|O_APPEND 0600, inside the logs root;
3. ql-launch in a new session, the token over an inherited pipe, stdin
   /dev/null, stdout/stderr on the log;
4. the durable identity persisted — or the process group stopped and the
   attempt marked lost (never an unrecorded process left running). With an
   `identity_grace_s`, a launcher that exits within the grace has its identity
   written in its result's commit instead (launch/unrecorded.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import msgspec

from .. import failpoints, ids, taskform, transitions
from ..clock import now_ms
from ..db import attempts, journal, runs, tasks
from ..db.interface import Database, Tx
from ..model import Attempt, AttemptStatus, Reason, Run, RunStatus, Task
from ..node import Node
from ..receipts.codec import new_token, token_hash
from ..receipts.store import ReceiptStore
from ..runtime import conc
from ..settings import Profile, Settings
from . import identity, logs, simple_command
from .isolation import Isolation
from .unrecorded import Identities, Unrecorded

log = logging.getLogger("qledge.executor")
EXECUTOR_TYPE = "local_process"
TOKEN_FD = 3
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STOP_WAIT_S = 1.0  # per signal, when an unrecorded launcher's group is stopped

class Environments(Protocol):
    """Where a launch's variables come from besides the task's own (the runtime's
    runtime/taskenv.py): the enabled envs and installed packages; one launch's own
    (a subscription pull's spec, a dependency job — never stored with the task); and
    the appliance's per-attempt variables (the scripts' notify credential), which win."""

    async def global_env(self, tx: Tx) -> dict[str, str]: ...

    async def task_env(self, tx: Tx, task: Task, run: Run) -> dict[str, str]: ...

    def run_env(self, attempt_id: str) -> dict[str, str]: ...


class ExecutorSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The executor's part of the settings (`executor_settings` builds it), and who
    this worker is: its node id and the boot its launchers run on."""

    logs_root: Path
    work_dir: Path
    scripts_dir: Path
    launcher: str
    node_id: str
    boot_id: str
    # Spawn step 4 deferred by up to this long (0: committed at once).
    identity_grace_s: float = 0.0


def executor_settings(settings: Settings, profile: Profile, *, launcher: str, node_id: str,
                      boot_id: str) -> ExecutorSettings:
    return ExecutorSettings(logs_root=settings.logs_path, work_dir=settings.work_path,
                            scripts_dir=settings.scripts_path, launcher=launcher,
                            node_id=node_id, boot_id=boot_id,
                            identity_grace_s=profile.identity_grace_s)


def base_env(work_dir: Path) -> dict[str, str]:
    """The documented minimal environment every task starts from (docs/tasks.md)."""
    env = {"PATH": BASE_PATH, "HOME": str(work_dir), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    if "TZ" in os.environ:
        env["TZ"] = os.environ["TZ"]
    return env


class SpawnResult:
    """`cancelling`: a cancel intent was committed while the launcher was being
    spawned; its driver can signal only now that the identity is recorded."""

    __slots__ = ("attempt", "cancelling", "pidfd")

    def __init__(self, attempt: Attempt, pidfd: int, cancelling: bool = False) -> None:
        self.attempt = attempt
        self.pidfd = pidfd
        self.cancelling = cancelling


class Prepared:
    """Step 1 done inside some write transaction; launch() once it has committed.

    `form`: the parsed `task` command form (expanded against the scripts folder
    in launch()); `refusal`: why the form cannot run — the attempt ends `failed`
    with that reason and nothing is spawned.
    """

    __slots__ = ("attempt", "env", "form", "refusal", "run", "sweeps", "task", "token")

    def __init__(self, run: Run, task: Task, attempt: Attempt, token: str,
                 env: dict[str, str], form: taskform.TaskForm | None = None,
                 refusal: taskform.TaskFormError | None = None, sweeps: int = 0) -> None:
        self.run = run
        self.task = task
        self.attempt = attempt
        self.token = token
        self.env = env
        self.form = form
        self.refusal = refusal
        # LocalExecutor.sweeps when step 1 was written: a cancel sweep since then may
        # have missed this attempt (`preparing`), so its identity is written at once.
        self.sweeps = sweeps


def _command(task: Task, scripts_dir: Path) -> tuple[
        taskform.TaskForm | None, taskform.TaskFormError | None]:
    if not taskform.is_task_form(task.command):
        return None, None
    try:
        return taskform.parse(task.command, scripts_dir), None
    except taskform.TaskFormError as exc:
        return None, exc


def direct(command: str, env: dict[str, str]) -> tuple[list[str], dict[str, str]] | None:
    """A plain command that needs no shell: its argv and the environment dash would
    have exported to it, run from this process's cwd (the launcher inherits it); None
    keeps `/bin/sh -c` (launch/simple_command.py)."""
    argv = simple_command.parse(command)
    if argv is None:
        return None
    try:
        cwd = os.getcwd()
    except OSError:
        return None  # dash would warn and export an empty PWD: its own business
    exported = simple_command.exports(env, cwd)
    return None if exported is None else (argv, exported)


def deadline_ms(task: Task, form: taskform.TaskForm | None, now: int) -> int | None:
    """The attempt's deadline: the task's timeout and a `task -m`, the shorter wins."""
    limits = [s for s in (task.timeout_s, form.timeout_s if form else None) if s]
    return now + int(min(limits) * 1000) if limits else None


class LocalExecutor:
    def __init__(
        self, config: ExecutorSettings, *, db: Database, receipts: ReceiptStore,
        isolation: Isolation, env: Environments, identities: Identities, node: Node,
        journal_cutoff: Callable[[int], int | None], on_cancelling: Callable[[], None],
    ) -> None:
        """`journal_cutoff`: settled journal rows due by then (None: none) age out in
        step 1's commit, which writes their recent pages anyway (the supervisor's rule,
        runtime/reaper.py). `on_cancelling`: who drives a cancel intent found when an
        identity is written (the cancellation side, which in turn has this executor
        record pending identities before it sweeps: each needs the other)."""
        self.db = db
        self.config = config
        # The runtime's Node: its lease epoch (None on SQLite) goes on every attempt.
        self.node = node
        self.receipts = receipts
        self.logs_root = config.logs_root
        self.work_dir = config.work_dir
        self.launcher = config.launcher
        self.node_id = config.node_id
        self.boot_id = config.boot_id
        self.env = env
        self.isolation = isolation
        self.scripts_dir = config.scripts_dir
        # Attempts between step 1 and the caller's watch registration: the
        # supervisor must not judge them (they are `preparing` by design).
        self.in_flight: set[str] = set()
        # `task … conc` runs turned into child runs (the dispatcher wakes for them).
        self.fanned_out = 0
        # Spawn step 4 deferred by up to this long (0: committed at once), the identities
        # waiting, and who drives a cancel intent found when they are written.
        self.identity_grace_s = config.identity_grace_s
        self.identities = identities
        self.on_cancelling = on_cancelling
        self.sweeps = 0
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._recording: set[asyncio.Task[None]] = set()
        self.identity_commits = 0
        self.journal_cutoff = journal_cutoff

    async def prepare_in(self, tx: Tx, run: Run, task: Task | None = None) -> Prepared | None:
        """Step 1 in the caller's transaction; None if the run is not startable.

        `task` given: the run was created in this very transaction, so there is
        nothing to re-check. Otherwise it waited and may have moved (cancelled,
        or prepared by the transaction that created it) since the caller read it.
        The attempt joins `in_flight` before the commit makes it visible, so no
        supervision round sees it `preparing` and unwatched, and leaves it again
        if the transaction rolls back; the caller launch()es it after the commit.
        """
        if task is None:
            run = await runs.get_run(tx, run.id)
            if run.status is not RunStatus.QUEUED or run.cancel_reason is not None:
                return None
            if await attempts.run_has_active_attempt(tx, run.id):
                return None
            task = await tasks.get_task(tx, run.task_id)
        own = await self.env.task_env(tx, task, run)
        env = {**base_env(self.work_dir), **await self.env.global_env(tx), **task.env}
        if own:
            # A system launch with a credential (a subscription pull, a dependency job):
            # no user-set variable may make the loader run other code in it first.
            env = {k: v for k, v in env.items() if not k.startswith("LD_")}
        env.update(own)
        token = new_token()
        attempt_id = ids.uuid7()
        env.update(self.env.run_env(attempt_id))
        now = now_ms()
        form, refusal = _command(task, self.scripts_dir)
        if form is not None and form.mode == "conc" and run.parent_run_id is None:
            try:
                # No process of its own: its children are queued runs (runtime/conc.py).
                await conc.fan_out(tx, run, form, env, now)
            except taskform.TaskFormError as exc:
                refusal = exc  # fails like any refused form: an attempt, no process
            else:
                self.fanned_out += 1
                return None
        deadline = deadline_ms(task, form, now)
        self.in_flight.add(attempt_id)
        tx.on_rollback(lambda: self.in_flight.discard(attempt_id))
        attempt = await attempts.prepare_attempt(
            tx, run, attempt_id=attempt_id, owner=self.node_id,
            executor_type=EXECUTOR_TYPE, token_hash=token_hash(token),
            deadline_at_ms=deadline, log_path=logs.relative_path(attempt_id),
            receipt_path=self.receipts.relative_path(attempt_id), now_ms=now,
            node_epoch=self.node.epoch if self.node is not None else None,
            spawn_boot_id=self.boot_id)
        # In the same commit: from here on the run is not "nothing started" (a cancel
        # goes through the attempt, docs/recovery.md).
        run = await runs.apply(tx, run, transitions.attempt_prepared(run), now)
        await journal.journal_age_in_spawn(tx, self.journal_cutoff(now))
        return Prepared(run, task, attempt, token, env, form, refusal, self.sweeps)

    async def launch(self, prepared: Prepared) -> SpawnResult | None:
        """Steps 2-4 after step 1 committed. The attempt leaves `in_flight` when this
        returns; the caller registers the exit watch synchronously after the await."""
        try:
            return await self._launch_steps(prepared)
        finally:
            self.in_flight.discard(prepared.attempt.id)

    async def _launch_steps(self, p: Prepared) -> SpawnResult | None:
        attempt, run, attempt_id = p.attempt, p.run, p.attempt.id
        failpoints.hit("spawn.after_prepare")
        if self.isolation.refuses:
            # task_isolation = "required" and Landlock is unavailable: nothing runs.
            await self._finish_without_process(attempt_id, Reason.TASK_ISOLATION_UNAVAILABLE,
                                               AttemptStatus.BLOCKED, settled=True)
            return None
        command = ["/bin/sh", "-c", p.task.command]
        cwd: str | None = None
        env = p.env
        shell_fallback = False
        if p.form is None and p.refusal is None:
            plain = direct(p.task.command, env)
            if plain is not None:
                # No shell stays resident; an exec failure is still the shell's to judge.
                (command, env), shell_fallback = plain, True
        try:
            if p.refusal is not None:
                raise p.refusal
            if p.form is not None:
                # Expanded now, against the scripts folder as it is at spawn time.
                spawn = await asyncio.to_thread(taskform.expand, p.form, self.scripts_dir, env,
                                                p.run.conc_index)
                command, cwd, env = spawn.argv, spawn.cwd, spawn.env
        except taskform.TaskFormError as refused:
            await self._finish_without_process(
                attempt_id, refused.reason, AttemptStatus.FAILED, settled=True,
                message=refused.message)
            return None
        except Exception as exc:
            # Anything else expand() meets (a filesystem surprise): this attempt ends
            # now with a reason, not `preparing` until recovery calls it lost.
            log.error("expanding the task form of attempt %s failed: %s", attempt_id,
                      type(exc).__name__)
            await self._finish_without_process(attempt_id, Reason.SPAWN_FAILED, settled=True)
            return None
        # Steps 2 and 3, in a thread: a new shard costs a directory fsync, which must
        # not stall the event loop on an SD card.
        try:
            pid = await asyncio.to_thread(self._launch, attempt, run, p.task, p.token, env,
                                          command, cwd, shell_fallback)
        except Exception as exc:
            log.error("spawn of attempt %s failed: %s", attempt_id, type(exc).__name__)
            await self._finish_without_process(attempt_id, Reason.SPAWN_FAILED, settled=True)
            return None
        # Step 4.
        pidfd = identity.child_fd(pid, self.boot_id)
        try:
            ident = identity.capture(pid, self.boot_id)
            if ident is None:
                raise ProcessLookupError(pid)
            failpoints.hit("spawn.before_persist")
            if self.identity_grace_s > 0 and self.sweeps == p.sweeps:
                # Deferred: written by the result's commit if the launcher exits within
                # the grace, else by a commit of its own then (launch/unrecorded.py).
                self.identities.add(Unrecorded(
                    attempt_id=attempt_id, pid=pid, start_time=ident.start_time,
                    boot_id=self.boot_id, spawned_at_ms=now_ms(),
                    deadline_at_ms=attempt.deadline_at_ms))
                self._timers[attempt_id] = asyncio.get_running_loop().call_later(
                    self.identity_grace_s, self._grace_over, attempt_id)
                return SpawnResult(attempt, pidfd)
            # Deferred (no fsync of its own): it survives a worker kill like any
            # commit; a power cut that loses it also ends the process and changes the
            # boot id, so the identity would prove nothing afterwards anyway —
            # recovery finds the attempt `preparing` and decides from the receipt,
            # or `lost`. Step 1 stays durable: it must be on disk before the spawn.
            async with self.db.write(durable=False) as tx:
                run = await runs.get_run(tx, run.id)
                attempt = await attempts.get_attempt(tx, attempt_id)
                tr = transitions.attempt_started(
                    run, attempt, pid=pid, start_time=ident.start_time, boot_id=self.boot_id,
                    now_ms=now_ms())
                await runs.apply(tx, run, tr, now_ms())
                assert tr.attempt is not None
                self.identity_commits += 1
                return SpawnResult(tr.attempt, pidfd, cancelling=run.cancel_reason is not None)
        except Exception as exc:
            log.error("could not persist the identity of attempt %s (%s): stopping it",
                      attempt_id, type(exc).__name__)
            await self._stop_group(pid, pidfd)
            os.close(pidfd)
            await self._finish_without_process(attempt_id, Reason.SPAWN_HANDLE_PERSIST_FAILED)
            return None

    # -- identities deferred by the grace ---------------------------------------------

    def _grace_over(self, attempt_id: str) -> None:
        self._timers.pop(attempt_id, None)
        if attempt_id not in self.identities:
            return  # its result's commit wrote it
        task = asyncio.create_task(self._record_due(attempt_id), name=f"identity:{attempt_id}")
        self._recording.add(task)
        task.add_done_callback(self._recording.discard)

    async def _record_due(self, attempt_id: str) -> None:
        # This attempt's grace is over, and any other whose own grace is (a timer
        # late on a busy loop); not the younger ones: a short task spawned a moment
        # ago may still finish within its grace and write its identity with its
        # result, the commit this saves.
        due = list(dict.fromkeys([attempt_id, *self.identities.due(
            now_ms() - int(self.identity_grace_s * 1000))]))
        try:
            cancelling = await self.record(due)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # The identity stays in memory (the result's commit writes it, the next
            # grace or sweep retries); a worker killed meanwhile leaves the attempt
            # `preparing` for start-up recovery to adopt by its attempt id.
            log.error("could not record deferred identities (%s); retrying",
                      type(exc).__name__)
            for ident in self.identities.pending():
                if ident.attempt_id not in self._timers:
                    self._timers[ident.attempt_id] = asyncio.get_running_loop().call_later(
                        self.identity_grace_s, self._grace_over, ident.attempt_id)
            return
        if cancelling:
            self.on_cancelling()

    async def record(self, attempt_ids: list[str] | None = None) -> list[Attempt]:
        """Commit pending identities (all, or these): the attempts become `running`.

        Returns the recorded attempts whose run has a committed cancel intent: their
        driver could not start before (it signals by the recorded identity)."""
        pending = self.identities.pending(attempt_ids)
        if not pending:
            return []
        cancelling: list[Attempt] = []
        async with self.db.write(durable=False) as tx:
            for ident in pending:
                attempt = await attempts.get_attempt(tx, ident.attempt_id)
                run = await runs.get_run(tx, attempt.run_id)
                if attempt.status is not AttemptStatus.PREPARING:
                    # Decided without it: by another node's takeover while this one was
                    # away (fleet mode), it is still written; else memory lets it go.
                    await self.identities.record_fenced_in(tx, attempt)
                    self.identities.forget_on_commit(tx, attempt.id)
                    continue
                run, attempt = await self.identities.record_in(tx, run, attempt)
                if run.cancel_reason is not None:
                    cancelling.append(attempt)
            self.identity_commits += 1
        for ident in pending:
            timer = self._timers.pop(ident.attempt_id, None)
            if timer is not None:
                timer.cancel()
        return cancelling

    async def before_sweep(self, expired_by: int | None = None) -> None:
        """A cancel sweep is about to look for running attempts: record every pending
        identity first, and make launches still in step 2-3 record theirs at once.

        `expired_by`: a deadline check (every supervision round runs one) — only the
        identities whose deadline has passed by then; the others keep their grace."""
        if expired_by is not None:
            await self.record(self.identities.expired(expired_by))
            return
        self.sweeps += 1
        await self.record()

    async def stop(self) -> None:
        """Record what is pending: the next worker then finds its attempts `running`
        (adoption by /proc would find them too, but costs a walk)."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self._recording:
            await asyncio.wait(list(self._recording), timeout=5.0)
        try:
            await self.record()
        except Exception as exc:
            log.error("could not record deferred identities at stop (%s): start-up "
                      "recovery adopts their launchers", type(exc).__name__)

    def _launch(self, attempt: Attempt, run: Run, task: Task, token: str,
                env: dict[str, str], command: list[str], cwd: str | None,
                shell_fallback: bool = False) -> int:
        log_fd, _ = logs.create(self.logs_root, attempt.id)
        shard = self.receipts.ensure_shard(attempt.id)
        read_end, write_end = os.pipe()
        try:
            # 43 bytes fit in any pipe buffer: write before spawn, close, EOF for the reader.
            os.write(write_end, token.encode())
            os.close(write_end)
            write_end = -1
            argv = [
                self.launcher, "--receipt-dir", str(shard), "--run-id", run.id,
                "--attempt-id", attempt.id, "--sequence", str(attempt.callback_sequence),
                "--token-fd", str(TOKEN_FD), *self.isolation.launcher_args(),
                *(["--keep-background"] if task.keep_background else []),
                *(["--sh-fallback"] if shell_fallback else []),
                *(["--cwd", cwd] if cwd else []), "--", *command,
            ]
            if read_end == TOKEN_FD:
                # dup2 onto itself would keep O_CLOEXEC on older libcs.
                os.set_inheritable(read_end, True)
            actions = [
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, log_fd, 1),
                (os.POSIX_SPAWN_DUP2, log_fd, 2),
                (os.POSIX_SPAWN_DUP2, read_end, TOKEN_FD),
            ]
            # Every other fd of the worker is O_CLOEXEC and stays behind; the
            # worker's cwd is the work dir (set at start), which the task inherits.
            return os.posix_spawn(self.launcher, argv, env, file_actions=actions, setsid=True)
        finally:
            os.close(read_end)
            os.close(log_fd)
            if write_end >= 0:
                os.close(write_end)

    async def _stop_group(self, pid: int, pidfd: int) -> None:
        """Compensation for an unrecorded process: TERM, then KILL, its whole group.

        The launcher is our unreaped child (the pidfd holds it), so its pid — the
        group id — cannot be recycled. The waits are on the loop, never blocking it.
        """
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                break
            if await identity.wait_exit(pidfd, STOP_WAIT_S):
                break
        identity.reaped(pid, pidfd)

    async def _finish_without_process(self, attempt_id: str, reason: Reason,
                                      status: AttemptStatus = AttemptStatus.LOST, *,
                                      settled: bool = False,
                                      message: str | None = None) -> None:
        """`settled`: no launcher ever ran, so no receipt can come (journal: ageing only).
        A launcher stopped for lack of an identity may still publish: not settled."""
        async with self.db.write() as tx:
            attempt = await attempts.get_attempt(tx, attempt_id)
            run = await runs.get_run(tx, attempt.run_id)
            tr = transitions.without_receipt(run, attempt, reason, now_ms(), status=status,
                                             message=message)
            await runs.apply(tx, run, tr, now_ms())
            if settled:
                await journal.journal_settle(tx, [attempt_id], now_ms())
