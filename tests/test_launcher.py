"""Black-box tests for the static launcher `ql-launch` (image/launcher).

Every test runs once per arch (x86_64, aarch64, armv7): natively for the host
arch, through qemu-user for the others (skipped, with the reason shown by -ra,
when the binary cannot be built or qemu is missing; a failure under CI). The
launcher is driven the way the control plane drives it: own session, stdin
/dev/null, stdout+stderr on the attempt's log, the token through an inherited
pipe.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import qledge
from _marked import MARK, kill_marked, marked

from _launcher import (
    ARCHES,
    HOST_ARCH,
    NR_LANDLOCK_RESTRICT_SELF,
    RECEIPT_KEYS,
    REPO,
    Attempt,
    Launcher,
    deny_hard_links,
    finish,
    kill_group,
    landlock_unavailable,
    locate,
    new_token,
    run,
    seccomp_errno,
    start,
    wait_until,
)
from support import unavailable

RECEIPT_RE = re.compile(
    rb'\{"schemaVersion":1,"runId":"[0-9a-f-]{36}","attemptId":"[0-9a-f-]{36}",'
    rb'"callbackSequence":[1-9][0-9]*,"token":"[A-Za-z0-9_-]{16,128}",'
    rb'"startedAtMs":(?:0|[1-9][0-9]*),"finishedAtMs":(?:0|[1-9][0-9]*),'
    rb'"exitCode":(?:0|[1-9][0-9]{0,2})(?:,"logBytes":(?:0|[1-9][0-9]*))?\}'
)
LEFTOVER_RECEIPT_RE = re.compile(RECEIPT_RE.pattern[:-2] + rb',"leftoverProcesses":[1-9][0-9]*\}')
IS_ROOT = os.geteuid() == 0


# The foreign arches run under qemu-user: the full suite's, not the quick loop's.
@pytest.fixture(scope="module", params=[
    arch if arch == HOST_ARCH else pytest.param(arch, marks=pytest.mark.slow)
    for arch in ARCHES])
def launcher(request: pytest.FixtureRequest) -> Launcher:
    found = locate(request.param)
    if isinstance(found, str):
        if request.param == HOST_ARCH:
            pytest.fail(f"host launcher unavailable: {found}")
        unavailable(f"{request.param}: {found}")
    return found


@pytest.fixture
def attempt(tmp_path: Path) -> Attempt:
    return Attempt(tmp_path)


def sh(script: str) -> list[str]:
    return ["/bin/sh", "-c", script]


def receipt_of(attempt: Attempt, *, leftovers: bool | None = False) -> dict[str, object]:
    """The receipt, checked canonical: the eight fields, the optional `logBytes`, then
    `leftoverProcesses` (a positive integer) only when the launcher had to end
    processes. None: either (a signal to the whole group races the command's
    children to their end)."""
    raw = attempt.receipt.read_bytes()
    if leftovers is None:
        leftovers = b"leftoverProcesses" in raw
    pattern = LEFTOVER_RECEIPT_RE if leftovers else RECEIPT_RE
    assert pattern.fullmatch(raw), raw.replace(attempt.token.encode(), b"<token>")
    pairs = json.loads(raw, object_pairs_hook=lambda kv: kv)
    keys = tuple(k for k, _ in pairs)
    tail = ("leftoverProcesses",) if leftovers else ()
    assert keys in ((*RECEIPT_KEYS, *tail), (*RECEIPT_KEYS, "logBytes", *tail)), keys
    return dict(pairs)


def assert_one_diagnostic(attempt: Attempt, needle: str = "") -> str:
    text = attempt.log_text()
    lines = [line for line in text.splitlines() if line.startswith("ql-launch: ")]
    assert len(lines) == 1, text
    assert needle in lines[0], text
    assert attempt.token not in text
    return lines[0]


def proc_stat(pid: int) -> list[str]:
    """Fields of /proc/<pid>/stat after the command name: state, ppid, pgrp, session..."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    return raw[raw.rindex(")") + 2 :].split()


# ---- command line -----------------------------------------------------------


def test_version(launcher: Launcher) -> None:
    out = subprocess.run(launcher.argv("--version"), capture_output=True, text=True, check=False)
    assert out.returncode == 0
    assert re.fullmatch(r"ql-launch \S+\n", out.stdout)
    if not os.environ.get("QLEDGE_LAUNCHER") and "build/launcher" in str(launcher.path):
        assert out.stdout == f"ql-launch {qledge.__version__}\n"


def test_no_arguments_prints_usage_and_exits_125(launcher: Launcher) -> None:
    out = subprocess.run(launcher.argv(), capture_output=True, text=True, check=False)
    assert out.returncode == 125
    assert out.stdout == ""
    assert out.stderr.startswith("usage: ql-launch --receipt-dir DIR")


def _drop(name: str) -> Callable[[list[str], Attempt], list[str]]:
    def edit(argv: list[str], _: Attempt) -> list[str]:
        i = argv.index(name)
        return argv[:i] + argv[i + 2 :]

    return edit


def _set(name: str, value: Callable[[str], str]) -> Callable[[list[str], Attempt], list[str]]:
    def edit(argv: list[str], _: Attempt) -> list[str]:
        argv = list(argv)
        i = argv.index(name)
        argv[i + 1] = value(argv[i + 1])
        return argv

    return edit


def _dir(make: Callable[[Path], Path]) -> Callable[[list[str], Attempt], list[str]]:
    return _set("--receipt-dir", lambda d: str(make(Path(d))))


def _symlinked(d: Path) -> Path:
    (d.parent / "link").symlink_to(d)
    return d.parent / "link"


def _a_file(d: Path) -> Path:
    (d.parent / "file").write_text("")
    return d.parent / "file"


def _same(argv: list[str], _: Attempt) -> list[str]:
    return argv


