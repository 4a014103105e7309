"""launch/identity.py: the pidfd requirement, checked against a real kernel refusal.

A seccomp filter makes pidfd_open fail with ENOSYS (what Linux < 5.3 answers)
or EPERM (an old container seccomp profile) for a real `python -m qledge`.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from qledge.launch import identity

from _launcher import deny_syscalls

NR_PIDFD_OPEN = 434  # the same number on every arch since Linux 5.3 (x86_64 here)


def test_require_pidfds_passes_on_this_kernel() -> None:
    identity.require_pidfds()


def _qledge(state: Path, *args: str, refuse: int | None) -> subprocess.CompletedProcess[str]:
    preexec = None
    if refuse is not None:
        preexec = deny_syscalls((NR_PIDFD_OPEN,), refuse)
        if preexec is None:
            pytest.skip("the seccomp filter is written for x86_64 hosts")
    env = {**os.environ, "QLEDGE_STATE_DIR": str(state), "QLEDGE_PORT": "0"}
    return subprocess.run([sys.executable, "-m", "qledge", *args], env=env, capture_output=True,
                          text=True, timeout=60, preexec_fn=preexec, check=False)


@pytest.mark.parametrize(("refuse", "why"), [(errno.ENOSYS, "Function not implemented"),
                                             (errno.EPERM, "Operation not permitted")])
@pytest.mark.parametrize("command", ["migrate", "serve"])
def test_no_pidfd_open_stops_start_up_with_the_reason(tmp_path: Path, command: str, refuse: int,
                                                       why: str) -> None:
    res = _qledge(tmp_path / "state", command, refuse=refuse)
    assert res.returncode == 2, res.stderr
    assert f"qledge: pidfd_open failed: {why}: qledge needs Linux >= 5.3" in res.stderr
    assert "Traceback" not in res.stderr
    # Nothing was created: the check comes before any state is touched.
    assert not (tmp_path / "state").exists()


def test_migrate_runs_when_pidfd_open_works(tmp_path: Path) -> None:
    res = _qledge(tmp_path / "state", "migrate", refuse=None)
    assert res.returncode == 0, res.stderr
    assert "migrations applied" in res.stdout
