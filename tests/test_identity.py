"""launch/identity.py: pidfds, and the /proc stand-in where pidfd_open is refused.

The stand-in is forced here by making pidfd_unavailable() give a reason; the
real refusal (a seccomp filter answering ENOSYS/EPERM, as Linux < 5.3 or an
old container profile does) is checked on a real interpreter, and the whole
appliance runs without pidfds in tests/drills/test_no_pidfd.py.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from qledge.launch import identity

from _launcher import deny_syscalls

NR_PIDFD_OPEN = 434  # the same number on every arch since Linux 5.3 (x86_64 here)
BOOT = "test-boot"


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(identity, "pidfd_unavailable", lambda: "forced by the test")
    yield


def _spawn(*argv: str) -> int:
    return os.posix_spawnp(argv[0], list(argv), dict(os.environ))


def _readable(fd: int, timeout_s: float) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(int(timeout_s * 1000)))


def test_pidfds_work_on_this_kernel() -> None:
    assert identity.pidfd_unavailable() is None


@pytest.mark.parametrize(("refuse", "why"), [(errno.ENOSYS, "Function not implemented"),
                                             (errno.EPERM, "Operation not permitted")])
def test_a_refused_pidfd_open_is_reported_with_the_reason(refuse: int, why: str) -> None:
    preexec = deny_syscalls((NR_PIDFD_OPEN,), refuse)
    if preexec is None:
        pytest.skip("the seccomp filter is written for x86_64 hosts")
    res = subprocess.run(
        [sys.executable, "-c", "from qledge.launch import identity as i; "
         "print(i.pidfd_unavailable())"],
        capture_output=True, text=True, timeout=60, preexec_fn=preexec, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"pidfd_open: {why} (kernel "), res.stdout


def test_stand_in_turns_readable_when_the_child_exits_and_reaps_it(stand_in: None) -> None:
    pid = _spawn("sleep", "0.5")
    fd = identity.child_fd(pid, BOOT)
    try:
        assert not _readable(fd, 0.2)  # still running
        t0 = time.monotonic()
        assert _readable(fd, 5)
        assert time.monotonic() - t0 < 1.0  # within a poll or two of the exit
        # Reaped by the poller: no zombie left behind.
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    finally:
        os.close(fd)


def test_stand_in_signals_only_the_identity_it_was_given(stand_in: None) -> None:
    pid = _spawn("sleep", "30")
    try:
        ident = identity.capture(pid, BOOT)
        assert ident is not None
        fd, live = identity.open_pidfd(ident, BOOT)
        assert fd is not None and live is identity.Liveness.RUNNING
        # Another process' start time: the pid is not trusted, nothing is sent.
        impostor = identity.Identity(pid=pid, start_time=ident.start_time + 1, boot_id=BOOT)
        assert identity.send_signal(fd, impostor, BOOT, signal.SIGTERM) is False
        assert identity.check(ident, BOOT) is identity.Liveness.RUNNING
        assert identity.send_signal(fd, ident, BOOT, signal.SIGTERM) is True
        assert _readable(fd, 5)
        assert identity.send_signal(fd, ident, BOOT, signal.SIGKILL) is False  # gone
        os.close(fd)
    finally:
        identity.reaped(pid, -1)
        if os.path.exists(f"/proc/{pid}"):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def test_find_launchers_walks_proc_once_for_many_and_fails_closed_on_two() -> None:
    """Start-up adoption of a burst of unrecorded launchers (the identity grace): one
    walk finds each by its run and attempt ids; an attempt named by two live processes
    is ambiguous and left out; a run id that does not match is no match."""
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip()
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    argvs = {"a1": ["--run-id", "r1", "--attempt-id", "a1"],
             "a2": ["--run-id", "r2", "--attempt-id", "a2"],
             "dup": ["--run-id", "r3", "--attempt-id", "dup"]}
    procs = [subprocess.Popen([*sleeper, *args]) for args in argvs.values()]
    procs.append(subprocess.Popen([*sleeper, *argvs["dup"]]))
    try:
        # Popen returns once the child is forked, maybe before its exec: until then
        # /proc shows the parent's command line (seen under load in CI).
        for proc, args in zip(procs, [*argvs.values(), argvs["dup"]], strict=True):
            for _ in range(1000):
                with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
                    if f.read().split(b"\0")[-3:-1] == [b"--attempt-id", args[-1].encode()]:
                        break
                time.sleep(0.01)
            else:
                raise AssertionError(f"{args} never exec'd")
        found = identity.find_launchers(
            [("r1", "a1"), ("r2", "a2"), ("r3", "dup"), ("other-run", "a1x")], boot)
        assert set(found) == {"a1", "a2"}
        assert found["a1"].pid == procs[0].pid and found["a2"].pid == procs[1].pid
        assert identity.find_launchers([("wrong-run", "a1")], boot) == {}
        assert identity.find_launcher("r2", "a2", boot) == found["a2"]
    finally:
        for p in procs:
            p.kill()
            p.wait()
