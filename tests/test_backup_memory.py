"""A backup larger than the worker's RSS streams in bounded memory (docs/backup.md,
docs/performance.md "Backup"): a real worker, GET /api/v1/backup?logs=1 read through
HTTP to the end, the worker's peak RSS (VmHWM, reset just before) against its RSS
before. The archive in flight is at most the response queue (16 × 64 KiB) plus
tarfile's and gzip's buffers: a few MiB, whatever the size."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import pytest

from qledge import backup

from support import Server

pytestmark = pytest.mark.slow

GROWTH_MIB = 16


def _kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def test_a_backup_larger_than_the_worker_streams_in_bounded_memory(tmp_path: Path) -> None:
    server = Server(tmp_path / "state")
    try:
        pid = server.proc.pid
        rss_before = _kib(pid, "VmRSS")
        data_mib = max(3 * rss_before // 1024, 120)  # well over the worker's own RSS
        rng = random.Random(39)
        scripts, logs = tmp_path / "state" / "work" / "scripts", tmp_path / "state" / "logs"
        (logs / "big").mkdir(parents=True, exist_ok=True)
        for i in range(data_mib // 8):
            target = scripts / f"b{i}.bin" if i % 2 else logs / "big" / f"r{i}.log"
            target.write_bytes(rng.randbytes(8 * 1024**2))
        rss_before = _kib(pid, "VmRSS")
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS now
        r_fd, w_fd = os.pipe()
        n = 0
        got: list[backup.Manifest] = []
        checker = threading.Thread(
            target=lambda: got.append(backup.verify(os.fdopen(r_fd, "rb"))))
        checker.start()
        with server.http.stream("GET", "/api/v1/backup", params={"logs": "1"},
                                timeout=300) as resp:
            assert resp.status_code == 200
            for chunk in resp.iter_raw():
                n += len(chunk)
                os.write(w_fd, chunk)
        os.close(w_fd)
        checker.join(120)
        peak = _kib(pid, "VmHWM")
    finally:
        server.stop()
    assert got, "the streamed archive did not verify"
    assert n > data_mib * 1024**2 * 0.9 and n > 2 * rss_before * 1024  # random: no shrink
    assert sum(m.size for m in got[0].members) >= data_mib // 8 * 8 * 1024**2
    growth = (peak - rss_before) / 1024
    assert growth < GROWTH_MIB, (
        f"peak RSS {peak / 1024:.1f} MiB, {growth:.1f} MiB over {rss_before / 1024:.1f}"
        f" MiB before, for a {n / 1024**2:.0f} MiB archive")
