"""The bounded pool for user-reachable file work, and log reads that refuse
anything but a regular file (launch/fileio.py, launch/logs.py)."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from qledge.launch import fileio, logs

ATTEMPT = "0190f3c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d"


def _log(root: Path) -> tuple[Path, str]:
    fd, rel = logs.create(root, ATTEMPT)
    os.write(fd, b"hello\n")
    os.close(fd)
    return root / rel, rel


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory", "socket"])
def test_reads_refuse_what_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    path, rel = _log(tmp_path)
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        (tmp_path / "elsewhere").write_text("secret\n")
        path.symlink_to(tmp_path / "elsewhere")
    elif kind == "directory":
        path.mkdir()
    else:
        # Bound by a relative name: a deep tmp_path (a pytest-xdist worker's) can pass
        # AF_UNIX's 108-byte path limit.
        sock = socket.socket(socket.AF_UNIX)
        here = os.getcwd()
        os.chdir(path.parent)
        try:
            sock.bind(path.name)
        finally:
            os.chdir(here)
    done: list[BaseException | tuple[bytes, int]] = []

    def attempt() -> None:
        for fn in (lambda: logs.read(tmp_path, rel, 0, 100), lambda: logs.tail(tmp_path, rel, 9)):
            try:
                done.append(fn())
            except BaseException as exc:
                done.append(exc)

    # In a thread with a bound: on a FIFO a blocking open(2) would never return.
    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(5)
    assert not worker.is_alive(), "a log read blocked"
    assert len(done) == 2
    for outcome in done:
        assert isinstance(outcome, logs.UnsafeLogFile), outcome
        assert outcome.kind == kind
    assert logs.size(tmp_path, rel) >= 0  # retention's lstat never opens or raises


def test_regular_missing_and_tail(tmp_path: Path) -> None:
    path, rel = _log(tmp_path)
    assert logs.read(tmp_path, rel, 0, 100) == (b"hello\n", 6)
    assert logs.read(tmp_path, rel, 2, 2) == (b"ll", 6)
    assert logs.tail(tmp_path, rel, 3) == (b"lo\n", 3)
    assert logs.tail(tmp_path, rel, 100) == (b"hello\n", 0)
    path.unlink()
    assert logs.read(tmp_path, rel, 0, 100) == (b"", 0)
    assert logs.tail(tmp_path, rel, 100) == (b"", 0)


async def test_a_stuck_call_times_out_and_the_others_keep_running() -> None:
    pool = fileio.FilePool(threads=2, timeout_s=0.5, max_pending=8)
    release = threading.Event()
    try:
        t0 = time.monotonic()
        with pytest.raises(fileio.FileTimeout):
            await pool.run(release.wait)  # a call that does not come back
        assert time.monotonic() - t0 < 2
        # One thread is stuck; the other still serves, promptly.
        assert await pool.run(lambda: 42) == 42
        assert pool.stats()["threads"] == 2 and pool.stats()["timeouts"] == 1
        with pytest.raises(fileio.FileTimeout):
            await pool.run(release.wait)
        # Both threads stuck: calls queue, time out and never run later.
        ran: list[int] = []
        with pytest.raises(fileio.FileTimeout):
            await pool.run(ran.append, 1)
        release.set()
        await asyncio.sleep(0.2)
        assert ran == []
        assert await pool.run(lambda: "back") == "back"
    finally:
        release.set()
        pool.close()


async def test_the_queue_is_bounded_and_errors_pass_through() -> None:
    pool = fileio.FilePool(threads=1, timeout_s=2, max_pending=2)
    release = threading.Event()
    try:
        first = asyncio.ensure_future(pool.run(release.wait))
        await asyncio.sleep(0.1)
        queued = [asyncio.ensure_future(pool.run(lambda: 1)) for _ in range(2)]
        await asyncio.sleep(0.05)
        with pytest.raises(fileio.FileBusy):
            await pool.run(lambda: 1)
        release.set()
        assert await first is True
        assert [await q for q in queued] == [1, 1]
        with pytest.raises(ZeroDivisionError):
            await pool.run(lambda: 1 // 0)
    finally:
        release.set()
        pool.close()


def test_a_stuck_thread_does_not_hold_up_interpreter_exit(tmp_path: Path) -> None:
    """The default executor is joined at exit (a thread stuck in open(2) of a FIFO
    needed SIGKILL); the pool's threads are daemons nobody joins."""
    import subprocess
    import sys

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code = (
        "import asyncio, sys\n"
        "from qledge.launch import fileio\n"
        "async def main():\n"
        "    pool = fileio.FilePool(threads=1, timeout_s=0.3)\n"
        "    try:\n"
        f"        await pool.run(open, {str(fifo)!r})\n"
        "    except fileio.FileTimeout:\n"
        "        print('timeout', flush=True)\n"
        "    pool.close()\n"
        "asyncio.run(main())\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=20)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "timeout"
