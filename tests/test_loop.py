"""runtime/loop.py: owned background tasks are settled at stop, none outlives its owner."""

from __future__ import annotations

import asyncio
import logging

import pytest

from qledge.runtime.loop import settle


async def test_settle_waits_within_the_bound_then_cancels_and_awaits_the_rest(
        caplog: pytest.LogCaptureFixture) -> None:
    finished: list[str] = []

    async def quick() -> None:
        await asyncio.sleep(0.01)
        finished.append("quick")

    async def slow() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            finished.append("slow cleaned up")

    async def broken() -> None:
        raise RuntimeError("lost unless someone awaits it")

    tasks = {asyncio.create_task(quick()), asyncio.create_task(slow()),
             asyncio.create_task(broken())}
    with caplog.at_level(logging.ERROR, logger="qledge.loop"):
        await asyncio.wait_for(settle(tasks, 0.5), 5)
    assert all(t.done() for t in tasks)
    assert sorted(finished) == ["quick", "slow cleaned up"]
    assert "lost unless someone awaits it" in caplog.text  # logged, not swallowed


async def test_settle_without_a_bound_cancels_at_once() -> None:
    task = asyncio.create_task(asyncio.sleep(60))
    await asyncio.wait_for(settle([task], 0), 1)
    assert task.cancelled()
