"""The `task` command form end to end: the real launcher, real scripts, real processes."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from qledge import ids
from qledge.db import attempts, events, runs, tasks
from qledge.launch import logs
from qledge.model import Attempt, CancelReason, Event, Run, RunStatus, Trigger
from qledge.operations import trigger
from qledge.runtime.lifecycle import Runtime
from qledge.taskform import MESSAGES
from qledge.tasks.writable import TaskFields

from support import make_runtime, run_when

pytestmark = pytest.mark.pg  # also run on PostgreSQL: scripts/test's QLTEST_BACKEND=pg pass


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[Runtime]:
    runtime = make_runtime(tmp_path / "state", kill_grace_s="0.5", round_interval_s="0.2")
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.stop()


def script(rt: Runtime, rel: str, text: str, mode: int = 0o644) -> Path:
    path = rt.settings.scripts_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


async def run_task(rt: Runtime, command: str, env: dict[str, str] | None = None,
                   timeout: float = 20.0) -> tuple[Run, Attempt, str, list[Event]]:
    async with rt.db.write() as tx:
        task = await tasks.create_task(tx, ids.uuid7(), TaskFields(
            name="t", command=command, env=env or {}, labels=[],
            concurrency="allow"), 1)
    run = await trigger(rt, task.id, Trigger.API)
    for _ in range(int(timeout / 0.02)):
        async with rt.db.read() as tx:
            run = await runs.get_run(tx, run.id)
        if run.status not in (RunStatus.QUEUED, RunStatus.RUNNING):
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError(f"run of {command!r} not terminal")
    async with rt.db.read() as tx:
        (attempt,) = await attempts.attempts_of_run(tx, run.id)
        evs = await events.list_events(tx, run.id)
    text = logs.read(rt.settings.logs_path, attempt.log_path, 0, 1 << 16)[0].decode()
    return run, attempt, text, evs


async def test_a_python_script_runs_from_its_folder_with_its_arguments_and_exit_code(
        rt: Runtime) -> None:
    script(rt, "owner_repo/bot.py",
           "import os, sys\nprint('cwd', os.getcwd())\nprint('argv', sys.argv[1:])\n"
           "sys.exit(3)\n")
    run, attempt, text, _ = await run_task(rt, "task owner_repo/bot.py now -- a 'b c'")
    assert (run.status, run.exit_code, run.reason_code) == (RunStatus.FAILED, 3, "EXITED")
    assert f"cwd {(rt.settings.scripts_path / 'owner_repo').resolve()}" in text
    assert "argv ['a', 'b c']" in text
    assert attempt.pid is not None


async def test_the_interpreter_is_execd_directly_no_shell_stays(rt: Runtime) -> None:
    # The launcher's direct child is the interpreter itself: its parent is ql-launch.
    script(rt, "who.sh", 'cat /proc/$PPID/comm /proc/$$/comm\n')
    run, _, text, _ = await run_task(rt, "task who.sh now")
    assert run.status is RunStatus.SUCCEEDED, text
    assert text.split() == ["ql-launch", "bash"]


async def test_a_bash_script_succeeds(rt: Runtime) -> None:
    script(rt, "ok.sh", "echo hello from bash\n")
    run, _, text, _ = await run_task(rt, "task ok.sh")
    assert (run.status, run.exit_code) == (RunStatus.SUCCEEDED, 0)
    assert "hello from bash" in text


async def test_an_executable_without_extension_runs(rt: Runtime) -> None:
    script(rt, "tool", "#!/bin/sh\necho tool $1\nexit 5\n", 0o755)
    run, _, text, _ = await run_task(rt, "task tool now -- x")
    assert (run.status, run.exit_code) == (RunStatus.FAILED, 5)
    assert "tool x" in text


async def test_minus_m_is_the_runs_own_persisted_deadline(rt: Runtime) -> None:
    script(rt, "slow.py", "import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    run, attempt, _, _ = await run_task(rt, "task -m 1s slow.py now")
    assert (run.status, run.reason_code) == (RunStatus.TIMED_OUT, "TIMEOUT")
    assert attempt.deadline_at_ms is not None
    assert attempt.deadline_at_ms - attempt.created_at_ms == 1000
    assert run.finished_at_ms is not None and run.started_at_ms is not None
    assert run.finished_at_ms - run.started_at_ms < 15_000


async def test_desi_hands_the_script_only_the_selected_values(rt: Runtime) -> None:
    script(rt, "show.py", "import os\nprint('got', os.environ['JD_COOKIE'])\n")
    env = {"JD_COOKIE": "c1&c2&c3&c4&c5"}
    run, _, text, _ = await run_task(rt, "task show.py desi JD_COOKIE 1-2 4", env)
    assert run.status is RunStatus.SUCCEEDED, text
    assert "got c1&c2&c4\n" in text


@pytest.mark.parametrize(("command", "reason"), [
    ("task missing.py now", "TASK_SCRIPT_NOT_FOUND"),
    ("task ../../etc/passwd", "TASK_PATH_OUTSIDE"),
    ("task run.py --frobnicate", "TASK_BAD_OPTION"),
    ("task run.py now; touch /tmp/x", "TASK_BAD_SYNTAX"),
    ("task run.py desi SECRET_ENV 9", "TASK_ENV_EMPTY"),
    ("task run.py conc SECRET_ENV 3", "TASK_ENV_EMPTY"),
])
async def test_a_refused_form_fails_before_any_process_with_its_reason(
        rt: Runtime, command: str, reason: str) -> None:
    script(rt, "run.py", "open('spawned', 'w').close()\n")
    run, attempt, text, events = await run_task(rt, command, {"SECRET_ENV": "s3cr3t-value"})
    assert (run.status, run.reason_code, run.exit_code) == (RunStatus.FAILED, reason, None)
    assert attempt.pid is None and text == ""
    assert not (rt.settings.scripts_path / "spawned").exists()
    finished = [e for e in events if e.type == "run.finished"]
    assert finished[0].data["reason_code"] == reason
    assert finished[0].data["message"] == MESSAGES[finished[0].data["reason_code"]]  # type: ignore[index]
    # The events hold the code and a fixed text: never the command's words or an env value.
    blob = repr([e.data for e in events])
    for word in ("s3cr3t", "missing.py", "passwd", "frobnicate", "touch"):
        assert word not in blob


async def test_hooks_run_around_the_script_and_keep_its_exit_code(rt: Runtime) -> None:
    script(rt, "task_before.sh", 'echo "before $1"; export FROM_BEFORE=yes\n')
    script(rt, "task_after.sh", 'echo "after $1"; exit 9\n')
    script(rt, "s.py", "import os, sys\nprint('script', os.environ.get('FROM_BEFORE'))\n"
           "sys.exit(4)\n")
    run, _, text, _ = await run_task(rt, "task s.py now")
    assert (run.status, run.exit_code) == (RunStatus.FAILED, 4)
    assert text.splitlines()[:3] == ["before s.py", "script yes", "after s.py"]
    assert "task_after.sh returned 9" in text


async def test_a_failing_before_hook_does_not_stop_the_script(rt: Runtime) -> None:
    script(rt, "task_before.sh", "false\n")
    script(rt, "s.sh", "echo ran\n")
    run, _, text, _ = await run_task(rt, "task s.sh now")
    assert (run.status, run.exit_code) == (RunStatus.SUCCEEDED, 0)
    assert "task_before.sh returned 1" in text and "ran" in text


async def test_a_plain_shell_command_is_unchanged(rt: Runtime) -> None:
    run, _, text, _ = await run_task(rt, "echo plain; exit 2")
    assert (run.status, run.exit_code) == (RunStatus.FAILED, 2)
    assert text == "plain\n"


if sys.platform != "linux":  # pragma: no cover
    pytest.skip("the launcher is Linux-only", allow_module_level=True)


async def _children(rt: Runtime, parent_id: str) -> list[tuple[Run, Attempt | None, str]]:
    """Each child, its attempt (None before it is prepared) and its log so far."""
    from qledge.db import conc_runs

    out: list[tuple[Run, Attempt | None, str]] = []
    async with rt.db.read() as tx:
        kids = await conc_runs.children(tx, parent_id)
        for kid in kids:
            tried = await attempts.attempts_of_run(tx, kid.id)
            attempt = tried[0] if tried else None
            text = "" if attempt is None else logs.read(
                rt.settings.logs_path, attempt.log_path, 0, 4096)[0].decode()
            out.append((kid, attempt, text))
    return out


async def _start(rt: Runtime, command: str, env: dict[str, str]) -> str:
    async with rt.db.write() as tx:
        task = await tasks.create_task(tx, ids.uuid7(), TaskFields(
            name="c", command=command, env=env, labels=[],
            concurrency="forbid"), 1)
    return (await trigger(rt, task.id, Trigger.API)).id


async def _wait(rt: Runtime, run_id: str, timeout: float = 30.0) -> Run:
    return await run_when(rt, run_id, timeout=timeout, what="the parent to end")


async def test_conc_runs_one_child_per_value_concurrently(rt: Runtime) -> None:
    script(rt, "c.py", "import os, time\nprint('got', os.environ['V'], flush=True)\n"
           "time.sleep(0.6)\n")
    parent_id = await _start(rt, "task c.py conc V 1 3-4", {"V": "a&b&c&d"})
    parent = await _wait(rt, parent_id)
    assert (parent.status, parent.exit_code, parent.reason_code) == (
        RunStatus.SUCCEEDED, 0, "CONC_CHILDREN")
    kids = await _children(rt, parent_id)
    assert [(k.conc_index, k.status, t) for k, _, t in kids] == [
        (1, RunStatus.SUCCEEDED, "got a\n"), (3, RunStatus.SUCCEEDED, "got c\n"),
        (4, RunStatus.SUCCEEDED, "got d\n")]
    # Each child its own launcher and log, all at once (they overlap in time).
    started = [a for _, a, _ in kids if a is not None]
    assert len({a.id for a in started}) == len({a.pid for a in started}) == 3
    starts = [k.started_at_ms or 0 for k, _, _ in kids]
    ends = [k.finished_at_ms or 0 for k, _, _ in kids]
    assert max(starts) < min(ends)
    async with rt.db.read() as tx:
        assert await attempts.attempts_of_run(tx, parent_id) == []
        evs = await events.list_events(tx, parent_id)
    assert [e.type for e in evs] == ["run.created", "run.started", "run.finished"]
    assert evs[1].data == {"children": 3}
    assert evs[2].data["children_succeeded"] == 3


async def test_conc_parent_fails_unless_every_child_succeeds(rt: Runtime) -> None:
    script(rt, "c.sh", 'case "$V" in bad) exit 6;; esac; echo "ok $V"\n')
    parent = await _wait(rt, await _start(rt, "task c.sh conc V", {"V": "x&bad&y"}))
    assert (parent.status, parent.exit_code, parent.reason_code) == (
        RunStatus.FAILED, 6, "CONC_CHILDREN")
    kids = await _children(rt, parent.id)
    assert [(k.status, k.exit_code) for k, _, _ in kids] == [
        (RunStatus.SUCCEEDED, 0), (RunStatus.FAILED, 6), (RunStatus.SUCCEEDED, 0)]


async def test_cancelling_a_conc_parent_cancels_its_children(rt: Runtime) -> None:
    script(rt, "slow.sh", "echo started; sleep 60\n")
    parent_id = await _start(rt, "task slow.sh conc V", {"V": "1&2"})
    for _ in range(500):
        kids = await _children(rt, parent_id)
        if len(kids) == 2 and all("started" in t for _, _, t in kids):
            break
        await asyncio.sleep(0.02)
    await rt.cancellation.request(parent_id, CancelReason.USER)
    parent = await _wait(rt, parent_id)
    assert (parent.status, parent.reason_code) == (RunStatus.CANCELLED, "CONC_CHILDREN")
    assert [k.status for k, _, _ in await _children(rt, parent_id)] == [
        RunStatus.CANCELLED, RunStatus.CANCELLED]


async def test_a_conc_parent_that_waited_for_a_slot_fans_out_from_the_dispatch_loop(
        tmp_path: Path) -> None:
    rt = make_runtime(tmp_path / "one", max_concurrent_attempts="1")
    await rt.start()
    try:
        script(rt, "c.sh", 'echo "v $V"\n')
        script(rt, "block.sh", "sleep 0.5\n")
        blocker = await _start(rt, "task block.sh now", {})
        parent_id = await _start(rt, "task c.sh conc V", {"V": "1&2"})
        async with rt.db.read() as tx:  # it waits: the only slot is taken
            assert (await runs.get_run(tx, parent_id)).status is RunStatus.QUEUED
        assert (await _wait(rt, blocker)).status is RunStatus.SUCCEEDED
        # Its children start at once (the round that fanned it out wakes the
        # dispatcher again), not at some later, unrelated wake-up.
        parent = await _wait(rt, parent_id, timeout=10)
        assert parent.status is RunStatus.SUCCEEDED
        assert [t for _, _, t in await _children(rt, parent_id)] == ["v 1\n", "v 2\n"]
    finally:
        await rt.stop()


async def test_a_symlink_loop_is_refused_at_once_not_lost_later(rt: Runtime) -> None:
    # Issue 35, finding 9: resolve() raised on the loop, the attempt stayed `preparing`
    # and recovery called it lost ~30 s later.
    (rt.settings.scripts_path / "loop").symlink_to("loop")
    (rt.settings.scripts_path / "a.py").symlink_to("b.py")
    (rt.settings.scripts_path / "b.py").symlink_to("a.py")
    for command in ("task loop now", "task a.py now"):
        run, attempt, text, _ = await run_task(rt, command, timeout=5.0)
        assert (run.status, run.reason_code) == (RunStatus.FAILED, "TASK_SCRIPT_NOT_FOUND")
        assert attempt.pid is None and text == ""


async def test_a_script_named_like_an_option_runs_as_a_script(rt: Runtime) -> None:
    # Issue 35, finding 10: `python3 -cprint("X")#.py` ran the option, not the file.
    script(rt, '-cprint("X")#.py', "print('the file ran')\n")
    script(rt, "-e.sh", "echo 'the shell file ran'\n")
    run, _, text, _ = await run_task(rt, """task ./'-cprint("X")#.py' now""")
    assert run.status is RunStatus.SUCCEEDED, text
    assert text.splitlines() == ["the file ran"]
    run, _, text, _ = await run_task(rt, "task ./-e.sh now")
    assert run.status is RunStatus.SUCCEEDED, text
    assert text.splitlines() == ["the shell file ran"]
