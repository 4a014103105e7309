"""The durability marks both backends' Database keep (db/sqlite.py, db/pg.py).

`commit_seq` counts write transactions committed by this process, `durable_seq` the
last one known durable (a durable commit, or a `sync()` after it); a receipt is
deleted only once the commit of its result is durable (docs/storage.md). One
definition, so the two backends cannot drift on what "durable" means to a waiter.

A commit can also be *lost*: PostgreSQL acknowledges an asynchronous commit before
its WAL is flushed, and a server that crashes then restarts without it; a flush on
the new connection covers nothing the old server dropped. The backend marks every
commit not yet durable at that moment as doubtful, and `proven(seq)` is what a
caller that destroys evidence (the reaper deleting a receipt) asks. A worker's own
crash loses no commit on either backend; a power cut ends the worker with it.
"""

from __future__ import annotations

import asyncio


class Durability:
    def __init__(self) -> None:
        self.commit_seq = 0
        self.durable_seq = 0
        self.syncs = 0  # the forced flushes done by sync(); the durability tests count them
        self._durable = asyncio.Condition()
        # (durable_seq, commit_seq) at each loss of the writer with commits not yet
        # durable: the commits in between may be gone, whatever a later flush says.
        self._doubtful: list[tuple[int, int]] = []

    async def wait_durable(self, seq: int) -> None:
        """Until commit number `seq` is durable (a durable commit or a sync() after it)."""
        async with self._durable:
            await self._durable.wait_for(lambda: self.durable_seq >= seq)

    async def _advance(self, seq: int) -> None:
        if seq > self.durable_seq:
            self.durable_seq = seq
            async with self._durable:
                self._durable.notify_all()

    def _doubt(self) -> None:
        """The server may have lost every commit not yet known durable."""
        if self.commit_seq <= self.durable_seq:
            return
        after = self.durable_seq
        if self._doubtful and self._doubtful[-1][1] >= after:
            # No flush since the last loss (a reconnect failing again): one range.
            after = min(after, self._doubtful.pop()[0])
        self._doubtful.append((after, self.commit_seq))

    def proven(self, seq: int) -> bool:
        """Commit number `seq` is durable: covered by a flush, and made on a server
        that has not been lost since (a commit in doubt is never proven)."""
        return seq <= self.durable_seq and not any(
            after < seq <= through for after, through in self._doubtful)
