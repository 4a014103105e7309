"""Plain task commands through the real runtime and launcher: a simple command runs
without a shell (issue 40), anything else still under `/bin/sh -c`, and what a run
records is what the shell gave."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from qledge import ids
from qledge.db import attempts, tasks
from qledge.launch import logs
from qledge.model import Attempt, Run, RunStatus, Trigger
from qledge.operations import cancel_run, trigger
from qledge.runtime.lifecycle import Runtime
from qledge.tasks.writable import task_fields

from support import eventually_async, make_runtime, run_when

# The launcher's child names its parent and its own program.
WHO = ("python3 -c 'import os; print(open(\"/proc/%d/comm\" % os.getppid()).read().strip(),"
       " os.path.basename(os.readlink(\"/proc/self/exe\")))'")
READY_THEN_WAIT = "import time; print(\"ready\", flush=True); time.sleep(60)"


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[Runtime]:
    runtime = make_runtime(tmp_path / "state", kill_grace_s="0.5", round_interval_s="0.2")
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.stop()


async def start(rt: Runtime, command: str, **fields: object) -> Run:
    async with rt.db.write() as tx:
        task = await tasks.create_task(tx, ids.uuid7(), task_fields({
            "name": "t", "command": command, "env": {}, "labels": [], "concurrency": "allow",
            **fields}), 1)
    return await trigger(rt, task.id, Trigger.API)


async def log_of(rt: Runtime, run: Run) -> tuple[Attempt, str]:
    async with rt.db.read() as tx:
        (attempt,) = await attempts.attempts_of_run(tx, run.id)
    if attempt.log_path is None:
        return attempt, ""
    return attempt, logs.read(rt.settings.logs_path, attempt.log_path, 0, 1 << 16)[0].decode()


async def wait_log(rt: Runtime, run: Run, text: str) -> Attempt:
    async def there() -> Attempt | None:
        async with rt.db.read() as tx:
            found = await attempts.attempts_of_run(tx, run.id)
        if not found:
            return None
        attempt, log = await log_of(rt, run)
        return attempt if text in log and attempt.pid is not None else None

    return await eventually_async(there, timeout=30, what=f"{text!r} in the log")


async def finished(rt: Runtime, run: Run) -> tuple[Run, str]:
    ended = await run_when(rt, run.id, timeout=30)
    return ended, (await log_of(rt, ended))[1]


async def outcome(rt: Runtime, command: str, **fields: object) -> tuple[Run, str]:
    return await finished(rt, await start(rt, command, **fields))


async def test_a_simple_command_is_the_launchers_child(rt: Runtime) -> None:
    run, text = await outcome(rt, WHO)
    assert run.status is RunStatus.SUCCEEDED, text
    assert text.split()[0] == "ql-launch"
    assert text.split()[1].startswith("python3")


async def test_a_command_with_shell_syntax_keeps_its_shell(rt: Runtime) -> None:
    run, text = await outcome(rt, WHO + " && true")
    assert run.status is RunStatus.SUCCEEDED, text
    assert text.split()[0] == "sh"


async def test_a_running_simple_command_has_no_shell_in_between(rt: Runtime) -> None:
    run = await start(rt, f"python3 -c '{READY_THEN_WAIT}'")
    attempt = await wait_log(rt, run, "ready")
    assert attempt.pid is not None
    (child,) = Path(f"/proc/{attempt.pid}/task/{attempt.pid}/children").read_text().split()
    assert os.path.basename(os.readlink(f"/proc/{child}/exe")).startswith("python3")
    await cancel_run(rt, run.id)
    run, _ = await finished(rt, run)
    assert (run.status, run.exit_code) == (RunStatus.CANCELLED, 128 + 15)


@pytest.mark.parametrize(("command", "status", "code", "log"), [
    ("echo a && echo b", RunStatus.SUCCEEDED, 0, "a\nb\n"),
    ("echo x > out.txt; cat out.txt; rm out.txt", RunStatus.SUCCEEDED, 0, "x\n"),
    ("echo \"$HOME\" | wc -c", RunStatus.SUCCEEDED, 0, None),
    ("exit 3", RunStatus.FAILED, 3, ""),
    ("mkdir -p h40b-d && cd h40b-d && pwd && cd .. && rmdir h40b-d", RunStatus.SUCCEEDED, 0,
     None),
    ("A=1 sh -c 'echo $A'", RunStatus.SUCCEEDED, 0, "1\n"),
    ("echo plain", RunStatus.SUCCEEDED, 0, "plain\n"),   # a builtin: the shell's echo
    ("printf '%s-' a b", RunStatus.SUCCEEDED, 0, "a-b-"),
    ("-x foo", RunStatus.FAILED, 2, "/bin/sh: 0: Illegal option - \n"),
])
async def test_commands_that_need_the_shell_behave_as_ever(
        rt: Runtime, command: str, status: RunStatus, code: int, log: str | None) -> None:
    run, text = await outcome(rt, command)
    assert (run.status, run.exit_code) == (status, code), text
    if log is not None:
        assert text == log
    if command.startswith("mkdir"):
        assert text.strip().endswith("/h40b-d")


async def test_not_found_and_not_executable_say_what_the_shell_said(rt: Runtime) -> None:
    run, text = await outcome(rt, "ql-h40b-no-such-command --x")
    assert (run.status, run.exit_code, run.reason_code) == (RunStatus.FAILED, 127, "EXITED")
    assert text == "/bin/sh: 1: ql-h40b-no-such-command: not found\n"
    script = rt.settings.work_path / "plain.sh"
    script.write_text("#!/bin/sh\necho never\n")
    script.chmod(0o644)
    run, text = await outcome(rt, "./plain.sh")
    assert (run.status, run.exit_code) == (RunStatus.FAILED, 126)
    assert text == "/bin/sh: 1: ./plain.sh: Permission denied\n"


async def test_a_script_without_shebang_still_runs_as_a_shell_script(rt: Runtime) -> None:
    script = rt.settings.work_path / "old.sh"
    script.write_text('echo "old style $1"\nexit 4\n')
    script.chmod(0o755)
    run, text = await outcome(rt, "./old.sh 'a b'")
    assert (run.status, run.exit_code) == (RunStatus.FAILED, 4)
    assert text == "old style a b\n"


async def test_the_environment_is_the_one_the_shell_exported(rt: Runtime) -> None:
    env = {"IFS": "x", "OPTIND": "7", "PWD": "/nonexistent", "QL_X": "1"}
    direct, direct_text = await outcome(rt, "env", env=env)
    shell, shell_text = await outcome(rt, "env && true", env=env)
    assert direct.status is shell.status is RunStatus.SUCCEEDED
    assert sorted(direct_text.splitlines()) == sorted(shell_text.splitlines())
    assert f"PWD={os.getcwd()}" in direct_text.splitlines()
    assert "IFS= \t" in direct_text.splitlines()


async def test_a_ppid_in_the_env_keeps_the_shell(rt: Runtime) -> None:
    # dash exports PPID as its parent's pid: only the shell itself can say it.
    run, text = await outcome(rt, WHO, env={"PPID": "1"})
    assert run.status is RunStatus.SUCCEEDED, text
    assert text.split()[0] == "sh"


async def test_death_by_signal_records_128_plus_n_as_before(rt: Runtime) -> None:
    """The exit code is the same with or without the shell; only the shell's own line
    about it ("Killed") is gone from the log (docs/tasks.md)."""
    kill = "python3 -c 'import os; os.kill(os.getpid(), 9)'"
    direct, direct_text = await outcome(rt, kill)
    shell, shell_text = await outcome(rt, kill + " || exit $?")
    assert (direct.status, direct.exit_code, direct.reason_code) == (
        RunStatus.FAILED, 137, "EXITED")
    assert (shell.status, shell.exit_code, shell.reason_code) == (
        RunStatus.FAILED, 137, "EXITED")
    assert direct_text == ""
    assert shell_text == "Killed\n"


async def test_a_cancel_records_the_commands_own_answer_to_term(rt: Runtime) -> None:
    """The shell died of the TERM at once (143) whatever its command did with it; now
    the command's own end is recorded."""
    handler = ("import signal, sys, time; "
               "signal.signal(signal.SIGTERM, lambda *a: sys.exit(3)); "
               "print(\"ready\", flush=True); time.sleep(60)")
    run = await start(rt, f"python3 -c '{handler}'")
    await wait_log(rt, run, "ready")
    await cancel_run(rt, run.id)
    run, _ = await finished(rt, run)
    assert (run.status, run.exit_code) == (RunStatus.CANCELLED, 3)
    # Under the shell, as before: the shell's TERM death.
    run = await start(rt, f"python3 -c '{handler}' && true")
    await wait_log(rt, run, "ready")
    await cancel_run(rt, run.id)
    run, _ = await finished(rt, run)
    assert (run.status, run.exit_code) == (RunStatus.CANCELLED, 143)


