"""The durability marks both backends' Database keep (db/sqlite.py, db/pg.py).

`commit_seq` counts write transactions committed by this process, `durable_seq` the
last one known durable (a durable commit, or a `sync()` after it); a receipt is
deleted only once the commit of its result is durable (docs/storage.md). One
definition, so the two backends cannot drift on what "durable" means to a waiter.
"""

from __future__ import annotations

import asyncio


class Durability:
    def __init__(self) -> None:
        self.commit_seq = 0
        self.durable_seq = 0
        self.syncs = 0  # the forced flushes done by sync(); the durability tests count them
        self._durable = asyncio.Condition()

    async def wait_durable(self, seq: int) -> None:
        """Until commit number `seq` is durable (a durable commit or a sync() after it)."""
        async with self._durable:
            await self._durable.wait_for(lambda: self.durable_seq >= seq)

    async def _advance(self, seq: int) -> None:
        if seq > self.durable_seq:
            self.durable_seq = seq
            async with self._durable:
                self._durable.notify_all()
