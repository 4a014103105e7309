"""The Runtime: opens the store, recovers, then starts and stops every loop explicitly."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from .. import ids
from ..db import store
from ..db.connection import Database
from ..paths import RootError, confined
from ..settings import Settings

log = logging.getLogger("qledge.runtime")


def now_ms() -> int:
    return int(time.time() * 1000)


def read_boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


class Runtime:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.profile = settings.profile_limits
        self.db = Database(settings.db_path)
        self.node_id = ""
        self.incarnation = ids.uuid7()
        self.boot_id = read_boot_id()
        self.started_at_ms = now_ms()
        self.ready = False

    async def start(self) -> None:
        await self.db.open()
        async with self.db.write() as tx:
            self.node_id = await store.ensure_node_id(tx, ids.uuid7(), now_ms())
        log.info("runtime started node=%s incarnation=%s profile=%s",
                 self.node_id, self.incarnation, self.profile.name)
        self.ready = True

    def remove_logs(self, relative_paths: list[str]) -> None:
        """Delete log files after their rows are gone (retention, task deletion)."""
        for rel in relative_paths:
            try:
                confined(self.settings.logs_path, rel).unlink(missing_ok=True)
            except (OSError, RootError) as exc:
                log.warning("could not remove a log file: %s", type(exc).__name__)

    async def report(self) -> dict[str, object]:
        return {
            "profile": self.profile.name,
            "node_id": self.node_id,
            "incarnation": self.incarnation,
            "uptime_s": (now_ms() - self.started_at_ms) // 1000,
        }

    async def stop(self) -> None:
        self.ready = False
        await self.db.close()
