"""Exit notification without polling: one pidfd per launcher on the loop's reader.

A pidfd becomes readable when its process exits, whether it is our child
(spawned by this worker) or was re-attached after a restart (a child of the
old worker, now reparented to PID 1). Children are reaped here; re-attached
launchers are reaped by their new parent (supervisord in the image).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable


class ExitWatcher:
    def __init__(self, on_exit: Callable[[str], None]) -> None:
        self._on_exit = on_exit
        self._fds: dict[str, int] = {}

    def watch(self, attempt_id: str, pidfd: int) -> None:
        loop = asyncio.get_running_loop()
        old = self._fds.pop(attempt_id, None)
        if old is not None:
            loop.remove_reader(old)
            os.close(old)
        self._fds[attempt_id] = pidfd
        loop.add_reader(pidfd, self._ready, attempt_id)

    def _ready(self, attempt_id: str) -> None:
        fd = self._fds.pop(attempt_id, None)
        if fd is None:
            return
        asyncio.get_running_loop().remove_reader(fd)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitid(os.P_PIDFD, fd, os.WEXITED | os.WNOHANG)
        os.close(fd)
        self._on_exit(attempt_id)

    def watching(self, attempt_id: str) -> bool:
        return attempt_id in self._fds

    def __len__(self) -> int:
        return len(self._fds)

    def close(self) -> None:
        """Stop watching (shutdown); the launchers keep running for the next worker."""
        loop = asyncio.get_running_loop()
        for fd in self._fds.values():
            loop.remove_reader(fd)
            os.close(fd)
        self._fds.clear()
