"""Three qledge nodes on loopback over one real PostgreSQL (docs/fleet.md, the test rig).

Each node is the real supervised appliance (`_appliance.Appliance`: supervisord, the
worker on its own port, real launchers) with its own state dir, `node_name` n1…n3 and
short leases, so that the drills see takeovers in seconds. The cluster is the drills'
own (`tests/_pg.Cluster`), not the session's shared one: a drill restarts it.

"Freezing a whole node" stops every process of that node — supervisord, its worker,
its launchers and their tasks (launchers run in sessions of their own, so a process-
group signal would miss them): the processes are found by walking /proc from
supervisord's pid and from the launchers whose receipt dir is under the node's state.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _pg import Cluster, pg_bindir, psql

from .conftest import FAST, api, ok, wait_until
from _appliance import Appliance, kill_leftover_tasks, launcher_pids
from support import free_port

SECRET = "fleet-drill-cluster-secret-0123456789abcdef"
# Leases short enough for drills: a node is `expired` 3 s after its last heartbeat.
LEASES = {"node_lease_s": "3", "node_heartbeat_s": "0.5", "leader_lease_s": "2"}


class Fleet:
    def __init__(self, root: Path, dsn: str) -> None:
        self.root = root
        self.dsn = dsn
        self.nodes: dict[str, Appliance] = {}
        self.markers = root / "markers"  # outside every state dir: what tasks really did
        self.markers.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, *, labels: str = "", profile: str = "cluster-control",
              wait: bool = True, **settings: str) -> Appliance:
        state = self.root / name
        app = Appliance(state, free_port(), **{
            **FAST, **LEASES, "profile": profile, "database_url": self.dsn,
            "cluster_secret": SECRET, "node_name": name, "node_labels": labels,
            **settings})
        if wait:
            app.start(60)
        else:
            app.run_dir.mkdir(parents=True, exist_ok=True)
        self.nodes[name] = app
        return app

    def restart(self, name: str, **settings: str) -> Appliance:
        """The same node (state dir, name) started again, e.g. without a failpoint."""
        old = self.nodes[name]
        env = {k[len("QLEDGE_"):].lower(): v for k, v in old.env.items()
               if k.startswith("QLEDGE_") and k[len("QLEDGE_"):].lower() in _SETTINGS}
        env.update(settings)
        app = Appliance(old.state, old.port, **env)
        app.start(60)
        self.nodes[name] = app
        return app

    def close(self) -> None:
        for app in self.nodes.values():
            thaw_processes(processes_of(app))
            app.stop()
            kill_leftover_tasks(app.state)

    # -- what tasks did, outside the control plane ---------------------------------------

    def marked(self, tag: str, code: int, sleep: str = "0", gate: Path | None = None) -> str:
        """A command that waits (for `gate`, if given), then writes where it ran and its
        exit code to a marker file, then exits with that code."""
        marker = self.markers / tag
        wait = f"while [ ! -e {gate} ]; do sleep 0.05; done; " if gate else ""
        return (f"{wait}sleep {sleep}; echo \"$(pwd) {code}\" > {marker}.tmp;"
                f" mv {marker}.tmp {marker}; exit {code}")

    def marker(self, tag: str) -> tuple[str, int] | None:
        """(the node that ran it, its exit code) from the task's own marker."""
        try:
            where, code = (self.markers / tag).read_text().split()
        except FileNotFoundError:
            return None
        return Path(where).parent.name, int(code)


# Fixtures under names of their own (pytest knows them by `name`), so that a test
# module imports them without shadowing its parameters.
@pytest.fixture(scope="module", name="cluster")
def cluster_fixture() -> Iterator[Cluster]:
    """The drills' own PostgreSQL: one drill crashes and restarts it."""
    c = Cluster(pg_bindir(), free_port())
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.fixture(name="fleet")
def fleet_fixture(cluster: Cluster, tmp_path: Path) -> Iterator[Fleet]:
    """A fresh database on it, and the nodes a test starts, all stopped at the end."""
    name = f"fleet_{time.monotonic_ns()}"
    psql(cluster.dsn, f"CREATE DATABASE {name} TEMPLATE template0")
    f = Fleet(tmp_path, f"{cluster.dsn.rsplit('/', 1)[0]}/{name}")
    try:
        yield f
    finally:
        f.close()


_SETTINGS = {"database_url", "cluster_secret", "node_name", "node_labels", "profile",
             "node_lease_s", "node_heartbeat_s", "leader_lease_s", "fenced_tasks",
             *FAST}


# -- processes of a node ---------------------------------------------------------------


def _parents() -> dict[int, int]:
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        found[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return found


def processes_of(app: Appliance) -> set[int]:
    """Every process of one node: supervisord's tree and the launchers' trees."""
    roots = launcher_pids(app.state)
    if app.proc is not None and app.proc.poll() is None:
        roots.add(app.proc.pid)
    parents = _parents()
    found = set(roots)
    grew = True
    while grew:
        grew = False
        for pid, ppid in parents.items():
            if ppid in found and pid not in found:
                found.add(pid)
                grew = True
    return found


def _signal_all(pids: set[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def freeze_processes(pids: set[int]) -> None:
    _signal_all(pids, signal.SIGSTOP)


def thaw_processes(pids: set[int]) -> None:
    _signal_all(pids, signal.SIGCONT)


def freeze(app: Appliance) -> set[int]:
    """SIGSTOP the whole node; a second pass catches a child forked meanwhile."""
    pids = processes_of(app)
    freeze_processes(pids)
    more = processes_of(app) - pids
    freeze_processes(more)
    return pids | more


# -- reading the fleet through any node's API -------------------------------------------


def nodes_view(app: Appliance) -> dict[str, dict[str, Any]]:
    items = ok(api(app, "GET", "/nodes"))["items"]
    return {n["name"]: n for n in items}


def wait_node_state(app: Appliance, name: str, state: str, timeout: float = 30
                    ) -> dict[str, Any]:
    def seen() -> dict[str, Any] | None:
        node = nodes_view(app).get(name)
        return node if node is not None and node["state"] == state else None
    return wait_until(seen, timeout, f"node {name} {state}", interval=0.2)


def pg_ctl(cluster: Any, *args: str) -> None:
    subprocess.run([*cluster.prefix, str(cluster.bin / "pg_ctl"), "-D", str(cluster.data),
                    *args], check=True, capture_output=True, timeout=120)


def now_s() -> float:
    return time.monotonic()
