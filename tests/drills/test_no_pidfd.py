"""The appliance on a kernel without pidfd_open (Linux < 5.3: old 32-bit ARM boxes).

A seccomp filter set on supervisord, inherited by the worker and every
launcher, answers pidfd_open with ENOSYS, as such a kernel does. The worker
then uses the /proc stand-in (launch/_exitpoll.py): exits are found by
checking pid + start time + boot id every 0.2 s, signals go by pid after a
fresh identity check. The promise does not change: the same drills, the same
exact exit codes and logs, cancellation with TERM then KILL.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import (
    _FAILED,
    Factory,
    api,
    assert_one_terminal,
    make_task,
    ok,
    output,
    trigger,
    wait_running,
    wait_terminal,
    wait_until,
)
from .test_recovery_drills import (
    test_tasks_finishing_while_worker_is_down_are_recovered_from_receipts as receipts_drill,
)
from .test_recovery_drills import (
    test_worker_killed_mid_run_tasks_keep_log_and_exit_code as worker_kill_drill,
)
from _launcher import deny_syscalls
from support import unavailable

pytestmark = pytest.mark.drill
NR_PIDFD_OPEN = 434  # x86_64 (and every arch since 5.3)
FALLBACK_LOG = "no pidfds (pidfd_open: Function not implemented"


@pytest.fixture
def no_pidfd(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    preexec = deny_syscalls((NR_PIDFD_OPEN,), errno.ENOSYS)
    if preexec is None:
        unavailable("the seccomp filter is written for x86_64 hosts")
    factory = Factory(tmp_path, preexec)
    try:
        yield factory
    finally:
        factory.close(request.node.stash.get(_FAILED, True))


def test_worker_killed_mid_run_without_pidfds(no_pidfd: Factory) -> None:
    worker_kill_drill(no_pidfd)
    assert FALLBACK_LOG in output(no_pidfd.made[0])


def test_tasks_finishing_while_worker_is_down_without_pidfds(no_pidfd: Factory) -> None:
    receipts_drill(no_pidfd)
    assert FALLBACK_LOG in output(no_pidfd.made[0])


def test_exit_seen_within_a_poll_and_cancel_signals_by_pid(no_pidfd: Factory) -> None:
    app = no_pidfd()
    assert FALLBACK_LOG in output(app)
    t0 = time.monotonic()
    quick = trigger(app, make_task(app, "exit 7")["id"])
    run = wait_terminal(app, quick, timeout=10)
    took = time.monotonic() - t0
    assert (run["status"], run["exit_code"]) == ("failed", 7), run
    # Seen by the 0.2 s poll, not by the 1 s supervision round of FAST.
    assert took < 0.9, f"exit took {took:.2f}s to be seen"

    stubborn = trigger(app, make_task(app, "trap '' TERM; echo armed; sleep 1000")["id"])
    wait_running(app, stubborn)
    wait_until(lambda: b"armed" in api(app, "GET", f"/runs/{stubborn}/log").content,
               20, "the trap set")
    ok(app.api("POST", f"/runs/{stubborn}/cancel"), 202)
    run = wait_terminal(app, stubborn, timeout=60)
    assert (run["status"], run["reason_code"]) == ("cancelled", "CANCEL_REQUESTED"), run
    events = assert_one_terminal(app, stubborn)
    assert [e["data"]["signal"] for e in events if e["type"] == "attempt.signal_sent"] == [
        "SIGTERM", "SIGKILL"]
