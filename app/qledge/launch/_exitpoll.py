"""The stand-in for pidfds where the kernel has none (Linux < 5.3, or a seccomp
profile that refuses pidfd_open): one pipe per watched process, whose read end
turns readable (EOF) once /proc says the process is gone.

The read end goes wherever a pidfd would (the loop's reader, poll()); a daemon
thread checks every watched identity each POLL_S (pid + start time + boot id,
as after a restart) and closes the write end when it no longer runs. A zombie
child of this process is reaped there, since waitid(P_PIDFD) has no pidfd.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

POLL_S = 0.2
T = TypeVar("T")


class ExitPoller(Generic[T]):
    def __init__(self, running: Callable[[T], bool]) -> None:
        self._running = running  # identity -> still the same live process?
        self._lock = threading.Lock()
        self._watched: dict[int, tuple[int, T]] = {}  # write end -> (pid, identity)
        self._thread: threading.Thread | None = None

    def open(self, pid: int, ident: T) -> int:
        """A read end that reaches EOF when `ident` stops running."""
        read_end, write_end = os.pipe()
        with self._lock:
            self._watched[write_end] = (pid, ident)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="exit-poller",
                                                daemon=True)
                self._thread.start()
        return read_end

    def _run(self) -> None:
        while True:
            time.sleep(POLL_S)
            with self._lock:
                watched = list(self._watched.items())
            for write_end, (pid, ident) in watched:
                if self._running(ident):
                    continue
                reap(pid)
                with self._lock:
                    del self._watched[write_end]
                os.close(write_end)


def reap(pid: int) -> bool:
    """Collect `pid` if it is an exited child of ours; False if it still runs."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child (re-attached), or reaped already
        return True
    return done == pid