BAD_ARGS: dict[str, tuple[Callable[[list[str], Attempt], list[str]], bytes | None]] = {
    "missing-receipt-dir": (_drop("--receipt-dir"), None),
    "missing-run-id": (_drop("--run-id"), None),
    "missing-attempt-id": (_drop("--attempt-id"), None),
    "missing-sequence": (_drop("--sequence"), None),
    "missing-token-fd": (_drop("--token-fd"), None),
    "unknown-option": (lambda a, _: ["--verbose", *a], None),
    "option-twice": (lambda a, _: ["--sequence", "2", *a], None),
    "option-without-value": (lambda a, _: a[: a.index("--")][:-1], None),
    "run-id-upper-case": (_set("--run-id", str.upper), None),
    "run-id-no-hyphens": (_set("--run-id", lambda v: v.replace("-", "")), None),
    "run-id-braced": (_set("--run-id", lambda v: "{" + v + "}"), None),
    "attempt-id-short": (_set("--attempt-id", lambda v: v[:-1]), None),
    "attempt-id-long": (_set("--attempt-id", lambda v: v + "0"), None),
    "attempt-id-urn": (_set("--attempt-id", lambda v: "urn:uuid:" + v), None),
    "attempt-id-not-hex": (_set("--attempt-id", lambda v: "g" + v[1:]), None),
    "sequence-zero": (_set("--sequence", lambda _: "0"), None),
    "sequence-negative": (_set("--sequence", lambda _: "-1"), None),
    "sequence-leading-zero": (_set("--sequence", lambda _: "01"), None),
    "sequence-plus": (_set("--sequence", lambda _: "+1"), None),
    "sequence-float": (_set("--sequence", lambda _: "1.0"), None),
    "sequence-empty": (_set("--sequence", lambda _: ""), None),
    "sequence-overflow": (_set("--sequence", lambda _: str(2**63)), None),
    "token-fd-stdin": (_set("--token-fd", lambda _: "0"), None),
    "token-fd-stderr": (_set("--token-fd", lambda _: "2"), None),
    "token-fd-not-open": (_set("--token-fd", lambda _: "987"), None),
    "token-fd-text": (_set("--token-fd", lambda _: "three"), None),
    "token-empty": (_same, b""),
    "token-too-short": (_same, b"a" * 15),
    "token-too-long": (_same, b"a" * 129),
    "token-over-read-cap": (_same, b"a" * 300),
    "token-bad-char": (_same, b"a" * 20 + b"+"),
    "token-space": (_same, b"a" * 10 + b" " + b"a" * 10),
    "token-nul": (_same, b"a" * 20 + b"\0"),
    "token-two-newlines": (_same, b"a" * 20 + b"\n\n"),
    "no-double-dash": (lambda a, _: [x for x in a if x != "--"], None),
    "no-command": (lambda a, _: a[: a.index("--") + 1], None),
    "empty-command": (lambda a, _: [*a[: a.index("--") + 1], ""], None),
    "receipt-dir-empty": (_set("--receipt-dir", lambda _: ""), None),
    "receipt-dir-missing": (_dir(lambda d: d / "nope"), None),
    "receipt-dir-is-a-file": (_dir(_a_file), None),
    "receipt-dir-symlink": (_dir(_symlinked), None),
    "keep-background-twice": (lambda a, _: ["--keep-background", "--keep-background", *a], None),
    "sh-fallback-twice": (lambda a, _: ["--sh-fallback", "--sh-fallback", *a], None),
    "deny-without-value": (lambda a, _: [*a[: a.index("--")], "--deny"], None),
    "deny-relative": (lambda a, _: ["--deny", "logs", *a], None),
    "deny-missing": (lambda a, at: ["--deny", str(at.root / "nope"), *a], None),
    "deny-a-file": (lambda a, at: ["--deny", str(_a_file(at.receipt_dir)), *a], None),
    "deny-root": (lambda a, _: ["--deny", "/", *a], None),
    "deny-nine": (lambda a, at: [*(x for _ in range(9) for x in ("--deny", str(at.root))), *a],
                  None),
    "cwd-relative": (lambda a, _: ["--cwd", "scripts", *a], None),
    "cwd-twice": (lambda a, at: ["--cwd", str(at.root), "--cwd", str(at.root), *a], None),
    "isolation-without-deny": (lambda a, _: ["--isolation", "auto", *a], None),
    "isolation-bogus": (lambda a, at: ["--deny", str(at.root / "logs"), "--isolation", "on",
                                       *a], None),
    "isolation-twice": (lambda a, at: ["--deny", str(at.root / "logs"), "--isolation", "auto",
                                       "--isolation", "auto", *a], None),
}


@pytest.mark.parametrize("case", BAD_ARGS)
def test_bad_arguments_exit_125_and_spawn_nothing(
    launcher: Launcher, attempt: Attempt, case: str
) -> None:
    edit, token = BAD_ARGS[case]
    marker = attempt.root / "spawned"
    good = [*attempt.args(), "--token-fd", "{fd}", "--", *sh(f"touch {marker}")]
    code = run(launcher, attempt, [], argv=edit(good, attempt), token=token)
    assert code == 125
    assert not marker.exists()
    assert attempt.entries() == []
    assert_one_diagnostic(attempt)


def test_group_leader_that_is_not_session_leader_is_refused(
    launcher: Launcher, attempt: Attempt
) -> None:
    marker = attempt.root / "spawned"
    code = run(launcher, attempt, sh(f"touch {marker}"), start_new_session=False, process_group=0)
    assert code == 125
    assert not marker.exists()
    assert_one_diagnostic(attempt, "setsid")


# ---- exit codes ---------------------------------------------------------------


def test_every_exit_code_round_trips(launcher: Launcher, tmp_path: Path) -> None:
    # All 256 codes on every arch: under qemu-user this costs ~2 s with 16 in flight,
    # so no sampling is needed.
    codes = range(256)

    def one(code: int) -> tuple[int, int, object]:
        a = Attempt(tmp_path / str(code))
        got = run(launcher, a, sh(f"exit {code}"))
        return code, got, receipt_of(a)["exitCode"]

    with ThreadPoolExecutor(max_workers=16) as pool:
        for code, got, in_receipt in pool.map(one, codes):
            assert (got, in_receipt) == (code, code)


def test_receipt_records_the_logs_length_once_the_task_is_done(
        launcher: Launcher, tmp_path: Path) -> None:
    """logBytes = the log's size when the task is done (what a power cut may take from
    an unsynced log): measured after the leftovers were ended (step 8), so what they
    write on their way out (here a TERM trap's line) is covered too."""
    a = Attempt(tmp_path / "a")
    ready = tmp_path / "ready"
    got = run(launcher, a, sh(
        f"printf 'hello\\n'; (trap 'echo bye; exit 0' TERM; touch {ready};"
        " while :; do sleep 0.01; done) & "
        f"while [ ! -e {ready} ]; do sleep 0.01; done; printf 'x%.0s' $(seq 1 5000); exit 3"))
    assert got == 3
    doc = receipt_of(a, leftovers=True)
    assert isinstance(doc["leftoverProcesses"], int) and doc["leftoverProcesses"] >= 1
    # (the subshell's shell may also report its sleep "Terminated")
    assert a.log_text().startswith("hello\n" + "x" * 5000) and a.log_text().endswith("bye\n")
    assert doc["logBytes"] == a.log.stat().st_size


def test_kept_background_output_after_the_receipt_is_not_counted(
        launcher: Launcher, tmp_path: Path) -> None:
    """With --keep-background the task's daemons outlive the receipt: logBytes is the
    size when the command exited, and their later output only makes the log longer
    (never "truncated")."""
    a = Attempt(tmp_path / "a")
    gate = tmp_path / "gate"
    script = (f"printf 'hello\\n'; (while [ ! -e {gate} ]; do sleep 0.01; done; echo late) & "
              "printf 'x%.0s' $(seq 1 5000); exit 3")
    argv = [*a.args(), "--token-fd", "{fd}", "--keep-background", "--", *sh(script)]
    proc = start(launcher, a, [], argv=argv)
    try:
        assert proc.wait(timeout=30) == 3
        doc = receipt_of(a)
        assert doc["logBytes"] == len("hello\n") + 5000 == a.log.stat().st_size
        gate.touch()
        wait_until(lambda: a.log_text().endswith("late\n"), what="the kept process's output")
        assert a.log.stat().st_size == len("hello\n") + 5000 + len("late\n")
        assert receipt_of(a)["logBytes"] == len("hello\n") + 5000
    finally:
        gate.touch()
        kill_group(proc.pid)


def test_receipt_has_no_log_length_when_stdout_is_not_a_file(
        launcher: Launcher, attempt: Attempt) -> None:
    proc = start(launcher, attempt, sh("echo to-a-pipe; exit 0"), stdout=subprocess.PIPE)
    assert finish(proc) == 0
    assert "logBytes" not in receipt_of(attempt)


@pytest.mark.parametrize(
    "sig", [signal.SIGKILL, signal.SIGSEGV, signal.SIGTERM], ids=lambda s: s.name
)
def test_child_killed_by_signal_is_128_plus_n(
    launcher: Launcher, attempt: Attempt, sig: signal.Signals
) -> None:
    code = run(launcher, attempt, sh(f"ulimit -c 0; kill -{sig.name[3:]} $$; exit 3"))
    assert code == 128 + sig
    assert receipt_of(attempt)["exitCode"] == 128 + sig


