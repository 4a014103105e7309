"""An idle embedded worker does not load what only a feature in use needs (issue 40).

A fresh interpreter follows `qledge serve`'s path up to serving — settings, roots,
migrations, create_app, the app's lifespan startup (the Runtime and all its loops) on
uvloop — then lists sys.modules. Modules for fleet mode (httpx, asyncpg), the QingLong
importer, Prometheus metrics before a run ends or a scrape comes, notification
sending (apprise), subscription pulls (dulwich, urllib3) must
not be there: each costs the idle worker megabytes of memory for every hour nobody
uses it (docs/performance.md, "Idle memory").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support import launcher_path

ROOT = Path(__file__).resolve().parents[1]

# Top-level names (a package and everything under it) that idle must not import.
ABSENT = (
    "httpx", "click", "pygments", "idna",  # fleet mode's log proxy (http/_proxy.py)
    "asyncpg",  # fleet mode's PostgreSQL (database_url empty here)
    "apprise", "requests", "markdown", "yaml", "oauthlib",  # notification sends
    "dulwich", "urllib3",  # subscription pulls
    "tarfile",  # the QingLong importer's archive reader
    "prometheus_client",  # GET /metrics and the first finished run (runtime/metrics.py)
    "qledge.qinglong_import", "qledge.qinglong_source", "qledge.qinglong_plan",
    "qledge.qinglong_report", "qledge.runtime.imports",  # the QingLong importer
)

PROBE = r"""
import asyncio, json, os, sys

from qledge import paths, settings
from qledge.cli.serve import _loop_factory
from qledge.db import backend
from qledge.http.app import create_app

# serve()'s own imports, in its order (they load before it serves).
from hypercorn.asyncio import serve  # noqa: F401
from hypercorn.config import Config  # noqa: F401
from qledge import process  # noqa: F401
from qledge.launch import isolation  # noqa: F401
from qledge.launch.identity import pidfd_unavailable  # noqa: F401
from qledge.receipts.store import probe  # noqa: F401

conf = settings.load()
paths.prepare_roots(conf)
backend.migrate_now(conf)
app = create_app(conf, "idle-test-token-0123456789abcdef")


async def lifespan() -> None:
    events = asyncio.Queue()
    sent = asyncio.Queue()
    await events.put({"type": "lifespan.startup"})

    async def send(message):
        await sent.put(message)

    task = asyncio.ensure_future(app({"type": "lifespan", "asgi": {"version": "3.0"},
                                      "state": {}}, events.get, send))
    started = await asyncio.wait_for(sent.get(), 60)
    assert started["type"] == "lifespan.startup.complete", started
    await asyncio.sleep(1.0)  # the loops' first rounds
    print(json.dumps(sorted(sys.modules)))
    await events.put({"type": "lifespan.shutdown"})
    await asyncio.wait_for(sent.get(), 60)
    await task

with asyncio.Runner(loop_factory=_loop_factory()) as runner:
    runner.run(lifespan())
"""


def _idle_modules(tmp_path: Path) -> list[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("QLEDGE_", "QLTEST_"))}
    env.update({
        "PYTHONPATH": str(ROOT / "app"),
        "QLEDGE_STATE_DIR": str(tmp_path / "state"),
        "QLEDGE_LAUNCHER": launcher_path(),
        "QLEDGE_HOST": "127.0.0.1",
        "QLEDGE_PORT": "1",
    })
    res = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-4000:]
    names: list[str] = json.loads(res.stdout.strip().splitlines()[-1])
    return names


def test_an_idle_worker_does_not_import_what_only_features_in_use_need(tmp_path: Path
                                                                        ) -> None:
    names = _idle_modules(tmp_path)
    # The probe really ran the worker: its runtime and HTTP stack are there.
    assert {"qledge.runtime.lifecycle", "qledge.http.app", "hypercorn.asyncio",
            "aiosqlite"} <= set(names)
    loaded = sorted(n for n in names
                    if any(n == a or n.startswith(a + ".") for a in ABSENT))
    assert loaded == [], f"an idle worker imported {loaded}"
