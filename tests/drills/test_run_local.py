"""`scripts/run-local` as an operator tries fleet mode (issue 41): several nodes
started from one checkout, on one real PostgreSQL.

Every start runs scripts/bootstrap, which builds the launchers: a second node
started while the first runs tasks must not take the binary those tasks are
spawned from away (the first node lost runs as SPAWN_FAILED). And, as the image's
entrypoint does, run-local hands the secrets over in files: no database URL (with
its password), cluster secret or admin token in supervisord's environment, which
the worker inherits and a task of the same uid could read in /proc.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from _pg import Cluster, psql

from ._fleet import LEASES, SECRET, cluster_fixture  # noqa: F401  (the fixture)
from .conftest import FAST, make_task, trigger, wait_terminal, wait_until
from _appliance import ADMIN, ROOT, Appliance
from support import free_port

pytestmark = [pytest.mark.drill]

# Ignored by the drills' cluster (trust authentication), but in the URL as an
# operator's would be: it must reach no process environment.
PASSWORD = "run-local-db-password-7f3a9c"


class RunLocal(Appliance):
    """A node started the operator's way: `scripts/run-local` from this checkout, its
    state under `state`; run-local execs supervisord, so `proc` is supervisord."""

    def start(self, timeout: float = 30) -> None:
        env = {k: v for k, v in self.env.items()
               # run-local's own: the checkout's venv, launcher and run dir.
               if k not in ("QLEDGE_PYTHON", "QLEDGE_LAUNCHER", "QLEDGE_RUN_DIR")}
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.output, "ab") as out:
            self.proc = subprocess.Popen([str(ROOT / "scripts" / "run-local")], env=env,
                                         stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self.wait_ready(timeout)


@pytest.fixture
def dsn(cluster: Cluster) -> Iterator[str]:
    name = f"runlocal_{time.monotonic_ns()}"
    psql(cluster.dsn, f"CREATE DATABASE {name} TEMPLATE template0")
    yield (f"{cluster.dsn.rsplit('/', 1)[0]}/{name}"
           .replace("postgres@", f"postgres:{PASSWORD}@", 1))


def environ(pid: int) -> bytes:
    return Path(f"/proc/{pid}/environ").read_bytes()


def test_a_second_run_local_node_from_one_checkout_loses_nothing_on_the_first(
        tmp_path: Path, dsn: str) -> None:
    settings = {**FAST, **LEASES, "profile": "cluster-control", "database_url": dsn,
                "cluster_secret": SECRET}
    a = RunLocal(tmp_path / "a", free_port(), node_name="a", **settings)
    b = RunLocal(tmp_path / "b", free_port(), node_name="b", **settings)
    runs: list[str] = []
    stop = threading.Event()
    try:
        a.start(180)
        # Short runs placed on the first node, started one after another for as long
        # as the second node takes to start (its bootstrap builds the launchers).
        task = make_task(a, "true", placement={"node": "a", "labels": []})

        def load() -> None:
            while not stop.is_set() and len(runs) < 400:
                runs.append(trigger(a, task["id"]))
                time.sleep(0.02)
        feeder = threading.Thread(target=load, name="load", daemon=True)
        feeder.start()
        wait_until(lambda: len(runs) >= 10, 60, "the first node running tasks")
        b.start(180)
        more = len(runs) + 10
        wait_until(lambda: len(runs) >= more or not feeder.is_alive(), 60,
                   "runs started after the second node came up")
        stop.set()
        feeder.join(30)
        ended: Counter[tuple[str, str]] = Counter()
        for run_id in runs:
            run = wait_terminal(a, run_id, 120)
            ended[(run["status"], run["reason_code"])] += 1
            assert run["status"] == "succeeded", (run, ended)
        # Secrets: in files, never in an environment (the worker inherits supervisord's).
        for node in (a, b):
            assert node.proc is not None
            env = environ(node.proc.pid)
            # By name only: a failure must not print the secret or the environment.
            leaked = [name for name, secret in (("database url", dsn), ("password", PASSWORD),
                                                ("cluster secret", SECRET), ("token", ADMIN))
                      if secret.encode() in env]
            assert not leaked, f"in {node.state.name}'s supervisord environment: {leaked}"
            for name in ("DATABASE_URL", "CLUSTER_SECRET", "ADMIN_TOKEN"):
                assert f"QLEDGE_{name}_FILE=".encode() in env, name
                handed = node.run_dir / {"DATABASE_URL": "database.url",
                                         "CLUSTER_SECRET": "cluster.secret",
                                         "ADMIN_TOKEN": "admin.token"}[name]
                assert handed.stat().st_mode & 0o077 == 0, handed
    finally:
        stop.set()
        b.stop()
        a.stop()
