"""The dependency manager inside the real image (docs/dependencies.md): a package
installed from the API lands in the `work` volume, a script imports it, and it is
still there after `docker restart` — Python on the default image (with Debian's
pip wheel and a venv made without ensurepip), Python and Node on the node variant.

The mirror is a package index served on the host's loopback by the test (no
network): the container shares the host's network namespace to reach it.
"""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from _pkg_index import PackageServer, make_wheel, npm_pack

from .test_node import DOCKER, _image

pytestmark = [pytest.mark.drill, pytest.mark.slow]
TOKEN = "deps-container-admin-token-0123456789"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(http: httpx.Client, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        run: dict[str, Any] = http.get(f"/api/v1/runs/{run_id}").json()
        if run["status"] not in ("queued", "running"):
            return run
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} did not end")


def _ready(http: httpx.Client) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if http.get("/readyz").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError("the appliance never became ready")


def _run(http: httpx.Client, task_id: str) -> tuple[str, str]:
    run_id = http.post(f"/api/v1/tasks/{task_id}/runs").json()["run"]["id"]
    run = _wait(http, run_id)
    return run["status"], http.get(f"/api/v1/runs/{run_id}/log").text


@pytest.mark.parametrize("variant", ["default", "node"])
def test_packages_installed_in_the_image_survive_a_restart(variant: str,
                                                           tmp_path: Path) -> None:
    image = _image("linux/amd64", variant)
    mirror = PackageServer()
    mirror.add_wheel("qsmoke", make_wheel(tmp_path, "qsmoke", "1.2.3",
                                          body="def hi():\n    return 'hi from qsmoke'\n"))
    if variant == "node":
        mirror.add_tarball("qsmoke-js", "2.0.0", npm_pack(
            tmp_path, "qsmoke-js", "2.0.0", "module.exports = () => 'hi from qsmoke-js';\n"))
    name, port = f"qledge-deps-{uuid.uuid4().hex[:8]}", _free_port()
    volumes = [f"{name}-work", f"{name}-data"]
    subprocess.run([DOCKER, "run", "-d", "--name", name, "--network", "host",
                    "-e", f"QLEDGE_PORT={port}", "-e", f"QLEDGE_ADMIN_TOKEN={TOKEN}",
                    "-e", f"QLEDGE_PIP_INDEX_URL={mirror.index_url()}",
                    "-e", f"QLEDGE_NPM_REGISTRY={mirror.registry()}",
                    "-v", f"{volumes[0]}:/var/lib/qledge/work",
                    "-v", f"{volumes[1]}:/var/lib/qledge/data", image],
                   check=True, capture_output=True, timeout=120)
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                        headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        _ready(http)
        scripts = {"python": ("use_dep.py", "import qsmoke\nprint(qsmoke.hi(), qsmoke.VERSION)\n",
                              "qsmoke==1.2.3", "hi from qsmoke 1.2.3")}
        if variant == "node":
            scripts["node"] = ("use_dep.js", "console.log(require('qsmoke-js')())\n",
                               "qsmoke-js@2", "hi from qsmoke-js")
        else:
            r = http.post("/api/v1/dependencies", json={"type": "node", "specs": ["x"]})
            assert r.status_code == 422 and "-node variant" in r.text, r.text
        tasks = {}
        for eco, (path, body, spec, _) in scripts.items():
            r = http.post("/api/v1/dependencies", json={"type": eco, "specs": [spec]})
            assert r.status_code == 202, r.text
            run = _wait(http, r.json()["run_id"])
            log = http.get(f"/api/v1/runs/{run['id']}/log").text
            assert run["status"] == "succeeded", (run, log)
            r = http.put("/api/v1/scripts/file", json={"path": path, "content": body})
            assert r.status_code == 201, r.text
            tasks[eco] = http.post("/api/v1/tasks", json={"name": eco,
                                                          "command": f"task {path}"}).json()["id"]
        for _ in ("installed", "after docker restart"):
            for eco, (_, _, _, expect) in scripts.items():
                status, log = _run(http, tasks[eco])
                assert status == "succeeded" and expect in log, (eco, status, log)
            subprocess.run([DOCKER, "restart", name], check=True, capture_output=True,
                           timeout=120)
            _ready(http)
        listed = {(d["type"], d["name"], d["status"], d["installed_version"])
                  for d in http.get("/api/v1/dependencies").json()["items"]}
        want = {("python", "qsmoke", "installed", "1.2.3")}
        if variant == "node":
            want.add(("node", "qsmoke-js", "installed", "2.0.0"))
        assert listed == want
        # installed once: the restarts downloaded nothing again
        assert sum(p.startswith("/files/qsmoke") for p in mirror.requests) == 1, \
            mirror.requests
    finally:
        http.close()
        subprocess.run([DOCKER, "rm", "-f", name], capture_output=True, timeout=120)
        subprocess.run([DOCKER, "volume", "rm", "-f", *volumes], capture_output=True,
                       timeout=120)