@pytest.mark.parametrize(
    ("command", "expected", "needle"),
    [
        (["/nonexistent/ql-missing"], 127, "exec /nonexistent/ql-missing: No such file"),
        (["ql-launch-test-no-such-command"], 127, "No such file"),
        (["/etc/passwd/x"], 127, "Not a directory"),
        (sh("ql-launch-test-no-such-command"), 127, ""),
        (["{root}/not-executable"], 126, "Permission denied"),
        (["{root}/garbage"], 126, "Exec format error"),
        (["{root}"], 126, "Permission denied"),
    ],
    ids=["absolute", "path-search", "enotdir", "via-sh", "no-x-bit", "enoexec", "directory"],
)
def test_exec_failures_are_127_or_126(
    launcher: Launcher, attempt: Attempt, command: list[str], expected: int, needle: str
) -> None:
    (attempt.root / "not-executable").write_text("#!/bin/sh\nexit 0\n")
    (attempt.root / "not-executable").chmod(0o644)
    (attempt.root / "garbage").write_bytes(b"\x7fNOT-AN-ELF\0\0\0\0")
    (attempt.root / "garbage").chmod(0o755)
    command = [c.replace("{root}", str(attempt.root)) for c in command]
    assert run(launcher, attempt, command) == expected
    assert receipt_of(attempt)["exitCode"] == expected
    if needle:
        assert_one_diagnostic(attempt, needle)


def test_sh_fallback_execs_the_command_itself(launcher: Launcher, attempt: Attempt) -> None:
    # A task's plain command without a shell (issue 40): the launcher's child is the
    # program, and no shell is involved while the exec succeeds.
    out = attempt.root / "who"
    tool = attempt.root / "tool"
    tool.write_text(f"#!/bin/sh\necho $PPID > {out}\nexit 7\n")
    tool.chmod(0o755)
    argv = [*attempt.args(), "--token-fd", "{fd}", "--sh-fallback", "--", str(tool)]
    proc = start(launcher, attempt, [], argv=argv)
    assert finish(proc) == 7
    assert out.read_text().strip() == str(proc.pid)   # its parent is the launcher
    assert receipt_of(attempt)["exitCode"] == 7
    assert attempt.log_text() == ""


@pytest.mark.parametrize(
    ("command", "expected", "says"),
    [
        (["ql-launch-test-no-such-command", "a"], 127,
         "/bin/sh: 1: ql-launch-test-no-such-command: not found"),
        (["/nonexistent/ql-missing"], 127, "/bin/sh: 1: /nonexistent/ql-missing: not found"),
        (["/etc/passwd/x"], 127, "/bin/sh: 1: /etc/passwd/x: not found"),
        (["{root}/not-executable"], 126, "/bin/sh: 1: {root}/not-executable: Permission denied"),
        (["{root}"], 126, "/bin/sh: 1: {root}: Permission denied"),
        (["{root}/loop"], 127, "/bin/sh: 1: {root}/loop: Too many levels of symbolic links"),
        (["{root}/no-shebang", "a b", "c"], 5, "script a b|c"),
    ],
    ids=["path-search", "absolute", "enotdir", "no-x-bit", "directory", "eloop", "enoexec"],
)
def test_sh_fallback_failures_are_the_shells(
    launcher: Launcher, attempt: Attempt, command: list[str], expected: int, says: str
) -> None:
    """With --sh-fallback an exec failure is judged by `/bin/sh -c '"$@"'`: the status
    and the one line `sh -c "<command>"` gives (a file without `#!` runs as a script)."""
    root = attempt.root
    (root / "not-executable").write_text("#!/bin/sh\nexit 0\n")
    (root / "not-executable").chmod(0o644)
    (root / "no-shebang").write_text('printf "script %s|%s\\n" "$1" "$2"\nexit 5\n')
    (root / "no-shebang").chmod(0o755)
    (root / "loop").symlink_to(root / "loop")
    command = [c.replace("{root}", str(root)) for c in command]
    argv = [*attempt.args(), "--token-fd", "{fd}", "--sh-fallback", "--", *command]
    assert run(launcher, attempt, [], argv=argv) == expected
    assert receipt_of(attempt)["exitCode"] == expected
    text = attempt.log_text()
    assert text == says.replace("{root}", str(root)) + "\n", text
    # The same words under the shell, as the task ran before: the same status and line.
    quoted = " ".join(shlex.quote(c) for c in command)
    before = subprocess.run(["/bin/sh", "-c", quoted], capture_output=True, text=True)
    assert (before.returncode, before.stdout + before.stderr) == (expected, text)


def test_cwd_is_the_commands_working_directory(launcher: Launcher, attempt: Attempt) -> None:
    # The `task` form runs a script from its folder without a shell to `cd` first.
    where = attempt.root / "scripts"
    where.mkdir()
    out = attempt.root / "cwd.txt"
    argv = [*attempt.args(), "--token-fd", "{fd}", "--cwd", str(where), "--",
            *sh(f"pwd > {out}")]
    assert run(launcher, attempt, [], argv=argv) == 0
    assert out.read_text().strip() == str(where)
    assert receipt_of(attempt)["exitCode"] == 0


def test_a_missing_cwd_is_the_commands_failure_127(launcher: Launcher, attempt: Attempt) -> None:
    marker = attempt.root / "spawned"
    argv = [*attempt.args(), "--token-fd", "{fd}", "--cwd", str(attempt.root / "gone"), "--",
            *sh(f"touch {marker}")]
    assert run(launcher, attempt, [], argv=argv) == 127
    assert not marker.exists()
    assert receipt_of(attempt)["exitCode"] == 127
    assert_one_diagnostic(attempt, "chdir --cwd")


def test_only_the_direct_child_counts(launcher: Launcher, attempt: Attempt) -> None:
    # A background grandchild still holding the log must not keep the launcher
    # waiting: the command's end is the end; the launcher ends what it left.
    t0 = time.monotonic()
    proc = start(launcher, attempt, sh("sleep 30 & exit 4"))
    try:
        assert proc.wait(timeout=10) == 4
        assert time.monotonic() - t0 < 10
    finally:
        kill_group(proc.pid)
    receipt = receipt_of(attempt, leftovers=True)
    assert (receipt["exitCode"], receipt["leftoverProcesses"]) == (4, 1)


def test_orphaned_grandchildren_are_reaped(launcher: Launcher, attempt: Attempt) -> None:
    """A grandchild orphaned while the command runs is re-parented to the launcher
    (PR_SET_CHILD_SUBREAPER), not to init, and reaped by it when it exits."""
    if launcher.emulated:
        pytest.skip("qemu-user does not implement PR_SET_CHILD_SUBREAPER")
    pidfile, done = attempt.root / "grandchild.pid", attempt.root / "done"
    # The subshell starts the sleep and exits at once: the sleep is orphaned.
    script = (f"(sleep 0.5 & echo $! > {pidfile}); echo ready;"
              f" while [ ! -e {done} ]; do sleep 0.05; done; exit 0")
    proc = start(launcher, attempt, sh(script))
    try:
        _wait_ready(attempt)
        grandchild = int(pidfile.read_text())
        parent = proc_stat(grandchild)[1]  # the subshell has exited: this is the new parent
        assert parent == str(proc.pid), (
            f"orphan re-parented to {parent}, not to the launcher {proc.pid}")
        # It exits after 0.5 s; the launcher reaps it at once (no zombie left behind)
        # while the command still runs.
        wait_until(lambda: not Path(f"/proc/{grandchild}").exists(), timeout=10,
                   what=f"the orphan {grandchild} reaped")
        assert proc.poll() is None
        done.touch()
        assert finish(proc) == 0
    finally:
        kill_group(proc.pid)
    assert receipt_of(attempt)["exitCode"] == 0


