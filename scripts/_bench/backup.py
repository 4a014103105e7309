"""A big backup streamed from a real worker (docs/performance.md, "Backup"): ~500 MB of
scripts and logs (--mb), then GET /api/v1/backup?logs=1 read through HTTP to the end
(and checked with backup.verify on the way, from the stream, not a file). Prints the
bytes, seconds, MB/s and the worker's RSS before and its peak during the download
(VmHWM after resetting it through /proc/<pid>/clear_refs): the archive is never held
whole, so the peak stays near the idle RSS whatever the size."""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "app"))

import httpx  # noqa: E402

from qledge import backup, settings  # noqa: E402
from qledge.db import migrate  # noqa: E402
from qledge.paths import prepare_roots  # noqa: E402

TOKEN = "b" * 43
FILE_MB = 8


def _kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _seed(conf: settings.Settings, total_mb: int) -> int:
    """Half scripts (random bytes: gzip cannot shrink them), half logs (text)."""
    rng = random.Random(39)
    written = 0
    line = b"2026-12-04T03:00:00Z check-in ok: 200 {\"retcode\":0,\"msg\":\"ok\"}\n"
    (conf.logs_path / "bench").mkdir(parents=True, exist_ok=True)
    for i in range(max(total_mb // FILE_MB, 2)):
        size = FILE_MB * 1024**2
        if i % 2 == 0:
            (conf.scripts_path / f"big{i:03d}.bin").write_bytes(rng.randbytes(size))
        else:
            text = (line * (size // len(line) + 1))[:size]
            (conf.logs_path / "bench" / f"run{i:03d}.log").write_bytes(text)
        written += size
    return written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mb", type=int, default=500, help="MB of scripts and logs")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="qledge-bench-backup-") as tmp:
        env = {**os.environ, "QLEDGE_STATE_DIR": tmp, "QLEDGE_ADMIN_TOKEN": TOKEN,
               "QLEDGE_HOST": "127.0.0.1", "QLEDGE_PORT": "0",
               "QLEDGE_LAUNCHER": str(REPO / "build" / "launcher" / os.uname().machine
                                      / "ql-launch")}
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            env["QLEDGE_PORT"] = str(s.getsockname()[1])
        conf = settings.load(env)
        prepare_roots(conf)
        migrate.apply(conf.db_path)
        t0 = time.monotonic()
        data = _seed(conf, args.mb)
        print(f"data set: {data / 1e6:.0f} MB of scripts and logs"
              f" (written in {time.monotonic() - t0:.1f} s)")
        worker = subprocess.Popen([sys.executable, "-m", "qledge", "serve"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{env['QLEDGE_PORT']}"
            with httpx.Client(base_url=url, timeout=60,
                              headers={"Authorization": f"Bearer {TOKEN}"}) as http:
                for _ in range(300):
                    try:
                        if http.get("/readyz").status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    time.sleep(0.1)
                rss_before = _kib(worker.pid, "VmRSS")
                Path(f"/proc/{worker.pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
                # The response's chunks go through a pipe into backup.verify: checked
                # as it arrives, never stored.
                feed_r, feed_w = os.pipe()
                got: dict[str, backup.Manifest] = {}

                def check() -> None:
                    with os.fdopen(feed_r, "rb") as f:
                        got["manifest"] = backup.verify(f)

                checker = threading.Thread(target=check)
                checker.start()
                n = 0
                t0 = time.monotonic()
                with http.stream("GET", "/api/v1/backup", params={"logs": "1"}) as resp:
                    assert resp.status_code == 200, resp.read()
                    first = None
                    for chunk in resp.iter_raw():
                        if first is None:
                            first = time.monotonic() - t0
                        n += len(chunk)
                        os.write(feed_w, chunk)
                took = time.monotonic() - t0
                os.close(feed_w)
                checker.join()
                peak = _kib(worker.pid, "VmHWM")
        finally:
            worker.terminate()
            worker.wait(30)
        manifest = got.get("manifest")
        assert manifest is not None, "the streamed archive did not verify"
        print(f"archive: {n / 1e6:.1f} MB in {took:.1f} s = {n / 1e6 / took:.1f} MB/s"
              f" out, {data / 1e6 / took:.1f} MB/s of data in"
              f" (first byte after {first or 0:.2f} s), verified:"
              f" {len(manifest.members)} members")
        print(f"worker RSS: {rss_before / 1024:.1f} MiB before, peak {peak / 1024:.1f} MiB"
              f" during (+{(peak - rss_before) / 1024:.1f} MiB for {data / 1e6:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
