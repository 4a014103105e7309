"""A small, bounded thread pool for file work a user can reach (log reads, tails).

Tasks own their log files: a task can replace its log with a FIFO, a symlink,
a directory, or put it on a hung mount. `logs.py` opens without blocking and
refuses anything but a regular file, so none of that should ever stall a
thread; this pool is the second wall in case something still does. It keeps
user-reachable file work off the default executor, which the runtime needs
for its own file work (receipts, retention, fsyncs), so that:

* at most `THREADS` threads ever exist; a call that never returns keeps its
  thread, and the others keep serving;
* every call waits at most `TIMEOUT_S` (queued or running) and then fails with
  `FileTimeout`; a call still queued at its timeout never runs;
* at most `MAX_PENDING` calls wait in the queue; beyond that `FileBusy` at once;
* the threads are daemon threads that nothing joins: a stuck one cannot hold
  up the worker's shutdown (the default executor is joined at exit; a thread
  stuck there would need SIGKILL).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

THREADS = 4
TIMEOUT_S = 5.0
MAX_PENDING = 256


class FileTimeout(Exception):
    """The file call took longer than its bound; its thread may still be stuck."""


class FileBusy(Exception):
    """Too many file calls are waiting; refused without queueing."""


class _Job:
    __slots__ = ("args", "fn", "future", "loop", "state")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...],
                 loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any]) -> None:
        self.fn = fn
        self.args = args
        self.loop = loop
        self.future = future
        self.state = "queued"  # -> running -> done, or queued -> abandoned


def _deliver(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # timed out meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class FilePool:
    def __init__(self, threads: int = THREADS, timeout_s: float = TIMEOUT_S,
                 max_pending: int = MAX_PENDING, name: str = "qledge-files") -> None:
        self.threads = threads
        self.timeout_s = timeout_s
        self.max_pending = max_pending
        self.name = name
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._alive = 0
        self._idle = 0
        self._pending = 0
        self._closed = False
        self.timeouts = 0  # calls that answered FileTimeout (for /api/v1/system)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"threads": self._alive, "idle": self._idle, "pending": self._pending,
                    "timeouts": self.timeouts}

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """fn(*args) on a pool thread, within `timeout_s`."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        job = _Job(fn, args, loop, future)
        with self._lock:
            if self._closed:
                raise FileBusy("file pool is closed")
            if self._pending >= self.max_pending:
                raise FileBusy(f"{self._pending} file reads are waiting")
            self._pending += 1
            start = self._idle == 0 and self._alive < self.threads
            if start:
                self._alive += 1
        if start:
            threading.Thread(target=self._work, name=self.name, daemon=True).start()
        self._queue.put(job)
        try:
            return await asyncio.wait_for(future, self.timeout_s)
        except TimeoutError:
            with self._lock:
                self.timeouts += 1
                if job.state == "queued":
                    job.state = "abandoned"
                    self._pending -= 1
            raise FileTimeout(f"file read took longer than {self.timeout_s:g} s") from None

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            job = self._queue.get()
            with self._lock:
                self._idle -= 1
                if job is None:
                    self._alive -= 1
                    return
                if job.state == "abandoned":
                    continue
                job.state = "running"
                self._pending -= 1
            result: Any = None
            error: BaseException | None = None
            try:
                result = job.fn(*job.args)
            except BaseException as exc:  # handed to the awaiting coroutine
                error = exc
            job.state = "done"
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits
                job.loop.call_soon_threadsafe(_deliver, job.future, result, error)

    def close(self) -> None:
        """Let idle threads exit; never waits (a stuck thread is a daemon, left behind)."""
        with self._lock:
            self._closed = True
            n = self._alive
        for _ in range(n):
            self._queue.put(None)