# ---- signals ---------------------------------------------------------------


def _wait_ready(attempt: Attempt) -> None:
    wait_until(lambda: "ready" in attempt.log_text(), what="the child to be ready")


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT], ids=lambda s: s.name
)
def test_signal_to_launcher_reaches_trapping_child(
    launcher: Launcher, attempt: Attempt, sig: signal.Signals
) -> None:
    name = sig.name[3:]
    script = f'trap "exit 7" {name}; echo ready; while :; do sleep 0.05; done'
    proc = start(launcher, attempt, sh(script))
    try:
        _wait_ready(attempt)
        proc.send_signal(sig)
        assert proc.wait(timeout=20) == 7  # the launcher survived and reports the child
    finally:
        kill_group(proc.pid)
    assert receipt_of(attempt, leftovers=None)["exitCode"] == 7


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_signal_to_launcher_kills_default_child(
    launcher: Launcher, attempt: Attempt, sig: signal.Signals
) -> None:
    proc = start(launcher, attempt, sh("echo ready; sleep 30; exit 0"))
    try:
        _wait_ready(attempt)
        proc.send_signal(sig)
        assert proc.wait(timeout=20) == 128 + sig
    finally:
        kill_group(proc.pid)
    assert receipt_of(attempt, leftovers=None)["exitCode"] == 128 + sig


def test_term_to_whole_group_from_control_plane(launcher: Launcher, attempt: Attempt) -> None:
    proc = start(launcher, attempt, sh("echo ready; sleep 30; exit 0"))
    try:
        _wait_ready(attempt)
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=20) == 143
    finally:
        kill_group(proc.pid)
    # `sleep` got the TERM too, but may still be on its way out when sh has ended.
    assert receipt_of(attempt, leftovers=None)["exitCode"] == 143


# ---- session -----------------------------------------------------------------

PARENT = """
import os, subprocess, sys, time
fd, pidfile = int(sys.argv[1]), sys.argv[2]
p = subprocess.Popen(sys.argv[3:], stdin=subprocess.DEVNULL, pass_fds=(fd,))
os.close(fd)
with open(pidfile + ".tmp", "w") as f:
    f.write(str(p.pid))
os.rename(pidfile + ".tmp", pidfile)
time.sleep(120)
"""


