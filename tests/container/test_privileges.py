"""The image's privileges, seen from inside a real container: PID 1 (supervisord), the
HTTP worker, a task's launcher and the task itself all run as uid/gid 1000 with
no_new_privs and no capability at all (every set empty, bounding set included);
the generated admin token is a 0600 file of uid 1000, printed once; the volume
roots are 0700. And the image's end-to-end smoke (scripts/image smoke) passes.

scripts/test builds the images first (scripts/image build). Without a Docker
engine or the image this skips with the reason, except under CI (a failure).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from support import ROOT, unavailable

pytestmark = [pytest.mark.drill, pytest.mark.slow]
DOCKER = "/usr/bin/docker"
UID = GID = "1000"
CAPS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")
VOLUMES = ("data", "receipts", "logs", "work")


def _docker(*args: str, check: bool = True, timeout: float = 120) -> str:
    done = subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args[:3])}: {done.stderr.strip()[-600:]}")
    return done.stdout.strip()


def _image(platform: str) -> str:
    image = "qledge:local-" + platform.split("/")[-1]
    engine = os.access(DOCKER, os.X_OK) and subprocess.run(
        [DOCKER, "image", "inspect", image], capture_output=True).returncode == 0
    if not engine:
        unavailable(f"{image} not built (scripts/image build --platform {platform})")
    return image


@dataclass
class Container:
    name: str
    url: str
    slow: float

    def exec(self, *args: str) -> str:
        return _docker("exec", self.name, *args)

    def status(self, pid: int | str) -> dict[str, str]:
        """/proc/<pid>/status inside the container, name -> value."""
        lines = self.exec("cat", f"/proc/{pid}/status").splitlines()
        return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}

    def assert_unprivileged(self, pid: int | str, what: str) -> None:
        st = self.status(pid)
        assert st["Uid"].split() == [UID] * 4, f"{what} (pid {pid}) Uid: {st['Uid']}"
        assert st["Gid"].split() == [GID] * 4, f"{what} (pid {pid}) Gid: {st['Gid']}"
        assert st["NoNewPrivs"] == "1", f"{what} (pid {pid}) lacks no_new_privs"
        held = {cap: st[cap] for cap in CAPS if int(st[cap], 16) != 0}
        assert held == {}, f"{what} (pid {pid}) holds capabilities"


@pytest.fixture(params=["linux/amd64", "linux/arm64"])
def box(request: pytest.FixtureRequest) -> Iterator[Container]:
    platform = request.param
    image = _image(platform)
    name = f"qledge-priv-{platform.split('/')[-1]}-{os.getpid()}-{random.randrange(1 << 20)}"
    port = random.randint(20000, 32000)
    slow = 1.0 if platform == "linux/amd64" else 8.0
    _docker("run", "-d", "--name", name, "--platform", platform,
            "-p", f"127.0.0.1:{port}:5700", "-e", "QLEDGE_ROUND_INTERVAL_S=1",
            *(a for v in VOLUMES for a in ("-v", f"{name}-{v}:/var/lib/qledge/{v}")), image)
    box = Container(name, f"http://127.0.0.1:{port}", slow)
    try:
        deadline = time.monotonic() + 60 * slow
        while True:
            try:
                if httpx.get(f"{box.url}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} not ready:\n{_docker('logs', name, check=False)}")
            time.sleep(0.2)
        yield box
    finally:
        _docker("rm", "-f", "-v", name, check=False)
        for v in VOLUMES:
            _docker("volume", "rm", "-f", f"{name}-{v}", check=False)


def _token(box: Container) -> str:
    done = subprocess.run([DOCKER, "logs", box.name], capture_output=True, text=True)
    logs = done.stdout + done.stderr
    printed = [line.rsplit(": ", 1)[1] for line in logs.splitlines()
               if "generated admin token" in line]
    assert len(printed) == 1, logs[-2000:]
    return printed[0]


def test_every_process_runs_unprivileged_and_the_token_is_private(box: Container) -> None:
    token = _token(box)
    stored = box.exec("stat", "-c", "%a %u %g", "/var/lib/qledge/data/secrets/admin.token")
    assert stored == f"600 {UID} {GID}"
    assert box.exec("cat", "/var/lib/qledge/data/secrets/admin.token").strip() == token
    for v in VOLUMES:
        assert box.exec("stat", "-c", "%a %u", f"/var/lib/qledge/{v}") == f"700 {UID}", v

    assert "supervisord" in box.exec("cat", "/proc/1/cmdline").replace("\0", " ")
    box.assert_unprivileged(1, "PID 1 (supervisord)")
    worker = box.exec("supervisorctl", "pid", "http")
    assert worker.isdigit() and worker != "0", worker
    box.assert_unprivileged(worker, "the HTTP worker")

    # A running task: its launcher and the command under it.
    http = httpx.Client(base_url=f"{box.url}/api/v1", timeout=30 * box.slow,
                        headers={"Authorization": f"Bearer {token}"})
    with http:
        task = http.post("/tasks", json={"name": "p", "command": "sleep 300"})
        assert task.status_code == 201, task.text
        run_id = http.post(f"/tasks/{task.json()['id']}/runs").json()["run"]["id"]
        deadline = time.monotonic() + 30 * box.slow
        while True:
            run = http.get(f"/runs/{run_id}").json()
            if run["attempts"] and run["attempts"][-1]["status"] == "running":
                break
            assert not run["terminal"] and time.monotonic() < deadline, run
            time.sleep(0.1)
        launcher = run["attempts"][-1]["pid"]
        box.assert_unprivileged(launcher, "a task's launcher")
        children = box.exec("cat", f"/proc/{launcher}/task/{launcher}/children").split()
        assert len(children) == 1, children
        box.assert_unprivileged(children[0], "a task")
        assert http.post(f"/runs/{run_id}/cancel").status_code == 202


def test_image_smoke() -> None:
    """scripts/image smoke on the host's image: health, token, 401, a task run, PID 1
    and worker privileges, kill -9 of the worker, docker stop within the grace,
    restart with the same token."""
    _image("linux/amd64")
    done = subprocess.run([str(ROOT / "scripts/image"), "smoke", "--platform", "linux/amd64"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["smoke"] == "ok" and summary["exit_code"] == 0, summary
    assert summary["run_cut_by_stop"] != "succeeded", summary