@pytest.fixture
async def patient_rt(tmp_path: Path) -> AsyncIterator[Runtime]:
    """A kill grace longer than the launcher's own 2 s for what a command left running."""
    runtime = make_runtime(tmp_path / "state", kill_grace_s="4", round_interval_s="0.2")
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.stop()


async def test_a_cancel_of_a_command_that_ignores_term_ends_in_kill(
        patient_rt: Runtime) -> None:
    """Exec'd directly, a command that ignores TERM is the launcher's child: the kill
    grace's KILL ends it with its launcher (no receipt, no exit code), as for a `task …`
    form. Under the shell, the shell died of the TERM at once and its launcher ended the
    command 2 s later: 143 recorded."""
    rt = patient_rt
    ignore = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
              "print(\"ready\", flush=True); time.sleep(60)")
    for command, code in ((f"python3 -c '{ignore}'", None),
                          (f"python3 -c '{ignore}' && true", 143)):
        run = await start(rt, command)
        await wait_log(rt, run, "ready")
        await cancel_run(rt, run.id)
        run, _ = await finished(rt, run)
        assert (run.status, run.exit_code) == (RunStatus.CANCELLED, code), command


async def test_a_timeout_ends_a_simple_command(rt: Runtime) -> None:
    run, _ = await outcome(rt, f"python3 -c '{READY_THEN_WAIT}'", timeout_s=1)
    assert (run.status, run.exit_code, run.reason_code) == (RunStatus.TIMED_OUT, 143, "TIMEOUT")


async def test_the_program_is_found_on_the_tasks_own_path(rt: Runtime, tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "ql-h40b-tool"
    tool.write_text('#!/bin/sh\necho "tool $0 $1 $(cat /proc/$PPID/comm)"\n')
    tool.chmod(0o755)
    path = {"PATH": f"{bindir}:/usr/bin:/bin"}
    run, text = await outcome(rt, "ql-h40b-tool x", env=path)
    assert run.status is RunStatus.SUCCEEDED, text
    assert text == f"tool {tool} x ql-launch\n"   # found there, no shell in between
    # argv[0] is the word as written, as the shell passed it.
    (bindir / "ql-h40b-py").symlink_to(os.path.realpath("/usr/bin/python3"))
    run, text = await outcome(rt, "ql-h40b-py -c 'import sys; print(sys.orig_argv[0])'",
                              env=path)
    assert (run.status, text) == (RunStatus.SUCCEEDED, "ql-h40b-py\n")
    run, text = await outcome(rt, "ql-h40b-tool x")   # not on the base PATH: the shell's 127
    assert (run.exit_code, text) == (127, "/bin/sh: 1: ql-h40b-tool: not found\n")