def test_own_session_survives_killing_the_parents_group(
    launcher: Launcher, attempt: Attempt
) -> None:
    pidfile = attempt.root / "launcher.pid"
    r, w = os.pipe()
    os.write(w, attempt.token.encode())
    os.close(w)
    command = sh("echo ready; sleep 1; exit 3")
    args = launcher.argv(*attempt.args(), "--token-fd", str(r), "--", *command)
    with open(attempt.log, "ab") as log:
        parent = subprocess.Popen(
            [sys.executable, "-c", PARENT, str(r), str(pidfile), *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            pass_fds=(r,),
            start_new_session=True,  # the "control plane" group we are going to kill
        )
    os.close(r)
    lpid = 0
    try:
        wait_until(pidfile.exists, what="the launcher pid")
        lpid = int(pidfile.read_text())
        _wait_ready(attempt)
        _, _, pgrp, session = proc_stat(lpid)[:4]
        assert (int(pgrp), int(session)) == (lpid, lpid)
        assert os.getpgid(parent.pid) == parent.pid != lpid
        children = Path(f"/proc/{lpid}/task/{lpid}/children")
        for kid in children.read_text().split() if children.exists() else []:
            assert int(proc_stat(int(kid))[2]) == lpid  # the user command shares our group
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        wait_until(attempt.receipt.exists, what="the receipt after the parent died")
    finally:
        kill_group(parent.pid)
        parent.wait(timeout=10)
        if lpid:
            wait_until(lambda: not Path(f"/proc/{lpid}").exists()
                       or proc_stat(lpid)[0] == "Z", what="launcher exit")  # fmt: skip
    assert receipt_of(attempt)["exitCode"] == 3


# ---- secrecy and descriptors ----------------------------------------------------


def test_token_stays_out_of_argv_env_log_and_child_fds(
    launcher: Launcher, attempt: Attempt
) -> None:
    stray = os.open("/dev/null", os.O_RDONLY)  # inherited by the launcher, not the child
    env = {**os.environ, "QLTEST_MARK": "visible"}
    try:
        proc = start(
            launcher, attempt, sh('echo "child=$$"; sleep 1; exit 0'), pass_fds=(stray,), env=env
        )
    finally:
        os.close(stray)
    token = attempt.token.encode()
    try:
        wait_until(lambda: "child=" in attempt.log_text(), what="the child pid")
        child = int(re.search(r"child=(\d+)", attempt.log_text()).group(1))  # type: ignore[union-attr]
        assert sorted(int(fd) for fd in os.listdir(f"/proc/{child}/fd")) == [0, 1, 2]
        if not launcher.emulated:  # qemu-user holds fds of its own
            # The launcher dropped the stray fd too: besides stdio it keeps only the
            # receipt directory (a leaked listening socket would pin the port).
            held = [os.readlink(f"/proc/{proc.pid}/fd/{fd}")
                    for fd in os.listdir(f"/proc/{proc.pid}/fd") if int(fd) > 2]
            assert held == [str(attempt.receipt_dir)], held
        child_env = Path(f"/proc/{child}/environ").read_bytes()
        assert b"QLTEST_MARK=visible" in child_env
        assert token not in child_env
        assert token not in Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert token not in Path(f"/proc/{proc.pid}/environ").read_bytes()
        assert int(proc_stat(child)[2]) == proc.pid  # child in the launcher's group
        assert finish(proc) == 0
    finally:
        kill_group(proc.pid)
    assert token not in attempt.log.read_bytes()
    assert receipt_of(attempt)["token"] == attempt.token


def test_without_close_range_leaked_fds_are_closed_from_proc(
    launcher: Launcher, attempt: Attempt
) -> None:
    """close_range (Linux 5.9) unavailable: the launcher and the child close what
    /proc/self/fd lists, more entries than one read of it returns."""
    if launcher.emulated:
        pytest.skip("the seccomp filter is written for x86_64 hosts")
    preexec = seccomp_errno({NR_CLOSE_RANGE: errno.ENOSYS})
    if preexec is None:
        pytest.skip(f"the seccomp filter is written for x86_64 hosts, not {HOST_ARCH}")
    strays = [os.open("/dev/null", os.O_RDONLY) for _ in range(100)]
    try:
        proc = start(launcher, attempt, sh('echo "child=$$"; sleep 1; exit 0'),
                     pass_fds=strays, preexec_fn=preexec)
    finally:
        for fd in strays:
            os.close(fd)
    try:
        wait_until(lambda: "child=" in attempt.log_text(), what="the child pid")
        child = int(re.search(r"child=(\d+)", attempt.log_text()).group(1))  # type: ignore[union-attr]
        assert sorted(int(fd) for fd in os.listdir(f"/proc/{child}/fd")) == [0, 1, 2]
        held = [os.readlink(f"/proc/{proc.pid}/fd/{fd}")
                for fd in os.listdir(f"/proc/{proc.pid}/fd") if int(fd) > 2]
        assert held == [str(attempt.receipt_dir)], held
        assert finish(proc) == 0
    finally:
        kill_group(proc.pid)
    assert receipt_of(attempt)["exitCode"] == 0


def test_token_with_one_trailing_newline_is_accepted(launcher: Launcher, attempt: Attempt) -> None:
    assert run(launcher, attempt, ["true"], token=attempt.token.encode() + b"\n") == 0
    assert receipt_of(attempt)["token"] == attempt.token


# ---- the receipt -----------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_receipt_is_canonical(launcher: Launcher, tmp_path: Path, umask: int) -> None:
    attempt = Attempt(tmp_path, sequence=2**63 - 1, token=new_token(128))
    before = int(time.time() * 1000)
    assert run(launcher, attempt, sh("sleep 0.05; exit 42"), umask=umask) == 42
    after = int(time.time() * 1000)
    receipt = receipt_of(attempt)
    assert receipt == {
        "schemaVersion": 1,
        "runId": attempt.run_id,
        "attemptId": attempt.attempt_id,
        "callbackSequence": 2**63 - 1,
        "token": attempt.token,
        "startedAtMs": receipt["startedAtMs"],
        "finishedAtMs": receipt["finishedAtMs"],
        "exitCode": 42,
        "logBytes": 0,
    }
    started, finished = receipt["startedAtMs"], receipt["finishedAtMs"]
    assert isinstance(started, int) and isinstance(finished, int)
    assert before <= started <= finished <= after
    assert finished - started >= 40
    raw = attempt.receipt.read_bytes()
    assert len(raw) <= 4096 and not raw.endswith(b"\n")
    assert stat.S_IMODE(attempt.receipt.stat().st_mode) == 0o600
    assert attempt.entries() == [attempt.receipt.name]  # no temp file left behind


def test_existing_receipt_is_not_overwritten(launcher: Launcher, attempt: Attempt) -> None:
    attempt.receipt.write_bytes(b"earlier receipt")
    attempt.receipt.chmod(0o600)
    assert run(launcher, attempt, sh("exit 9")) == 9
    assert attempt.receipt.read_bytes() == b"earlier receipt"
    assert attempt.entries() == [attempt.receipt.name]
    assert_one_diagnostic(attempt, "already exists, not overwritten: File exists")


# ---- publication failures (root: mounts) --------------------------------------------

# Under CI (root) these always run: a skip there would hide an unproven promise.
needs_root = pytest.mark.skipif(not IS_ROOT and not os.environ.get("CI"),
                                reason="needs root to mount test filesystems")


@contextlib.contextmanager
def mounted(args: list[str], where: Path, what: str) -> Iterator[Path]:
    where.mkdir(exist_ok=True)
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not os.path.ismount(where):
        unavailable(f"cannot mount {what}: {done.stderr.strip() or done.returncode}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], capture_output=True, check=False)
        if os.path.ismount(where):
            subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def _tmpfs(where: Path, options: str) -> contextlib.AbstractContextManager[Path]:
    return mounted(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], where, "tmpfs")


def _assert_failed_cleanly(attempt: Attempt, code: int, needle: str) -> None:
    assert code == 5  # the user command's own exit code survives
    assert attempt.entries() == []  # no final receipt, no temp file
    assert_one_diagnostic(attempt, needle)


@needs_root
def test_enospc_leaves_nothing_and_keeps_exit_code(launcher: Launcher, attempt: Attempt) -> None:
    with _tmpfs(attempt.root / "full", "size=4k,mode=0700") as mnt:
        (mnt / "shard").mkdir(mode=0o700)
        filler = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            with contextlib.suppress(OSError):
                while True:
                    os.write(filler, b"\0" * 4096)
        finally:
            os.close(filler)
        with pytest.raises(OSError) as full:
            (mnt / "probe").write_bytes(b"x")
        assert full.value.errno == errno.ENOSPC
        (mnt / "probe").unlink(missing_ok=True)
        attempt.receipt_dir = mnt / "shard"
        _assert_failed_cleanly(attempt, run(launcher, attempt, sh("exit 5")), "No space left")


@needs_root
def test_read_only_dir_leaves_nothing_and_keeps_exit_code(
    launcher: Launcher, attempt: Attempt
) -> None:
    with _tmpfs(attempt.root / "ro", "size=64k,mode=0700") as mnt:
        (mnt / "shard").mkdir(mode=0o700)
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        attempt.receipt_dir = mnt / "shard"
        _assert_failed_cleanly(attempt, run(launcher, attempt, sh("exit 5")), "Read-only")


def _renameat2_noreplace_works(directory: Path) -> bool:
    a, b = directory / "probe-a", directory / "probe-b"
    a.write_bytes(b"probe")
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        at_fdcwd, rename_noreplace = -100, 1
        rc = libc.renameat2(at_fdcwd, bytes(a), at_fdcwd, bytes(b), rename_noreplace)
        return bool(rc == 0)
    finally:
        a.unlink(missing_ok=True)
        b.unlink(missing_ok=True)


def _links_work(directory: Path) -> bool:
    a, b = directory / "probe-a", directory / "probe-b"
    a.write_bytes(b"probe")
    try:
        os.link(a, b)
        return True
    except OSError:
        return False
    finally:
        a.unlink(missing_ok=True)
        b.unlink(missing_ok=True)


@contextlib.contextmanager
def vfat(image: Path, where: Path) -> Iterator[str]:
    subprocess.run(["truncate", "-s", "4M", str(image)], check=True)
    mkfs = subprocess.run(["mkfs.vfat", str(image)], capture_output=True, text=True, check=False)
    if mkfs.returncode != 0:
        unavailable(f"mkfs.vfat unavailable: {mkfs.stderr.strip()}")
    where.mkdir()
    reasons = []
    for how, args in (
        ("kernel vfat", ["mount", "-o", "loop", str(image), str(where)]),
        ("fusefat", ["fusefat", "-o", "rw+", str(image), str(where)]),
    ):
        try:
            done = subprocess.run(args, capture_output=True, text=True, check=False)
        except FileNotFoundError as e:
            reasons.append(f"{how}: {e}")
            continue
        if done.returncode == 0 and os.path.ismount(where):
            break
        reasons.append(f"{how}: {done.stderr.strip().splitlines()[-1:]}")
    else:
        unavailable(f"cannot mount a vfat image: {reasons}")
    try:
        yield how
    finally:
        for umount in (["umount", str(where)], ["fusermount", "-u", str(where)]):
            if os.path.ismount(where):
                subprocess.run(umount, capture_output=True, check=False)
        if os.path.ismount(where):
            subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


@needs_root
def test_filesystem_without_hard_links(launcher: Launcher, attempt: Attempt) -> None:
    with vfat(attempt.root / "fat.img", attempt.root / "fat") as how:
        shard = attempt.root / "fat" / "shard"
        shard.mkdir()
        links = _links_work(shard)
        noreplace = _renameat2_noreplace_works(shard)
        attempt.receipt_dir = shard
        code = run(launcher, attempt, sh("exit 5"))
        assert code == 5, how
        if links or noreplace:
            # Published by link() or by the renameat2(RENAME_NOREPLACE) fallback.
            assert attempt.entries() == [attempt.receipt.name], how
            assert receipt_of(attempt)["exitCode"] == 5
        else:
            # Neither primitive exists here (e.g. fusefat: link → EPERM,
            # RENAME_NOREPLACE → EINVAL): publication must fail cleanly.
            _assert_failed_cleanly(attempt, code, "publish receipt")


def _links_denied() -> Callable[[], None]:
    preexec = deny_hard_links()
    if preexec is None:
        pytest.skip(f"the seccomp link() filter is written for x86_64 hosts, not {HOST_ARCH}")
    return preexec


def test_renameat2_fallback_publishes_when_links_fail(launcher: Launcher, attempt: Attempt) -> None:
    assert run(launcher, attempt, sh("exit 6"), preexec_fn=_links_denied()) == 6
    assert receipt_of(attempt)["exitCode"] == 6
    assert stat.S_IMODE(attempt.receipt.stat().st_mode) == 0o600
    assert attempt.entries() == [attempt.receipt.name]
    assert "ql-launch:" not in attempt.log_text()


def test_renameat2_fallback_does_not_overwrite(launcher: Launcher, attempt: Attempt) -> None:
    attempt.receipt.write_bytes(b"earlier receipt")
    assert run(launcher, attempt, sh("exit 6"), preexec_fn=_links_denied()) == 6
    assert attempt.receipt.read_bytes() == b"earlier receipt"
    assert attempt.entries() == [attempt.receipt.name]
    assert_one_diagnostic(attempt, "already exists, not overwritten: File exists")


# ---- 32-bit targets ----------------------------------------------------------


def test_log_already_past_2_gib_is_appended_to(launcher: Launcher, attempt: Attempt) -> None:
    """The launcher and its command keep appending to a log over 2 GiB (sparse).

    The command is this very launcher (`--version`): on armv7 a 32-bit musl
    program writes at an offset over 2**31 through the inherited O_APPEND fd.
    Under qemu-user the syscalls are the host kernel's; what this covers is
    that nothing in the launcher (its 64-bit off_t, asserted at compile time)
    stats, seeks or reopens the log in a way that breaks past 2 GiB.
    """
    size = 3 * 2**30
    with open(attempt.log, "wb") as f:
        f.truncate(size)
    assert run(launcher, attempt, launcher.argv("--version")) == 0
    assert receipt_of(attempt)["exitCode"] == 0
    with open(attempt.log, "rb") as f:
        f.seek(size)
        assert re.fullmatch(rb"ql-launch \S+\n", f.read())


def test_abi_flags_give_a_32_bit_glibc_build_64_bit_time_and_off(tmp_path: Path) -> None:
    """The Makefile's ABI_FLAGS are what makes a glibc armhf build 2038-safe:
    ql-launch.c's static asserts fail without them (musl needs none)."""
    try:
        import ziglang  # noqa: F401
    except ImportError:
        unavailable("the ziglang wheel (requirements-dev) cross-compiles the check")
    makefile = (REPO / "image/launcher/Makefile").read_text()
    flags = re.search(r"^ABI_FLAGS := (.+)$", makefile, re.M)
    assert flags is not None
    cc = [sys.executable, "-m", "ziglang", "cc", "-target", "arm-linux-gnueabihf.2.36",
          "-std=c11", "-Wall", "-Wextra", "-Werror", '-DQL_VERSION="t"', "-c",
          "-o", str(tmp_path / "ql-launch.o"), str(REPO / "image/launcher/ql-launch.c")]
    with_flags = subprocess.run([*cc, *flags.group(1).split()], capture_output=True, text=True,
                                check=False)
    assert with_flags.returncode == 0, with_flags.stderr
    without = subprocess.run(cc, capture_output=True, text=True, check=False)
    assert without.returncode != 0
    assert "time_t must be 64-bit" in without.stderr and "off_t must be 64-bit" in without.stderr


# ---- what the command leaves running ------------------------------------------

def _since_the_command_ended(attempt: Attempt) -> float:
    """Seconds from the command's end (the receipt's finishedAtMs) to now, the
    launcher having exited: step 8's share alone, so a starved CPU slowing the
    command's own start and forks does not count against the grace."""
    now = time.time()
    finished = json.loads(attempt.receipt.read_bytes())["finishedAtMs"]
    assert isinstance(finished, int)
    return now - finished / 1000


@pytest.fixture
def no_marked() -> Iterator[None]:
    kill_marked()
    try:
        yield
    finally:
        kill_marked()


def test_background_processes_are_ended_and_counted(
    launcher: Launcher, attempt: Attempt, no_marked: None
) -> None:
    # 200 plain background children, one that left the session (setsid) and has a
    # child of its own in its new session, and a pair that ignores TERM (needs KILL).
    script = (f"i=0; while [ $i -lt 200 ]; do sleep {MARK} & i=$((i+1)); done; "
              f"setsid sh -c 'sleep {MARK} & exec sleep {MARK}' & "
              f"sh -c 'trap \"\" TERM; sleep {MARK}' & "
              "sleep 0.5; exit 3")
    proc = start(launcher, attempt, sh(script))
    try:
        assert proc.wait(timeout=60) == 3
        took = _since_the_command_ended(attempt)
        # Looked at before our group kill could end what the launcher did not.
        survivors = marked()
    finally:
        kill_group(proc.pid)
    if launcher.emulated:
        # qemu-user has no PR_SET_CHILD_SUBREAPER: the pair that left the session
        # went to init, out of reach; the session and group are still ended.
        assert receipt_of(attempt, leftovers=True)["leftoverProcesses"] == 202
        assert len(survivors) == 2
        return
    assert receipt_of(attempt, leftovers=True)["leftoverProcesses"] == 204
    assert survivors == []
    # TERM, the 2 s grace for the pair that ignores it, KILL: not the 5 s more.
    assert 1.9 < took < 6, took


def test_leftovers_that_take_term_end_without_the_grace(
    launcher: Launcher, attempt: Attempt, no_marked: None
) -> None:
    assert run(launcher, attempt, sh(f"sleep {MARK} & sleep {MARK} & exit 0")) == 0
    assert _since_the_command_ended(attempt) < 1.8
    assert receipt_of(attempt, leftovers=True)["leftoverProcesses"] == 2
    assert marked() == []


def test_keep_background_leaves_them_running(
    launcher: Launcher, attempt: Attempt, no_marked: None
) -> None:
    argv = [*attempt.args(), "--token-fd", "{fd}", "--keep-background", "--",
            *sh(f"sleep {MARK} & exit 0")]
    # start + wait, not run(): run() would kill what is left in the group.
    assert start(launcher, attempt, [], argv=argv).wait(timeout=30) == 0
    assert "leftoverProcesses" not in receipt_of(attempt)
    # Still there (once the forked shell has exec'd sleep) and still running later.
    wait_until(lambda: len(marked()) == 1, what="the kept background sleep")
    time.sleep(0.3)
    assert len(marked()) == 1


NR_PIDFD_OPEN = 434  # the same number in every syscall table since Linux 5.3
NR_CLOSE_RANGE = 436  # likewise, since Linux 5.9

# A parent that shrugs TERM off (a handler, reset by exec) keeps a TERM-trapping
# child that is in the task's session but is no child of the launcher's.
_SHRUGGER = ("import signal, subprocess, sys, time; "
             "signal.signal(signal.SIGTERM, lambda *a: None); "
             "subprocess.Popen(['/bin/sh', '-c', sys.argv[2], sys.argv[1]]); "
             "time.sleep(float(sys.argv[1]))")


@pytest.mark.parametrize("refused", [errno.ENOSYS, errno.EPERM], ids=["ENOSYS", "EPERM"])
def test_leftovers_get_term_where_pidfd_open_is_refused(
    launcher: Launcher, attempt: Attempt, no_marked: None, refused: int
) -> None:
    """No pidfd_open (a kernel before 5.3: ENOSYS; a seccomp profile: EPERM, the case
    the control plane falls back for too): a session member whose parent is alive
    still gets TERM (a plain kill), not only KILL once it is re-parented."""
    preexec = seccomp_errno({NR_PIDFD_OPEN: refused})
    if preexec is None:
        pytest.skip(f"the seccomp filter is written for x86_64 hosts, not {HOST_ARCH}")
    ready = attempt.root / "ready"
    inner = f"trap 'echo bye; exit 0' TERM; touch {ready}; while :; do sleep 0.01; done"
    script = (f"{shlex.quote(sys.executable)} -c {shlex.quote(_SHRUGGER)} {MARK} "
              f"{shlex.quote(inner)} & while [ ! -e {ready} ]; do sleep 0.01; done; exit 0")
    assert finish(start(launcher, attempt, sh(script), preexec_fn=preexec), timeout=60) == 0
    doc = receipt_of(attempt, leftovers=True)
    assert isinstance(doc["leftoverProcesses"], int) and doc["leftoverProcesses"] >= 2
    assert "bye" in attempt.log_text().split()
    assert marked() == []


def test_no_leftovers_no_field(launcher: Launcher, attempt: Attempt) -> None:
    # A background job that is done before the command ends is nothing to end.
    assert run(launcher, attempt, sh("true & wait; exit 0")) == 0
    assert "leftoverProcesses" not in receipt_of(attempt)


# ---- confinement (--deny, Landlock) ----------------------------------------------


def _host_landlock_abi() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return int(libc.syscall(ctypes.c_long(444), None, ctypes.c_size_t(0), ctypes.c_uint32(1)))


def _needs_landlock(launcher: Launcher) -> None:
    if launcher.emulated:
        pytest.skip("qemu-user has no Landlock (ENOSYS): the unavailable path is tested instead")
    if _host_landlock_abi() < 1:
        unavailable("this kernel has no Landlock")


def _confined_tree(attempt: Attempt) -> dict[str, Path]:
    """The appliance's layout in miniature: data (with the token), receipts, logs, work."""
    root = attempt.root
    (root / "data" / "secrets").mkdir(parents=True)
    (root / "data" / "secrets" / "admin.token").write_text("the-admin-token\n")
    (root / "data" / "qledge.sqlite3").write_text("database")
    (root / "logs" / "other.log").write_text("another attempt's log")
    (root / "work").mkdir()
    return {"data": root / "data", "receipts": root / "receipts", "logs": root / "logs",
            "work": root / "work"}


def _deny_argv(attempt: Attempt, dirs: dict[str, Path], script: str,
               *extra: str) -> list[str]:
    deny = [x for name in ("data", "receipts", "logs") for x in ("--deny", str(dirs[name]))]
    return [*attempt.args(), "--token-fd", "{fd}", *deny, *extra, "--", *sh(script)]


def _verdicts(text: str) -> dict[str, str]:
    return dict(re.findall(r"^(\w+)=(ok|no)$", text, re.M))


PROBES = (
    ('token', 'cat "$D/secrets/admin.token"'),
    ('database', 'cat "$D/qledge.sqlite3"'),
    ('write_data', 'echo x > "$D/planted"'),
    ('other_log', 'cat "$L/other.log"'),
    ('receipt_dir', 'echo x > "$R/planted.json"'),
    ('list_data', 'ls "$D" | grep -q qledge.sqlite3'),
    ('work', 'echo hi > "$W/f" && [ "$(cat "$W/f")" = hi ] && rm "$W/f"'),
    ('tmp', 't=$(mktemp) && echo hi > "$t" && cat "$t" >/dev/null && rm "$t"'),
    ('shell', '/bin/sh -c "exit 0"'),
    ('list_root', 'ls / | grep -q tmp'),
    ('proc_self', 'cat /proc/self/status >/dev/null'),
    ('own_log', 'echo to-my-log'),
    # The limit of an allow-list: nothing new directly in an ancestor of a denied dir.
    ('beside_data', 'touch "$D/../beside"'),
)


def _probe_script(dirs: dict[str, Path]) -> str:
    head = (f'D={dirs["data"]}; R={dirs["receipts"]}; L={dirs["logs"]}; W={dirs["work"]}; '
            'cd "$W"; ')
    return head + "; ".join(f"if {cmd} 2>/dev/null; then echo {name}=ok; else echo {name}=no; fi"
                            for name, cmd in PROBES)


@pytest.fixture
def var_attempt() -> Iterator[Attempt]:
    """An attempt under /var/tmp, like the image's /var/lib/qledge: /tmp is then not
    an ancestor of a denied directory (entries directly in those are out of reach)."""
    base = Path(tempfile.mkdtemp(prefix="qledge-deny-", dir="/var/tmp"))
    try:
        yield Attempt(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_deny_confines_the_command(launcher: Launcher, var_attempt: Attempt) -> None:
    _needs_landlock(launcher)
    attempt = var_attempt
    dirs = _confined_tree(attempt)
    argv = _deny_argv(attempt, dirs, _probe_script(dirs))
    assert run(launcher, attempt, [], argv=argv) == 0
    assert _verdicts(attempt.log_text()) == {
        "token": "no", "database": "no", "write_data": "no", "other_log": "no",
        "receipt_dir": "no", "list_data": "ok", "work": "ok", "tmp": "ok", "shell": "ok",
        "list_root": "ok", "proc_self": "ok", "own_log": "ok", "beside_data": "no"}
    assert "to-my-log" in attempt.log_text()
    assert not (dirs["data"] / "planted").exists()
    # The launcher itself is not confined: its receipt is there.
    assert receipt_of(attempt)["exitCode"] == 0
    assert attempt.entries() == [attempt.receipt.name]


_CAPS = "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status"


def test_a_confined_command_keeps_no_capability(launcher: Launcher, attempt: Attempt) -> None:
    """Issue 35, finding 19: a launcher run by root gave the confined command every
    capability, and CAP_SYS_PTRACE reads other processes' /proc/<pid>/environ through
    Landlock. With --deny the command holds none (dropped before Landlock, so also
    where Landlock itself is unavailable and `auto` runs the command unconfined)."""
    if os.geteuid() != 0:
        pytest.skip("only a launcher run by root has capabilities to drop")
    dirs = _confined_tree(attempt)
    argv = _deny_argv(attempt, dirs, _CAPS, "--isolation", "auto")
    assert run(launcher, attempt, [], argv=argv) == 0
    caps = dict(re.findall(r"^(Cap\w+):\s*([0-9a-f]+)$", attempt.log_text(), re.M))
    assert len(caps) == 5 and all(int(v, 16) == 0 for v in caps.values()), caps
    assert receipt_of(attempt)["exitCode"] == 0


def test_deny_resolves_symlinks_and_nesting(launcher: Launcher, attempt: Attempt) -> None:
    _needs_landlock(launcher)
    dirs = _confined_tree(attempt)
    (attempt.root / "via-link").symlink_to(dirs["data"])
    argv = [*attempt.args(), "--token-fd", "{fd}", "--deny", str(attempt.root / "via-link"),
            "--deny", str(dirs["data"] / "secrets"), "--", *sh(
                f'cat {dirs["data"]}/secrets/admin.token && echo token=ok || echo token=no; '
                f'cat {dirs["logs"]}/other.log >/dev/null && echo other_log=ok')]
    assert run(launcher, attempt, [], argv=argv) == 0
    assert _verdicts(attempt.log_text()) == {"token": "no", "other_log": "ok"}


def test_without_deny_nothing_is_confined(launcher: Launcher, attempt: Attempt) -> None:
    dirs = _confined_tree(attempt)
    script = f'cat {dirs["data"]}/secrets/admin.token >/dev/null && echo token=ok'
    assert run(launcher, attempt, sh(script)) == 0
    assert _verdicts(attempt.log_text()) == {"token": "ok"}


def _no_landlock(launcher: Launcher) -> Callable[[], None] | None:
    """Landlock made unavailable: under qemu-user it is (ENOSYS); natively a
    seccomp filter makes its syscalls fail with ENOSYS (x86_64 hosts)."""
    if launcher.emulated:
        return None
    preexec = landlock_unavailable()
    if preexec is None:
        pytest.skip(f"the seccomp Landlock filter is written for x86_64 hosts, not {HOST_ARCH}")
    return preexec


@pytest.mark.parametrize("mode", [None, "required"])
def test_isolation_required_without_landlock_runs_nothing(
    launcher: Launcher, attempt: Attempt, mode: str | None
) -> None:
    dirs = _confined_tree(attempt)
    marker = attempt.root / "work" / "spawned"
    extra = ("--isolation", mode) if mode else ()
    argv = _deny_argv(attempt, dirs, f"touch {marker}", *extra)
    code = run(launcher, attempt, [], argv=argv, preexec_fn=_no_landlock(launcher))
    assert code == 125
    assert not marker.exists()
    assert attempt.entries() == []
    assert_one_diagnostic(attempt, "task isolation required: landlock_create_ruleset: "
                                   "Function not implemented")


def test_isolation_auto_without_landlock_runs_unconfined(
    launcher: Launcher, attempt: Attempt
) -> None:
    dirs = _confined_tree(attempt)
    script = f'cat {dirs["data"]}/secrets/admin.token >/dev/null && echo token=ok; exit 4'
    argv = _deny_argv(attempt, dirs, script, "--isolation", "auto")
    code = run(launcher, attempt, [], argv=argv, preexec_fn=_no_landlock(launcher))
    assert code == 4
    assert receipt_of(attempt)["exitCode"] == 4
    assert _verdicts(attempt.log_text()) == {"token": "ok"}
    assert_one_diagnostic(attempt, "task isolation unavailable, running unconfined")


def _restrict_self_fails(launcher: Launcher) -> Callable[[], None]:
    _needs_landlock(launcher)
    preexec = seccomp_errno({NR_LANDLOCK_RESTRICT_SELF: errno.EPERM})
    if preexec is None:
        pytest.skip(f"the seccomp Landlock filter is written for x86_64 hosts, not {HOST_ARCH}")
    return preexec


def test_confinement_failing_in_the_child_runs_nothing_when_required(
    launcher: Launcher, attempt: Attempt
) -> None:
    dirs = _confined_tree(attempt)
    marker = attempt.root / "work" / "spawned"
    argv = _deny_argv(attempt, dirs, f"touch {marker}")
    code = run(launcher, attempt, [], argv=argv, preexec_fn=_restrict_self_fails(launcher))
    assert code == 125
    assert not marker.exists()
    assert attempt.entries() == []
    assert_one_diagnostic(attempt, "landlock_restrict_self: Operation not permitted")


def test_confinement_failing_in_the_child_auto_runs_unconfined(
    launcher: Launcher, attempt: Attempt
) -> None:
    dirs = _confined_tree(attempt)
    marker = attempt.root / "work" / "spawned"
    argv = _deny_argv(attempt, dirs, f"touch {marker}", "--isolation", "auto")
    code = run(launcher, attempt, [], argv=argv, preexec_fn=_restrict_self_fails(launcher))
    assert code == 0
    assert marker.exists()
    assert receipt_of(attempt)["exitCode"] == 0
    assert_one_diagnostic(attempt, "task isolation failed, running unconfined")


# ---- the launcher's own memory -------------------------------------------------


NOBODY = 65534


def _as_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def _anonymous_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1])
    raise LookupError(pid)


