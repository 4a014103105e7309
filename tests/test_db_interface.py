"""db/interface.py's contract, on both backends alike: notify/listen, the transaction
hooks (written once, db/_hooks.py) and ping. Each test runs on the embedded SQLite
(`litedb`) and on a throwaway PostgreSQL (`pgdb`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import pytest

from qledge.db.interface import Database

BACKENDS = ["litedb", "pgdb"]
# How long a notification that must not arrive is waited for (PostgreSQL delivers on
# its listening connection within milliseconds of the commit); one that must arrive is
# waited for up to ARRIVE_S (a loaded machine).
QUIET_S = 0.5
ARRIVE_S = 20.0


@pytest.fixture(params=BACKENDS)
def anydb(request: pytest.FixtureRequest) -> Database:
    db: Database = request.getfixturevalue(request.param)
    return db


class Calls:
    def __init__(self) -> None:
        self.n = 0
        self.changed = asyncio.Event()

    def __call__(self) -> None:
        self.n += 1
        self.changed.set()

    async def settle(self) -> int:
        """The count once QUIET_S passed without a new call."""
        while True:
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), QUIET_S)
            except TimeoutError:
                return self.n

    async def reach(self, n: int) -> int:
        """The count once it reached `n` (or ARRIVE_S passed) and then settled."""
        async def counted() -> None:
            while self.n < n:
                self.changed.clear()
                await self.changed.wait()

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(counted(), ARRIVE_S)
        return await self.settle()


async def _listening(db: Database, channel: str) -> Calls:
    calls = Calls()
    db.listen(channel, calls)
    # PostgreSQL looks once when its listening connection is up; from then on every
    # notification reaches it. SQLite's listeners are registered at once.
    if type(db).__module__ == "qledge.db.pg":
        assert await calls.reach(1) == 1
    calls.n = 0
    return calls


async def _table(db: Database) -> None:
    async with db.write() as tx:
        await tx.execute("CREATE TABLE t (v INTEGER)")


async def test_a_committed_notify_reaches_its_channels_listeners_once(anydb: Database) -> None:
    calls = await _listening(anydb, "qltest_a")
    other = await _listening(anydb, "qltest_b")
    async with anydb.write() as tx:
        await tx.notify("qltest_a")
        await tx.notify("qltest_a")  # one per channel and transaction
        assert calls.n == 0  # not before the commit
    assert await calls.reach(1) == 1
    assert await other.settle() == 0
    async with anydb.write() as tx:
        await tx.notify("qltest_a")
    assert await calls.reach(2) == 2


async def test_a_rolled_back_notify_reaches_nobody(anydb: Database) -> None:
    calls = await _listening(anydb, "qltest_a")
    with pytest.raises(RuntimeError):
        async with anydb.write() as tx:
            await tx.notify("qltest_a")
            raise RuntimeError("changed my mind")
    assert await calls.settle() == 0


async def test_hooks_run_after_commit_and_rollback_undoes_the_savepoints_own(
        anydb: Database) -> None:
    await _table(anydb)
    seen: list[str] = []

    def note(what: str) -> Callable[[], None]:
        return lambda: seen.append(what)

    async with anydb.write() as tx:
        tx.on_commit(note("commit"))
        tx.on_rollback(note("undo outer"))
        with pytest.raises(ValueError):
            async with tx.savepoint():
                await tx.execute("INSERT INTO t VALUES (1)")
                tx.on_rollback(note("undo inner"))
                raise ValueError
        assert seen == ["undo inner"]
        await tx.execute("INSERT INTO t VALUES (2)")
        assert seen == ["undo inner"]  # on_commit waits for the commit
    assert seen == ["undo inner", "commit"]
    seen.clear()
    with pytest.raises(ValueError):
        async with anydb.write() as tx:
            tx.on_commit(note("commit"))
            tx.on_rollback(note("undo 1"))
            tx.on_rollback(note("undo 2"))
            raise ValueError
    assert seen == ["undo 2", "undo 1"]  # newest first, and no commit hook
    async with anydb.read() as tx:
        assert [r["v"] for r in await tx.all("SELECT v FROM t")] == [2]


async def test_inline_shares_the_hooks_and_the_notifications(anydb: Database) -> None:
    calls = await _listening(anydb, "qltest_a")
    seen: list[str] = []

    async def body(tx: Any) -> int:
        tx.on_commit(lambda: seen.append("commit"))
        await tx.notify("qltest_a")
        return int(await tx.execute("CREATE TABLE u (v INTEGER)"))

    async with anydb.write() as tx:
        await tx.inline(body)
    assert seen == ["commit"]
    assert await calls.reach(1) == 1


async def test_ping_answers_while_open(anydb: Database) -> None:
    await anydb.ping()


def test_a_notify_channel_must_be_a_plain_name() -> None:
    from qledge.db import pg

    tx = pg.Tx(conn=None)
    with pytest.raises(ValueError):
        asyncio.run(tx.notify("x; DROP TABLE runs"))
    with pytest.raises(ValueError):
        asyncio.run(tx.notify("Upper"))
