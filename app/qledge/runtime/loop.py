"""A periodic loop with the lifecycle rules of docs/contract.md §6.

Explicit start/stop; one round at a time (the next is scheduled only after
the previous finished); stop waits for a running round within a bound, then
cancels it. `poke()` runs a round early (e.g. under disk pressure). A round
may return how many seconds until the next one (the scheduler sleeps until
the next cron tick), capped by the interval; None means the interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection

log = logging.getLogger("qledge.loop")


class PeriodicLoop:
    def __init__(self, name: str, interval_s: float,
                 round_fn: Callable[[], Awaitable[float | None]],
                 stop_timeout_s: float = 5.0) -> None:
        self.name = name
        self.interval_s = interval_s
        self.round_fn = round_fn
        self.stop_timeout_s = stop_timeout_s
        self.rounds = 0
        self.next_round_at: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._poke = asyncio.Event()
        self._stopping = False
        self._in_round = False

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if self.running:
            raise RuntimeError(f"loop {self.name} already started")
        self._stopping = False
        self._task = asyncio.create_task(self._run(), name=f"loop:{self.name}")

    def poke(self) -> None:
        self._poke.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        delay = self.interval_s
        while not self._stopping:
            self.next_round_at = loop.time() + delay
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poke.wait(), delay)
            self._poke.clear()
            if self._stopping:
                break
            self._in_round = True
            delay = self.interval_s
            try:
                wanted = await self.round_fn()
                if wanted is not None:
                    delay = min(max(wanted, 0.0), self.interval_s)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s round failed; next round in %ss", self.name, delay)
            finally:
                self._in_round = False
                self.rounds += 1

    async def stop(self) -> None:
        """Let a running round finish within the bound, then cancel it."""
        self._stopping = True
        task, self._task = self._task, None
        if task is None:
            return
        self._poke.set()
        await drain(task, in_round=self._in_round, timeout_s=self.stop_timeout_s)


async def drain(task: asyncio.Task[None], *, in_round: bool, timeout_s: float) -> None:
    """Stop a loop task: cancel it while it sleeps; mid-round, let the round finish
    within `timeout_s`, then cancel. Shared by every loop (bounded stop, docs/contract.md §6)."""
    if not in_round:
        task.cancel()
    try:
        await asyncio.wait_for(asyncio.shield(task), timeout_s)
    except TimeoutError:
        task.cancel()
    except asyncio.CancelledError:
        pass
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def settle(tasks: Collection[asyncio.Task[None]], timeout_s: float) -> None:
    """Stop owned background tasks: let them finish within `timeout_s`, cancel the
    rest, and await every one, so none outlives its owner or loses its exception."""
    pending = [t for t in tasks if not t.done()]
    if pending and timeout_s > 0:
        _, pending_set = await asyncio.wait(pending, timeout=timeout_s)
        pending = list(pending_set)
    for task in pending:
        task.cancel()
    for task in list(tasks):
        try:
            await task
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("background task %s failed", task.get_name())
