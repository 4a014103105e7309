"""Queued runs → spawned attempts, within the profile's max-concurrent-attempts."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from ..db import store
from ..db.connection import Database
from ..launch.executor import LocalExecutor, SpawnResult

log = logging.getLogger("qledge.dispatcher")


class Dispatcher:
    """Woken by triggers and by finished attempts; sleeps otherwise (no polling)."""

    def __init__(self, db: Database, executor: LocalExecutor, node_id: str, limit: int,
                 on_spawned: Callable[[SpawnResult], None],
                 may_spawn: Callable[[], str | None] = lambda: None) -> None:
        self.db = db
        self.executor = executor
        self.node_id = node_id
        self.limit = limit
        self.on_spawned = on_spawned
        self.may_spawn = may_spawn  # a reason to hold queued runs (e.g. disk pressure)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        self._stopping = False
        self._task = asyncio.create_task(self._loop(), name="dispatcher")
        self.wake()

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        while not self._stopping:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.dispatch_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("dispatch round failed; will retry on the next wake-up")
                await asyncio.sleep(1.0)
                self._wake.set()

    async def dispatch_once(self) -> int:
        if self.may_spawn() is not None:
            return 0
        async with self.db.read() as tx:
            active = await store.count_active_attempts(tx, self.node_id)
            free = self.limit - active
            if free <= 0:
                return 0
            queued = await store.queued_runs(tx, free * 2)
        started = 0
        for run in queued:
            if started >= free or self._stopping:
                break
            result = await self.executor.spawn(run)
            if result is not None:
                self.on_spawned(result)
                started += 1
        if started == free and queued:
            self.wake()  # more may be waiting behind this page
        return started
