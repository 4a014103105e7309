"""Fleet mode with the real image (docs/fleet.md, compose.yaml's `fleet` profile):
PostgreSQL and two amd64 nodes on a user-defined Docker network, started like
compose's node-a (cluster-control) and node-b (cluster-worker, label `gpio`).

Through node-a's published port only: both nodes listed live with one leader; a task
placed on `gpio`, triggered through node-a, runs on node-b and fails with its own exit
code; its log, read through node-a, is the bytes on node-b's volume (none on node-a's);
the database URL, cluster secret and admin token are in no environment of either
container (PID 1's or the worker's: the entrypoint hands them over as *_FILE). Then
`docker kill` of node-b: within its short lease node-a shows it `expired` and a read of
its log answers 503 NODE_UNAVAILABLE; started again (same volumes), the log reads
again. And the arm/v7 image refuses fleet mode, saying why.

No registry here: the PostgreSQL image is built from the local Debian base
(scripts/image base) with Debian's postgresql, tagged by its recipe's hash so the
engine's copy serves every later run. Everything is removed at the end, failed or not.
scripts/test builds the images first (scripts/image build); without the engine or an
image this skips with the reason, except under CI (a failure).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from .drill import tag_of
from support import unavailable

pytestmark = [pytest.mark.drill, pytest.mark.slow]
DOCKER = "/usr/bin/docker"
PG_BASE = "qledge/base:bookworm-amd64"
SECRET_NAMES = ("QLEDGE_DATABASE_URL", "QLEDGE_CLUSTER_SECRET", "QLEDGE_ADMIN_TOKEN")
VOLUMES = ("data", "receipts", "logs", "work")
LEASE_S = 6
MARKER = "hello from the gpio node"

# A fresh cluster at every start (the test wants nothing kept): superuser `qledge`
# with the given password, a `qledge` database, scram over the network, in the foreground.
PG_ENTRYPOINT = """\
#!/bin/sh
set -eu
bin=$(echo /usr/lib/postgresql/*/bin)
data=$(mktemp -d /var/lib/postgresql/fleet.XXXXXX)
pw=$(mktemp)
printf '%s\\n' "$POSTGRES_PASSWORD" >"$pw"
"$bin/initdb" -D "$data" -U qledge --pwfile="$pw" -E UTF8 --auth-local=trust \\
    --auth-host=scram-sha-256 >/dev/null
rm -f "$pw"
echo "host all all all scram-sha-256" >>"$data/pg_hba.conf"
echo "CREATE DATABASE qledge" | "$bin/postgres" --single -D "$data" postgres >/dev/null
exec "$bin/postgres" -D "$data" -c listen_addresses='*' -c unix_socket_directories=/tmp
"""
PG_RECIPE = f"""\
FROM {PG_BASE}
RUN apt-get -o Acquire::Retries=3 update \\
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql \\
    && rm -rf /var/lib/apt/lists/*
COPY fleet-db /usr/local/bin/fleet-db
USER postgres
EXPOSE 5432
ENTRYPOINT ["/bin/sh", "/usr/local/bin/fleet-db"]
"""


def _docker(*args: str, check: bool = True, timeout: float = 120) -> str:
    done = subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args[:3])}: {done.stderr.strip()[-800:]}")
    return done.stdout.strip()


def _require(platform: str) -> str:
    """The image, with fleet mode in it (an image built before it would fail obscurely)."""
    image = tag_of(platform)
    built = os.access(DOCKER, os.X_OK) and subprocess.run(
        [DOCKER, "image", "inspect", image], capture_output=True).returncode == 0
    if not built:
        unavailable(f"{image} not built (scripts/image build --platform {platform})")
    fleet = subprocess.run(
        [DOCKER, "run", "--rm", "--platform", platform, "--entrypoint", "test", image,
         "-f", "/opt/qledge/app/qledge/runtime/fleet.py"], capture_output=True, timeout=120)
    if fleet.returncode != 0:
        unavailable(f"{image} predates fleet mode (scripts/image build --platform {platform})")
    return image


def _postgres_image(tmp: Path) -> str:
    """The test's PostgreSQL image: built once, then the engine's copy (tag = recipe hash)."""
    if subprocess.run([DOCKER, "image", "inspect", PG_BASE], capture_output=True).returncode:
        unavailable(f"{PG_BASE} not built (scripts/image base)")
    digest = hashlib.sha256((PG_RECIPE + PG_ENTRYPOINT).encode()).hexdigest()[:12]
    tag = f"qledge-test/postgres:{digest}"
    if subprocess.run([DOCKER, "image", "inspect", tag], capture_output=True).returncode:
        (tmp / "Dockerfile").write_text(PG_RECIPE)
        (tmp / "fleet-db").write_text(PG_ENTRYPOINT)
        _docker("build", "-q", "-t", tag, str(tmp), timeout=600)
    return tag


def _until(what: str, check: Callable[[], Any], timeout: float,
           context: Callable[[], str] = str) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except httpx.HTTPError as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(0.25)
    raise AssertionError(f"{what} not within {timeout:g} s (last: {last!r}){context()}")


@dataclass
class Fleet:
    prefix: str
    image: str
    db_password: str = field(default_factory=lambda: secrets.token_hex(24))
    cluster_secret: str = field(default_factory=lambda: secrets.token_urlsafe(33))
    admin_token: str = field(default_factory=lambda: secrets.token_urlsafe(33))
    containers: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)
    url: str = ""

    @property
    def network(self) -> str:
        return f"{self.prefix}-net"

    @property
    def db(self) -> str:
        return f"{self.prefix}-db"

    def node(self, short: str) -> str:
        return f"{self.prefix}-{short}"

    def start_db(self, image: str) -> None:
        self.containers.append(self.db)
        _docker("run", "-d", "--name", self.db, "--network", self.network,
                "-e", f"POSTGRES_PASSWORD={self.db_password}", image)
        _until("PostgreSQL accepting connections", lambda: subprocess.run(
            [DOCKER, "exec", self.db, "pg_isready", "-q", "-h", "127.0.0.1", "-U", "qledge",
             "-d", "qledge"], capture_output=True).returncode == 0, 60,
            lambda: "\n" + _docker("logs", "--tail", "30", self.db, check=False))

    def start_node(self, short: str, profile: str, labels: str = "") -> None:
        """Like compose.yaml's node-a / node-b (PUID/PGID and TZ left at the image's)."""
        name = self.node(short)
        self.containers.append(name)
        vols = [f"{name}-{v}" for v in VOLUMES]
        self.volumes += vols
        env = {"QLEDGE_DATABASE_URL":
               f"postgresql://qledge:{self.db_password}@{self.db}:5432/qledge",
               "QLEDGE_CLUSTER_SECRET": self.cluster_secret,
               "QLEDGE_ADMIN_TOKEN": self.admin_token, "QLEDGE_PROFILE": profile,
               "QLEDGE_NODE_NAME": short, "QLEDGE_NODE_URL": f"http://{name}:5700",
               "QLEDGE_NODE_LEASE_S": str(LEASE_S), "QLEDGE_NODE_HEARTBEAT_S": "1",
               "QLEDGE_ROUND_INTERVAL_S": "1"}
        if labels:
            env["QLEDGE_NODE_LABELS"] = labels
        _docker("run", "-d", "--name", name, "--network", self.network,
                "--platform", "linux/amd64", "--pids-limit", "512",
                "-p", "127.0.0.1::5700",
                *(a for k, v in env.items() for a in ("-e", f"{k}={v}")),
                *(a for v, vol in zip(VOLUMES, vols, strict=True) for a in
                  ("-v", f"{vol}:/var/lib/qledge/{v}")), self.image)

    def published(self, short: str) -> str:
        port = _docker("port", self.node(short), "5700/tcp").splitlines()[0].rsplit(":", 1)[1]
        return f"http://127.0.0.1:{port}"

    def logs(self) -> str:
        return "".join(f"\n--- {c}:\n" + _docker("logs", "--tail", "40", c, check=False)
                       for c in self.containers)

    def environments(self, short: str) -> dict[str, dict[str, str]]:
        """PID 1's environment, read as the tasks' uid (what a task could do), and the
        worker's: it makes itself non-dumpable, so not even root inside the container
        may read it — the host's /proc can (the engine runs here)."""
        raw = {"pid 1": subprocess.run(
            [DOCKER, "exec", "-u", "1000:1000", self.node(short), "cat", "/proc/1/environ"],
            capture_output=True, timeout=30, check=True).stdout}
        pid1 = _docker("inspect", "-f", "{{.State.Pid}}", self.node(short))
        host = Path(f"/proc/{pid1}/task/{pid1}/children")
        if not host.exists():
            unavailable("the engine's processes are not visible from this host's /proc")
        workers = [c for c in host.read_text().split()
                   if b"\0-m\0qledge" in Path(f"/proc/{c}/cmdline").read_bytes()]
        assert len(workers) == 1, workers
        raw["worker"] = Path(f"/proc/{workers[0]}/environ").read_bytes()
        return {k: dict(kv.decode().partition("=")[::2] for kv in v.split(b"\0") if kv)
                for k, v in raw.items()}

    def remove(self) -> None:
        for c in reversed(self.containers):
            _docker("rm", "-f", "-v", c, check=False)
        for v in self.volumes:
            _docker("volume", "rm", "-f", v, check=False)
        _docker("network", "rm", self.network, check=False)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    image = _require("linux/amd64")
    pg = _postgres_image(tmp_path)
    f = Fleet(f"qlfleet-{os.getpid()}-{random.randrange(1 << 20):05x}", image)
    try:
        _docker("network", "create", f.network)
        f.start_db(pg)
        f.start_node("node-a", "cluster-control")
        f.start_node("node-b", "cluster-worker", labels="gpio")
        f.url = f.published("node-a")
        yield f
    finally:
        f.remove()


def _nodes(http: httpx.Client) -> dict[str, dict[str, Any]]:
    body = http.get("/nodes").json()
    assert body["fleet"] is True and body["self"] == "node-a", body
    return {n["name"]: n for n in body["items"]}


def test_two_nodes_on_postgresql_place_run_serve_logs_and_survive_a_kill(fleet: Fleet) -> None:
    http = httpx.Client(base_url=f"{fleet.url}/api/v1", timeout=10,
                        headers={"Authorization": f"Bearer {fleet.admin_token}"})
    with http:
        _until("node-a ready", lambda: httpx.get(f"{fleet.url}/readyz", timeout=5)
               .status_code == 200, 90, fleet.logs)
        # Both live, one leader: node-a (a cluster-worker never leads).
        def both_live_and_led() -> dict[str, dict[str, Any]] | None:
            n = _nodes(http)
            ok = set(n) == {"node-a", "node-b"} and all(
                x["state"] == "live" for x in n.values()) and any(x["leader"] for x in n.values())
            return n if ok else None

        nodes = _until("both nodes live with a leader", both_live_and_led, 60, fleet.logs)
        assert [n for n, x in nodes.items() if x["leader"]] == ["node-a"], nodes
        assert "gpio" in nodes["node-b"]["labels"] and "gpio" not in nodes["node-a"]["labels"]

        # Placed on `gpio`, triggered through node-a: it runs on node-b.
        r = http.post("/tasks", json={"name": "gpio-echo", "command": f"echo {MARKER}; exit 3",
                                      "placement": {"labels": ["gpio"]}})
        assert r.status_code == 201, r.text
        r = http.post(f"/tasks/{r.json()['id']}/runs")
        assert r.status_code == 202, r.text
        run_id = r.json()["run"]["id"]
        def finished() -> dict[str, Any] | None:
            run: dict[str, Any] = http.get(f"/runs/{run_id}").json()
            return run if run["terminal"] else None

        run = _until("the run's end", finished, 60, fleet.logs)
        assert (run["status"], run["exit_code"]) == ("failed", 3), run
        assert [a["node"] for a in run["attempts"]] == ["node-b"], run["attempts"]
        events = http.get(f"/runs/{run_id}/events").json()["items"]
        assert sum(e["type"] == "run.finished" for e in events) == 1, events

        # The log through node-a is node-b's file; node-a holds none.
        log = http.get(f"/runs/{run_id}/log")
        assert (log.status_code, log.content) == (200, f"{MARKER}\n".encode()), log.text
        holders = {short: _docker("exec", fleet.node(short), "grep", "-rl", MARKER,
                                  "/var/lib/qledge/logs", check=False).split()
                   for short in ("node-a", "node-b")}
        assert holders["node-a"] == [] and len(holders["node-b"]) == 1, holders
        on_b = subprocess.run([DOCKER, "exec", fleet.node("node-b"), "cat",
                               holders["node-b"][0]], capture_output=True, check=True).stdout
        assert on_b == log.content

        # The three secrets: in no environment, handed over as files.
        values = (fleet.db_password, fleet.cluster_secret, fleet.admin_token)
        for short in ("node-a", "node-b"):
            for which, env in fleet.environments(short).items():
                where = f"{short} {which}"
                assert not set(SECRET_NAMES) & set(env), (where, sorted(env))
                assert all(f"{n}_FILE" in env for n in SECRET_NAMES), (where, sorted(env))
                assert not [v for v in values if any(v in x for x in env.values())], where

        # docker kill node-b: node-a takes it over within its lease and says so.
        epoch = _nodes(http)["node-b"]["epoch"]
        _docker("kill", fleet.node("node-b"))
        t0 = time.monotonic()
        _until("node-b expired", lambda: _nodes(http)["node-b"]["state"] == "expired",
               LEASE_S + 15, fleet.logs)
        taken_over_s = time.monotonic() - t0
        down = http.get(f"/runs/{run_id}/log")
        assert down.status_code == 503, (down.status_code, down.text)
        assert down.json()["error"] == "NODE_UNAVAILABLE", down.text
        assert down.json()["node"] == "node-b", down.text

        # Started again (same container, same volumes): live, and the log reads again.
        _docker("start", fleet.node("node-b"))
        _until("node-b live again", lambda: _nodes(http)["node-b"]["state"] == "live", 90,
               fleet.logs)
        assert _nodes(http)["node-b"]["epoch"] > epoch  # registered again, a new epoch
        back = _until("node-b's log again",
                      lambda: http.get(f"/runs/{run_id}/log").status_code == 200, 30,
                      fleet.logs)
        assert back and http.get(f"/runs/{run_id}/log").content == f"{MARKER}\n".encode()
    print(json.dumps({"taken_over_s": round(taken_over_s, 1), "lease_s": LEASE_S}))


def test_arm_v7_refuses_fleet_mode_saying_why() -> None:
    image = _require("linux/arm/v7")
    password = secrets.token_hex(12)
    done = subprocess.run(
        [DOCKER, "run", "--rm", "--platform", "linux/arm/v7",
         "-e", f"QLEDGE_DATABASE_URL=postgresql://qledge:{password}@db.invalid/qledge",
         "-e", f"QLEDGE_CLUSTER_SECRET={secrets.token_urlsafe(33)}",
         "-e", f"QLEDGE_ADMIN_TOKEN={secrets.token_urlsafe(33)}",
         image, "qledge", "migrate"], capture_output=True, text=True, timeout=300)
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    assert "fleet mode" in said and "arm/v7" in said and "asyncpg" in said, said
    assert password not in said
