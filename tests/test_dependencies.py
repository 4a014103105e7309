"""Dependencies end to end (docs/dependencies.md): wheels built in the test behind a PEP
503 index on loopback, `npm pack` tarballs behind a minimal npm registry; installs run
as runs of the queue tasks under the real launcher; scripts import what was installed;
failures, kills, cancels and an interpreter change leave nothing half-broken."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from _pkg_index import PackageServer, make_wheel, npm_pack
from qledge.tasks.writable import TaskFields

from support import ADMIN, eventually, make_settings, migrate_for

pytestmark = pytest.mark.pg  # also run on PostgreSQL: scripts/test's QLTEST_BACKEND=pg pass

API = "/api/v1/dependencies"
SECRET = "mirror-pw-5d2c9e"
TINY_PY = "def hello():\n    return 'hello from tinypkg'\n"
TINY_JS = "module.exports = () => 'hello from tinyjs';\n"


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PackageServer]:
    out = tmp_path_factory.mktemp("sources")
    srv = PackageServer()
    srv.add_wheel("tinypkg", make_wheel(out / "w", "tinypkg", "1.0.0", body=TINY_PY))
    srv.add_wheel("tinypkg", make_wheel(out / "w", "tinypkg", "1.1.0", body=TINY_PY))
    srv.add_wheel("Other_Pkg", make_wheel(out / "w", "Other_Pkg", "0.3", module="otherpkg"))
    # Thousands of files, its METADATA first: an install cut short can leave the
    # metadata without the code (pip would then call it "already satisfied").
    srv.add_wheel("bigpkg", make_wheel(out / "w", "bigpkg", "2.0", padding=4000))
    srv.add_tarball("tinyjs", "1.0.0", npm_pack(out / "n", "tinyjs", "1.0.0", TINY_JS))
    srv.add_tarball("tinyjs", "1.2.0", npm_pack(out / "n", "tinyjs", "1.2.0", TINY_JS))
    srv.add_tarball("@qt/scoped", "0.1.0", npm_pack(out / "n", "@qt/scoped", "0.1.0",
                                                    "module.exports = 'scoped';\n"))
    yield srv
    srv.close()


def client(state: Path, srv: PackageServer, **overrides: str) -> TestClient:
    from qledge.http.app import create_app

    settings = {"pip_index_url": srv.index_url(), "npm_registry": srv.registry(), **overrides}
    conf = make_settings(state, **settings)
    migrate_for(conf)
    return TestClient(create_app(conf, ADMIN), headers={"Authorization": f"Bearer {ADMIN}"})


@pytest.fixture
def api(tmp_path: Path, sources: PackageServer) -> Iterator[TestClient]:
    sources.hold = None
    sources.release.clear()
    sources.holding.clear()
    with client(tmp_path / "state", sources) as c:
        yield c


def work(c: TestClient) -> Path:
    path: Path = c.app.state.runtime.settings.work_path  # type: ignore[attr-defined]
    return path


def wait_run(c: TestClient, run_id: str, timeout: float = 120) -> tuple[dict[str, Any], str]:
    run = eventually(lambda: (r := c.get(f"/api/v1/runs/{run_id}").json())["terminal"] and r,
                     timeout=timeout, interval=0.05, what=f"run {run_id} to end")
    return run, c.get(f"/api/v1/runs/{run_id}/log").text


def add(c: TestClient, kind: str, *specs: str) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """Add and wait: (the run, its log, the list answer)."""
    r = c.post(API, json={"type": kind, "specs": list(specs)})
    assert r.status_code == 202, r.text
    run, log = wait_run(c, r.json()["run_id"])
    return run, log, c.get(API).json()


def by_name(listing: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in listing["items"]}


def run_script(c: TestClient, name: str, source: str) -> tuple[dict[str, Any], str]:
    """A script in the scripts folder, run as `task <name> now` (the panel's Run)."""
    path = work(c) / "scripts" / name
    path.write_text(source)
    r = c.post("/api/v1/scripts/run", json={"path": name})
    assert r.status_code == 202, r.text
    return wait_run(c, r.json()["run"]["id"])


USE_PY = "import tinypkg\nprint(tinypkg.hello(), tinypkg.VERSION)\n"
USE_JS = "console.log(require('tinyjs')())\n"
USE_MJS = "import hello from 'tinyjs';\nconsole.log('esm', hello())\n"


@pytest.mark.slow
def test_packages_install_once_and_scripts_import_them_across_a_restart(
        tmp_path: Path, sources: PackageServer) -> None:
    state = tmp_path / "state"
    with client(state, sources) as c:
        run, log, listing = add(c, "python", "tinypkg==1.0.0", "Other_Pkg")
        assert run["status"] == "succeeded", log
        assert "Successfully installed" in log and "installed: tinypkg 1.0.0" in log
        items = by_name(listing)
        assert items["tinypkg"]["status"] == "installed"
        assert items["tinypkg"]["installed_version"] == "1.0.0"
        assert items["other-pkg"]["spec"] == "Other_Pkg"  # PEP 503 name, spec as given
        assert items["tinypkg"]["last_run_id"] == run["id"]
        run, log, listing = add(c, "node", "tinyjs@1", "@qt/scoped")
        assert run["status"] == "succeeded", log
        assert by_name(listing)["tinyjs"]["installed_version"] == "1.2.0"
        assert by_name(listing)["@qt/scoped"]["status"] == "installed"
        # The queues are ordinary tasks: one per ecosystem, overlap queue.
        envs = listing["environments"]
        task = c.get(f"/api/v1/tasks/{envs['python']['task_id']}").json()
        assert (task["name"], task["overlap"], task["labels"]) == (
            "dependencies: python", "queue", ["dependencies"])
        assert envs["python"]["state"] == "ok" and envs["node"]["available"] is True

        for name, source, want in (("use.py", USE_PY, "hello from tinypkg 1.0.0"),
                                   ("use.js", USE_JS, "hello from tinyjs"),
                                   ("use.mjs", USE_MJS, "esm hello from tinyjs")):
            run, log = run_script(c, name, source)
            assert run["status"] == "succeeded" and want in log, (name, log)
        # A shell command finds the venv's python3 first on PATH too.
        r = c.post("/api/v1/tasks", json={"name": "sh", "command":
                                          "python3 -c 'import otherpkg; print(\"otherpkg ok\")'"})
        sh = r.json()["id"]
        run, log = wait_run(c, c.post(f"/api/v1/tasks/{sh}/runs").json()["run"]["id"])
        assert run["status"] == "succeeded" and "otherpkg ok" in log, log

    with client(state, sources) as c:  # a new worker: nothing reinstalled, all there
        listing = c.get(API).json()
        assert {d["status"] for d in listing["items"]} == {"installed"}
        assert len(c.get("/api/v1/runs", params={"limit": 200}).json()["items"]) == 6
        run, log = run_script(c, "use.py", USE_PY)
        assert run["status"] == "succeeded" and "hello from tinypkg" in log, log
        run, log = run_script(c, "use.js", USE_JS)
        assert run["status"] == "succeeded" and "hello from tinyjs" in log, log


def _tree(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.lstat().st_size for p in folder.rglob("*")
            if "__pycache__" not in p.parts}


def test_a_failing_install_ends_failed_with_the_tools_message_and_changes_nothing(
        api: TestClient) -> None:
    run, log, _ = add(api, "python", "tinypkg==1.0.0")
    assert run["status"] == "succeeded", log
    run, log, _ = add(api, "node", "tinyjs@1.0.0")
    assert run["status"] == "succeeded", log
    venv, node = work(api) / ".deps" / "python", work(api) / ".deps" / "node"
    before = (_tree(venv), _tree(node))

    for kind, spec, message in (
            ("python", "nosuchpkg", "No matching distribution found for nosuchpkg"),
            ("python", "tinypkg==9.9", "No matching distribution found for tinypkg==9.9"),
            ("node", "nosuchjs", "404"),
            ("node", "tinyjs@7", "No matching version found for tinyjs@7")):
        run, log, listing = add(api, kind, spec)
        assert run["status"] == "failed" and run["exit_code"] == 1, log
        assert message in log, log
        assert "nothing else changed" in log
        name = spec.split("==")[0].split("@")[0]
        assert by_name(listing)[name]["status"] == "failed"
    listing = by_name(api.get(API).json())
    # The re-pinned tinypkg and tinyjs rows failed; what is installed did not move.
    assert listing["tinypkg"]["installed_version"] == "1.0.0"
    assert listing["tinyjs"]["installed_version"] == "1.0.0"
    assert (_tree(venv), _tree(node)) == before
    assert not (work(api) / ".deps" / "python.changing").exists()
    run, log = run_script(api, "use.py", USE_PY)
    assert "hello from tinypkg 1.0.0" in log, log


@pytest.mark.parametrize(("kind", "spec", "why"), [
    ("python", "--index-url=http://evil/simple", "looks like an option"),
    ("python", "-e .", "looks like an option"),
    ("python", "requests; rm -rf /", "not a Python requirement"),
    ("python", "pkg @ https://example.com/p.whl", "not a Python requirement"),
    ("python", "./local/path", "not a Python requirement"),
    ("python", "git+https://github.com/a/b", "not a Python requirement"),
    ("python", "requests==2.0; python_version<'3'", "not a Python requirement"),
    ("python", "$(id)", "not a Python requirement"),
    ("python", "", "must not be empty"),
    ("python", "x" * 201, "at most 200"),
    ("node", "github:user/repo", "not an npm package"),
    ("node", "file:../x", "not an npm package"),
    ("node", "axios@https://x/y.tgz", "not an npm package"),
    ("node", "axios@`id`", "not an npm package"),
    ("node", "../x", "not an npm package"),
    ("node", "--registry=http://evil", "looks like an option"),
    # pip reads these from the disk (the work dir, which tasks write), not the mirror
    ("python", "tinypkg-1.0.0-py3-none-any.whl", "names a file"),
    ("python", "tinypkg-1.0.0.tar.gz", "names a file"),
    ("python", "tinypkg==1.0.ZIP", "names a file"),
    ("node", "tinyjs-1.0.0.tgz", "names a tarball file"),
    ("node", "tinyjs@evil.tar", "names a tarball file"),
])
def test_bad_specs_are_refused_naming_the_spec(api: TestClient, kind: str, spec: str,
                                               why: str) -> None:
    r = api.post(API, json={"type": kind, "specs": ["tinypkg", spec]})
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "specs[1]" and why in r.json()["message"]
    assert api.get(API).json()["items"] == []  # nothing declared, nothing queued
    assert api.get("/api/v1/runs").json()["items"] == []


def test_system_packages_and_odd_requests_are_refused(api: TestClient) -> None:
    r = api.post(API, json={"type": "linux", "specs": ["curl"]})
    assert r.status_code == 422 and r.json()["field"] == "type"
    assert "EXTRA_PACKAGES" in r.json()["message"]
    r = api.post(API, json={"type": "ruby", "specs": ["rails"]})
    assert r.status_code == 422 and r.json()["field"] == "type"
    r = api.post(API, json={"type": "python", "specs": []})
    assert r.status_code == 422 and r.json()["field"] == "specs"
    r = api.post(API, json={"type": "python", "specs": ["p"] * 101})
    assert r.status_code == 422 and r.json()["field"] == "specs"
    r = api.post(API, json={"type": "python", "specs": ["tinypkg"], "extra": 1})
    assert r.status_code == 422
    assert api.post(f"{API}/rebuild", json={"type": "linux"}).status_code == 422
    assert api.post(f"{API}/remove", json={"ids": []}).status_code == 422
    missing = "01900000-0000-7000-8000-000000000000"
    assert api.post(f"{API}/remove", json={"ids": [missing]}).status_code == 404
    assert api.get(f"{API}/{missing}").status_code == 404
    assert api.get(f"{API}/nope").status_code == 404
    assert api.get(API).json()["items"] == []


def test_remove_then_forget(api: TestClient) -> None:
    run, log, listing = add(api, "node", "tinyjs")
    dep = by_name(listing)["tinyjs"]
    assert api.delete(f"{API}/{dep['id']}").status_code == 409  # installed: remove first
    r = api.post(f"{API}/remove", json={"ids": [dep["id"]]})
    assert r.status_code == 202
    run, log = wait_run(api, r.json()["run_ids"][0])
    assert run["status"] == "succeeded", log
    got = api.get(f"{API}/{dep['id']}").json()
    assert (got["status"], got["action"], got["installed_version"]) == ("removed", "remove",
                                                                        None)
    run, log = run_script(api, "use.js", USE_JS)
    assert run["status"] == "failed" and "Cannot find module 'tinyjs'" in log
    r = api.post(f"{API}/reinstall", json={"ids": [dep["id"]]})
    run, log = wait_run(api, r.json()["run_ids"][0])
    assert api.get(f"{API}/{dep['id']}").json()["status"] == "installed"
    r = api.post(f"{API}/remove", json={"ids": [dep["id"]]})
    wait_run(api, r.json()["run_ids"][0])
    assert api.delete(f"{API}/{dep['id']}").status_code == 204
    assert api.get(API).json()["items"] == []


def _wait(cond: Any, timeout: float = 60, what: str = "") -> None:
    eventually(cond, timeout=timeout, interval=0.002, what=what)


def _job_pids(run_id: str) -> list[int]:
    """The install process of this run and the pip/npm below it (by their environment
    and parentage: every process below the run's launcher but the launcher itself)."""
    launchers = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if run_id.encode() in argv and b"--run-id" in argv:
            launchers.append(int(entry))
    pids: list[int] = []
    for launcher in launchers:
        pids += _descendants(launcher)
    return pids


def _descendants(pid: int) -> list[int]:
    out = []
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    for child in map(int, children):
        out += [child, *_descendants(child)]
    return out


@pytest.mark.slow
def test_kill_9_mid_install_and_the_next_install_of_it_succeeds(api: TestClient) -> None:
    run, log, _ = add(api, "python", "tinypkg==1.0.0")
    assert run["status"] == "succeeded", log
    site = next((work(api) / ".deps" / "python" / "lib").glob("python3.*/site-packages"))
    r = api.post(API, json={"type": "python", "specs": ["bigpkg"]})
    run_id = r.json()["run_id"]
    meta = site / "bigpkg-2.0.dist-info" / "METADATA"
    _wait(meta.exists, what="pip never began to install bigpkg")
    pids = _job_pids(run_id)
    assert len(pids) >= 2, pids  # the install process and pip
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    run, log = wait_run(api, run_id)
    assert run["status"] == "failed", log
    dep = by_name(api.get(API).json())["bigpkg"]
    assert dep["status"] == "failed"
    assert (work(api) / ".deps" / "python.changing").exists()
    # What the kill left: bigpkg's metadata without all its code. pip alone would now
    # call bigpkg "already satisfied", and `import bigpkg.zz_last` would fail.
    assert not (site / "bigpkg" / "zz_last.py").exists()
    venv_python = str(work(api) / ".deps" / "python" / "bin" / "python3")
    assert subprocess.run([venv_python, "-c", "import bigpkg.zz_last"],
                          capture_output=True).returncode != 0

    r = api.post(f"{API}/reinstall", json={"ids": [dep["id"]]})
    run, log = wait_run(api, r.json()["run_ids"][0])
    assert run["status"] == "succeeded", log
    assert "rebuilding the python folder with 1 package(s): an earlier change was cut" \
           " short" in log
    assert not (work(api) / ".deps" / "python.changing").exists()
    listing = by_name(api.get(API).json())
    assert listing["bigpkg"]["status"] == "installed"
    assert listing["tinypkg"]["installed_version"] == "1.0.0"  # rebuilt from the declared
    run, log = run_script(api, "big.py", "import bigpkg.zz_last, tinypkg\nprint('both ok')\n")
    assert "both ok" in log, log


def test_a_cancelled_install_is_cancelled_and_repaired_by_the_next(
        api: TestClient, sources: PackageServer) -> None:
    sources.hold = "tinyjs-1.2.0.tgz"
    r = api.post(API, json={"type": "node", "specs": ["tinyjs"]})
    run_id = r.json()["run_id"]
    assert sources.holding.wait(60)
    assert by_name(api.get(API).json())["tinyjs"]["status"] == "installing"
    # Queued behind it: one run per queue at a time, later wishes join one waiting run.
    r2 = api.post(API, json={"type": "node", "specs": ["@qt/scoped"]})
    r3 = api.post(API, json={"type": "node", "specs": ["tinyjs@1.0.0"]})
    assert r2.json()["run_id"] == r3.json()["run_id"] != run_id
    assert by_name(api.get(API).json())["@qt/scoped"]["status"] == "queued"
    assert api.get(f"/api/v1/runs/{r2.json()['run_id']}").json()["status"] == "queued"
    assert api.post(f"/api/v1/runs/{run_id}/cancel").status_code in (200, 202)
    sources.release.set()
    run, log = wait_run(api, run_id)
    assert run["status"] == "cancelled", log
    run, log = wait_run(api, r2.json()["run_id"])
    assert run["status"] == "succeeded", log
    assert "an earlier change was cut short" in log
    listing = by_name(api.get(API).json())
    assert listing["@qt/scoped"]["status"] == "installed"
    assert (listing["tinyjs"]["status"], listing["tinyjs"]["installed_version"]) == (
        "installed", "1.0.0")  # the later wish (1.0.0) won


def _set_cfg_version(c: TestClient, version: str) -> None:
    cfg = work(c) / ".deps" / "python" / "pyvenv.cfg"
    lines = [f"version_info = {version}" if line.startswith(("version_info", "version ="))
             else line for line in cfg.read_text().splitlines()]
    cfg.write_text("\n".join(lines) + "\n")


@pytest.mark.slow
def test_a_venv_of_another_python_or_a_broken_one_is_rebuilt_as_a_visible_run(
        tmp_path: Path, sources: PackageServer) -> None:
    state = tmp_path / "state"
    with client(state, sources) as c:
        run, log, _ = add(c, "python", "tinypkg==1.0.0")
        assert run["status"] == "succeeded", log
        _set_cfg_version(c, "3.9.18")  # as if the image's Python had changed since
    with client(state, sources) as c:
        dep = by_name(c.get(API).json())["tinypkg"]
        assert dep["last_run_id"] != run["id"]  # a new run took it over
        run, log = wait_run(c, dep["last_run_id"])
        assert run["status"] == "succeeded", log
        assert "it was made by Python 3.9, this is" in log
        cfg = (work(c) / ".deps" / "python" / "pyvenv.cfg").read_text()
        assert f"{sys.version_info[0]}.{sys.version_info[1]}." in cfg
        assert by_name(c.get(API).json())["tinypkg"]["status"] == "installed"
        run, log = run_script(c, "use.py", USE_PY)
        assert "hello from tinypkg 1.0.0" in log, log
        (work(c) / ".deps" / "python" / "bin" / "python3").unlink()
    with client(state, sources) as c:
        dep = by_name(c.get(API).json())["tinypkg"]
        run, log = wait_run(c, dep["last_run_id"])
        assert run["status"] == "succeeded" and "bin/python3 is missing" in log, log
        run, log = run_script(c, "use.py", USE_PY)
        assert "hello from tinypkg 1.0.0" in log, log
    with client(state, sources) as c:  # healthy: no run at start
        runs = c.get("/api/v1/runs", params={"limit": 200}).json()["items"]
        assert len([r for r in runs if not r["terminal"]]) == 0


def test_mirror_credentials_are_never_shown(tmp_path: Path, sources: PackageServer) -> None:
    guarded = PackageServer(auth=("user", SECRET))
    guarded.wheels = sources.wheels
    try:
        with client(tmp_path / "state", sources,
                    pip_index_url=guarded.index_url(f"user:{SECRET}")) as c:
            run, log, listing = add(c, "python", "tinypkg")
            assert run["status"] == "succeeded", log
            assert guarded.requests  # it really went through the guarded mirror
            assert SECRET not in log and "user:" not in log
            assert listing["mirrors"]["pip_index_url"] == \
                f"http://***@127.0.0.1:{guarded.port}/simple/"
            events = c.get(f"/api/v1/runs/{run['id']}/events").text
            assert SECRET not in events and SECRET not in c.get(API).text
    finally:
        guarded.close()


def test_a_bad_mirror_setting_stops_start_up_without_showing_its_password(
        tmp_path: Path) -> None:
    from qledge import settings

    with pytest.raises(settings.SettingsError) as err:
        make_settings(tmp_path, pip_index_url=f"ftp://u:{SECRET}@mirror/simple")
    assert "must be an http" in str(err.value) and SECRET not in str(err.value)


def test_the_install_process_refuses_without_a_job_or_without_npm(tmp_path: Path) -> None:
    import msgspec

    from qledge.dependencies.spec import ENV_NAME, Job

    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(sys.path)}
    res = subprocess.run([sys.executable, "-m", "qledge", "deps", "apply", "python"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "no job in the environment" in res.stderr
    job = Job(run_id="r", ecosystem="node", action="install", specs=("tinyjs",),
              deps_dir=str(tmp_path / ".deps"))
    env = {**env, "PATH": str(tmp_path), ENV_NAME: msgspec.json.encode(job).decode()}
    res = subprocess.run([sys.executable, "-m", "qledge", "deps", "apply", "node"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "need the image's -node variant" in res.stdout, res
    assert not (tmp_path / ".deps" / "node").exists()


def test_installs_wait_while_the_dispatcher_holds_runs(api: TestClient) -> None:
    """Disk pressure holds every queued run through the dispatcher's may_spawn
    (tests/test_diskpressure.py); a dependency run is one of them."""
    rt = api.app.state.runtime  # type: ignore[attr-defined]
    held = rt.dispatcher.may_spawn

    async def pressure() -> str:
        return "DISK_LOW"

    rt.dispatcher.may_spawn = pressure
    try:
        r = api.post(API, json={"type": "python", "specs": ["tinypkg"]})
        time.sleep(1.0)
        assert api.get(f"/api/v1/runs/{r.json()['run_id']}").json()["status"] == "queued"
    finally:
        rt.dispatcher.may_spawn = held
    rt.kick()
    run, log = wait_run(api, r.json()["run_id"])
    assert run["status"] == "succeeded", log


@pytest.mark.slow
def test_an_install_survives_a_worker_kill_and_the_appliance_restarting(
        tmp_path: Path, sources: PackageServer) -> None:
    """The real supervised appliance: kill -9 of the worker while pip waits on the
    mirror; the install run goes on, ends honestly, and its package is still there
    after the whole appliance restarted."""
    from _appliance import Appliance
    from support import free_port, wait_terminal

    sources.hold = "tinypkg-1.1.0-py3-none-any.whl"
    sources.holding.clear()
    sources.release.clear()
    def appliance() -> Appliance:
        return Appliance(tmp_path / "state", port, pip_index_url=sources.index_url(),
                         npm_registry=sources.registry())

    port = free_port()
    app = appliance()
    app.start()
    try:
        r = app.api("POST", "/dependencies", json={"type": "python", "specs": ["tinypkg"]})
        assert r.status_code == 202, r.text
        run_id = r.json()["run_id"]
        assert sources.holding.wait(60), app.log_tail()
        app.kill_worker()
        sources.release.set()
        app.wait_ready(60)
        run = wait_terminal(app.http, run_id, 120)
        log = app.api("GET", f"/runs/{run_id}/log").text
        assert run["status"] == "succeeded", (run, log)
        assert "installed: tinypkg 1.1.0" in log
        dep = app.api("GET", "/dependencies").json()["items"][0]
        assert (dep["status"], dep["installed_version"]) == ("installed", "1.1.0")
        (tmp_path / "state" / "work" / "scripts" / "use.py").write_text(USE_PY)

        def use() -> str:
            r = app.api("POST", "/scripts/run", json={"path": "use.py"})
            got = wait_terminal(app.http, r.json()["run"]["id"], 60)
            text = app.api("GET", f"/runs/{got['id']}/log").text
            assert got["status"] == "succeeded", text
            return text

        assert "hello from tinypkg 1.1.0" in use()
        app.stop()
        app = appliance()
        app.start()
        assert "hello from tinypkg 1.1.0" in use()
        runs = app.api("GET", "/runs", params={"limit": 200}).json()["items"]
        assert sum(r["task_id"] == dep_task(app) for r in runs) == 1  # nothing reinstalled
    finally:
        sources.hold = None
        sources.release.set()
        app.stop()


def dep_task(app: Any) -> str:
    task_id: str = app.api("GET", "/dependencies").json()["environments"]["python"]["task_id"]
    return task_id


def test_the_queue_task_cannot_be_borrowed_for_the_mirrors_password(
        tmp_path: Path, sources: PackageServer) -> None:
    """Issue 35: a `crons` token set the queue task's command to `printenv QL_DEPS_JOB`
    and read the pip mirror's password from its log."""
    from qledge.clock import now_ms
    from qledge.db import tasks

    guarded = PackageServer(auth=("user", SECRET))
    guarded.wheels = sources.wheels
    try:
        with client(tmp_path / "state", sources,
                    pip_index_url=guarded.index_url(f"user:{SECRET}")) as c:
            run, log, _ = add(c, "python", "tinypkg")
            assert run["status"] == "succeeded", log
            task_id = run["task_id"]
            task = c.get(f"/api/v1/tasks/{task_id}").json()
            assert " -I -m qledge deps apply python" in task["command"]
            r = c.post("/api/v1/apps", json={"name": "c", "scopes": ["crons"]})
            app = r.json()
            r = c.get("/open/auth/token", params={"client_id": app["client_id"],
                                                  "client_secret": app["client_secret"]})
            crons = {"Authorization": f"Bearer {r.json()['data']['token']}"}
            steal = "printenv QL_DEPS_JOB; echo borrowed"
            r = c.put("/open/crons", json={"id": task["num"], "command": steal}, headers=crons)
            assert r.status_code == 409 and "cannot be changed" in r.json()["message"], r.text
            r = c.patch(f"/api/v1/tasks/{task_id}", json={"command": steal})
            assert r.status_code == 409 and r.json()["error"] == "SYSTEM_TASK", r.text
            r = c.patch(f"/api/v1/tasks/{task_id}", json={"env": {"LD_PRELOAD": "/x.so"}})
            assert r.status_code == 409 and r.json()["field"] == "env", r.text

            # However the command changed (outside the APIs): it runs without the job.
            rt = c.app.state.runtime  # type: ignore[attr-defined]

            async def edit() -> None:
                async with rt.db.write() as tx:
                    await tasks.update_task(tx, task_id, TaskFields(command=steal), now_ms())

            c.portal.call(edit)  # type: ignore[attr-defined]
            r = c.post(f"/api/v1/tasks/{task_id}/runs")
            assert r.status_code in (201, 202), r.text
            run, log = wait_run(c, r.json()["run"]["id"])
            assert "borrowed" in log and SECRET not in log and "QL_DEPS_JOB" not in log

            # A `qledge` package planted in the work dir is not what the job runs (-I);
            # the next install sets the queue task's command back.
            planted = work(c) / "qledge"
            planted.mkdir()
            (planted / "__init__.py").write_text("")
            (planted / "__main__.py").write_text(
                "import os\nprint('planted', os.environ.get('QL_DEPS_JOB'))\n")
            run, log, _ = add(c, "python", "Other_Pkg")
            assert run["status"] == "succeeded", log
            assert "planted" not in log and SECRET not in log
    finally:
        guarded.close()