def _has_child(pid: int, comm: str) -> bool:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return any(Path(f"/proc/{c}/comm").read_text().strip() == comm for c in children)


def _waiting_anonymous_kib(launcher: Launcher, attempt: Attempt, deny: list[str]) -> int:
    """Anonymous memory of a launcher waiting on `sleep 30`, the least of three (the
    stack's random offset may put the same frames on one more page)."""
    seen = []
    for _ in range(3):
        a = Attempt(attempt.root / str(len(seen)))
        proc = start(launcher, a, [], argv=[*a.args(), "--token-fd", "{fd}", *deny, "--",
                                            "sleep", "30"])
        try:
            wait_until(lambda pid=proc.pid: _has_child(pid, "sleep"),
                       what="the launcher's command")
            time.sleep(0.2)  # the launcher reaches its wait
            seen.append(_anonymous_kib(proc.pid))
        finally:
            kill_group(proc.pid)
            proc.wait()
    return min(seen)


def test_deny_leaves_nothing_in_the_waiting_launcher(launcher: Launcher, attempt: Attempt
                                                     ) -> None:
    """The --deny walk (resolved paths, directory entries, realpath's stack) is the
    child's: the launcher that waits for the whole task holds no more memory with the
    appliance's four --deny than without (it held 32 KiB more when it walked itself)."""
    _needs_landlock(launcher)
    dirs = _confined_tree(attempt)
    (attempt.root / "run").mkdir()
    deny = [x for d in (dirs["data"], dirs["receipts"], dirs["logs"], attempt.root / "run")
            for x in ("--deny", str(d))]
    plain = _waiting_anonymous_kib(launcher, attempt, [])
    confined = _waiting_anonymous_kib(launcher, attempt, [*deny, "--isolation", "required"])
    assert confined <= plain + 4, (plain, confined)


