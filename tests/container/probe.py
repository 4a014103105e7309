"""Facts about one built image, measured inside it (tests/container/test_image.py).

    docker run --rm -i --entrypoint /opt/qledge/venv/bin/python IMAGE - < probe.py

Runs as the image's venv python with the app on its path and prints one JSON
object: the platform's ABI (pointer, time_t and off_t sizes, page size), which
event loop the worker would use, whether pidfd_open works, and the app's own
handling of times after 2038 (receipt codec, SQLite store, cron and QingLong
dates) and of a log past 2 GiB. Nothing here asserts: the test compares.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import platform
import shutil
import struct
import sysconfig
import tempfile
from datetime import UTC, datetime
from pathlib import Path

# 2038-01-19T03:14:08Z (2**31 s) plus a little, and 2100-01-01T00:00:00Z.
AFTER_2038_MS = 2**31 * 1000 + 5
Y2100_MS = 4102444800000


def _try(fn):  # type: ignore[no-untyped-def]
    try:
        return {"ok": True, "value": fn()}
    except Exception as exc:  # reported; the test compares
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def platform_datetime() -> str:
    # CPython's fromtimestamp() converts through the C time_t.
    return datetime.fromtimestamp(AFTER_2038_MS / 1000, UTC).isoformat()


def pidfd() -> str:
    fd = os.pidfd_open(os.getpid())
    os.close(fd)
    return "ok"


def receipt_roundtrip() -> list[int]:
    from qledge import ids
    from qledge.receipts import codec

    receipt = codec.Receipt(schema_version=1, run_id=ids.uuid7(), attempt_id=ids.uuid7(),
                            callback_sequence=1, token=codec.new_token(),
                            started_at_ms=AFTER_2038_MS, finished_at_ms=Y2100_MS, exit_code=3)
    got = codec.decode(codec.encode(receipt))
    assert isinstance(got, codec.Receipt), got
    return [got.started_at_ms, got.finished_at_ms]


def store_roundtrip() -> list[int]:
    from qledge import ids
    from qledge.db import events, migrate, runs, tasks
    from qledge.db.sqlite import Database
    from qledge.model import Trigger
    from qledge.tasks.writable import task_fields

    async def go(path: Path) -> list[int]:
        migrate.apply(path)
        db = Database(path)
        await db.open()
        try:
            async with db.write() as tx:
                fields = {"name": "y2100", "command": "true"}
                task = await tasks.create_task(tx, ids.uuid7(), task_fields(fields), Y2100_MS)
                run = await runs.create_run(tx, ids.uuid7(), task.id, Trigger.MANUAL, Y2100_MS)
            async with db.read() as tx:
                run = await runs.get_run(tx, run.id)
                evs = await events.list_events(tx, run.id)
            return [run.created_at_ms, *(e.at_ms for e in evs)]
        finally:
            await db.close()

    with tempfile.TemporaryDirectory() as tmp:
        return asyncio.run(go(Path(tmp) / "y2100.sqlite3"))


def schedule_after_2038() -> list[str]:
    from qledge import cron

    return [t.isoformat() for t in cron.next_ticks("0 12 * * *", Y2100_MS, 2)]


def qinglong_dates() -> list[str]:
    from qledge.http.qinglong import wire

    return [wire.iso(Y2100_MS), wire.timestamp(AFTER_2038_MS)]


def log_past_2gib() -> list[int]:
    from qledge.launch import logs

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        from qledge import ids

        fd, rel = logs.create(root, ids.uuid7())
        os.close(fd)
        with open(root / rel, "r+b") as f:
            f.truncate(3 * 2**30)  # sparse: no 3 GiB written
            f.seek(0, os.SEEK_END)
            f.write(b"tail past 3 GiB\n")
        data, end = logs.read(root, rel, 3 * 2**30, 64)
        return [logs.size(root, rel), end, len(data)]


def aes_gcm() -> str:
    # Backup encryption's cipher: OpenSSL's AES-256-GCM from the libcrypto hashlib
    # loaded (backup/aead.py); the GCM specification's AES-256 test case 14.
    from qledge.backup import aead

    return aead.AESGCM(bytes(32)).encrypt(bytes(12), bytes(16), b"").hex()


def heap_after_imports() -> int:
    """KiB the Python heap holds after importing the worker's stack: a memory
    figure of the target's own ABI (4-byte pointers on arm/v7), which RSS under
    qemu-user is not (that is the emulator's)."""
    import tracemalloc

    tracemalloc.start()
    import aiosqlite  # noqa: F401
    import hypercorn.asyncio  # noqa: F401
    import msgspec  # noqa: F401
    import starlette.applications  # noqa: F401

    import qledge.http.app
    import qledge.runtime.lifecycle  # noqa: F401

    size, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return size // 1024


def main() -> None:
    heap_kib = _try(heap_after_imports)  # first: nothing of the stack imported yet
    from qledge.cli.serve import _loop_factory

    factory = _loop_factory()
    out = {
        "machine": platform.machine(),
        "pointer_bits": struct.calcsize("P") * 8,
        "sizeof_time_t": sysconfig.get_config_var("SIZEOF_TIME_T"),
        "sizeof_off_t": sysconfig.get_config_var("SIZEOF_OFF_T"),
        "page_size": os.sysconf("SC_PAGE_SIZE"),
        "loop": "asyncio" if factory is None else factory.__module__.split(".")[0],
        "compilers": [c for c in ("gcc", "cc", "musl-gcc", "make") if shutil.which(c)],
        "python_headers": Path(sysconfig.get_paths()["include"], "Python.h").exists(),
        "built_wheels": Path("/opt/qledge/venv/qledge-built-wheels.txt").exists(),
        # Fleet mode's driver: shipped where a wheel exists (not on arm/v7).
        "asyncpg": importlib.util.find_spec("asyncpg") is not None,
        "pidfd_open": _try(pidfd),
        "platform_fromtimestamp_2038": _try(platform_datetime),
        "receipt_after_2038": _try(receipt_roundtrip),
        "store_after_2038": _try(store_roundtrip),
        "schedule_after_2038": _try(schedule_after_2038),
        "qinglong_dates_after_2038": _try(qinglong_dates),
        "log_past_2gib": _try(log_past_2gib),
        "aes_gcm": _try(aes_gcm),
        "heap_after_imports_kib": heap_kib,
    }
    print(json.dumps(out))


main()