def test_launcher_is_not_dumpable_by_its_task(launcher: Launcher) -> None:
    # The token is in the launcher's memory. Its task runs as the same uid, so only
    # non-dumpability keeps /proc/<launcher>/environ, mem and fd closed to it (root
    # would pass anyway: CAP_SYS_PTRACE), so both run as nobody here.
    if not IS_ROOT:
        pytest.skip("needs root to run the launcher and its task as another uid")
    base = Path(tempfile.mkdtemp(prefix="qledge-dumpable-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        attempt = Attempt(base)
        for path in (attempt.receipt_dir, attempt.receipt_dir.parent, attempt.log.parent):
            os.chown(path, NOBODY, NOBODY)
        # nobody runs a copy in this 0755 folder: the checkout may sit in a private
        # one (a clone under /root or in a 0700 temporary folder).
        shutil.copy2(launcher.path, base / "ql-launch")
        launcher = dataclasses.replace(launcher, path=base / "ql-launch")
        script = ('for f in environ mem; do head -c1 /proc/$PPID/$f >/dev/null 2>&1 '
                  '&& echo launcher_$f=ok || echo launcher_$f=no; done; '
                  'ls /proc/$PPID/fd >/dev/null 2>&1 && echo launcher_fd=ok '
                  '|| echo launcher_fd=no; '
                  'head -c1 /proc/self/environ >/dev/null && echo own_environ=ok')
        assert run(launcher, attempt, sh(script), preexec_fn=_as_nobody) == 0
        assert _verdicts(attempt.log_text()) == {
            "launcher_environ": "no", "launcher_mem": "no", "launcher_fd": "no",
            "own_environ": "ok"}
        assert receipt_of(attempt)["token"] == attempt.token
    finally:
        shutil.rmtree(base, ignore_errors=True)
