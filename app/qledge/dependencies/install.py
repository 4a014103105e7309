"""`qledge deps apply <python|node>`: one dependency job, run as a task under the
launcher (docs/dependencies.md).

The worker hands the job — install, remove or rebuild, the specs, the declared list,
the mirrors — in the environment of that one launch (QL_DEPS_JOB); the first thing
this process does is blank it. pip and npm run as children in the launcher's process
group (a cancel or timeout reaches them), their output goes through a filter that
blanks mirror credentials, and their exit code is the run's.

Never half-broken: the `.changing` marker (dirs.py) is on disk before pip or
npm touch a folder and leaves only after they exited on their own. A job that finds
one, or a venv made by another Python, or a missing folder the database says was
installed, first rebuilds the folder from the declared list — said so in the log.

Exit codes: 0 done, 1 pip/npm failed or the job was refused (the reason is in the
log), 2 started without a job (not as the dependencies task), 128+N interrupted by
signal N.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit

import msgspec

from .. import process
from ..paths import fsync_dir
from . import dirs
from .spec import (
    ENV_NAME,
    Ecosystem,
    Job,
    node_package,
    python_package,
    redact,
    secrets_of,
)

# What pip and npm see of the task's environment (not the user's envs, not cookies).
_PASS = {"PATH", "HOME", "LANG", "LC_ALL", "TZ", "http_proxy", "https_proxy", "no_proxy",
         "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "all_proxy", "SSL_CERT_FILE",
         "SSL_CERT_DIR", "PIP_CERT", "NODE_EXTRA_CA_CERTS"}
_PASS_PREFIXES = ("PIP_", "NPM_CONFIG_", "npm_config_")
DEBIAN_PIP = "/usr/share/python-wheels/pip-*.whl"  # python3-pip-whl, in the image
INTERRUPTED = "the change was cut short; the next run of this queue rebuilds the folder" \
              " from the declared list"


class Refused(Exception):
    """The job cannot run here (no pip, no npm); the message says what to do."""


class Runner:
    """One job's state: its output filter and the signal that stopped it."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.work = Path(job.deps_dir).parent
        self.secrets = secrets_of([job.pip_index_url, *job.pip_extra_index_urls,
                                   job.npm_registry])
        self.signalled = 0

    def say(self, text: str) -> None:
        print(redact(text, self.secrets), flush=True)

    def run(self, argv: list[str], env: dict[str, str]) -> int:
        """The tool's exit code; negative: killed by that signal. Its output is
        printed line by line, credentials blanked."""
        try:
            child = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except OSError as exc:
            self.say(f"cannot start {Path(argv[0]).name}: {os.strerror(exc.errno or 0)}")
            return 127
        assert child.stdout is not None
        for line in child.stdout:
            sys.stdout.write(redact(line.decode("utf-8", "replace"), self.secrets))
            sys.stdout.flush()
        return child.wait()

    def ended(self, code: int, tool: str) -> int | None:
        """None if the tool exited on its own (the folder is consistent); else the exit
        code of this run, the marker left in place."""
        if code >= 0 and not self.signalled:
            return None
        sig = self.signalled or -code
        self.say(f"{tool} was stopped by signal {sig}: {INTERRUPTED}")
        return 128 + sig

    def env(self) -> dict[str, str]:
        return {k: v for k, v in os.environ.items()
                if k in _PASS or k.startswith(_PASS_PREFIXES)}


def main(ecosystem: str) -> int:
    process.make_nondumpable()
    raw = os.environ.get(ENV_NAME)
    process.scrub_environ(ENV_NAME)
    if raw is None:
        print("deps: no job in the environment: dependencies are installed by their"
              " queue's task (POST /api/v1/dependencies)", file=sys.stderr)
        return 2
    try:
        job = msgspec.json.decode(raw, type=Job)
    except msgspec.DecodeError as exc:
        print(f"deps: unreadable job: {exc}", file=sys.stderr)
        return 2
    if job.ecosystem != ecosystem:
        print(f"deps: the job is for {job.ecosystem}, not {ecosystem}", file=sys.stderr)
        return 2
    state = Runner(job)

    def stop(signum: int, frame: FrameType | None) -> None:
        state.signalled = signum  # the tool got it too (one process group): let it end

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    dirs.root(state.work).mkdir(mode=0o755, exist_ok=True)
    words = ", ".join(job.specs) if job.specs else "(nothing)"
    state.say(f"{job.action} {ecosystem}: {words}")
    try:
        with _locked(dirs.root(state.work) / f"{ecosystem}.lock"):
            return python_job(state) if ecosystem == "python" else node_job(state)
    except Refused as exc:
        state.say(f"refused: {exc}")
        return 1
    except OSError as exc:
        state.say(f"failed: {type(exc).__name__}: {os.strerror(exc.errno or 0)}")
        return 1


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# -- the marker ----------------------------------------------------------------------

def _mark(state: Runner, eco: Ecosystem) -> None:
    path = dirs.marker(state.work, eco)
    tmp = path.with_name(f"{path.name}.{os.getpid()}")
    data = json.dumps({"action": state.job.action, "run_id": state.job.run_id}).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _unmark(state: Runner, eco: Ecosystem) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(dirs.marker(state.work, eco))
    fsync_dir(dirs.root(state.work))


def _repair_reason(state: Runner, eco: Ecosystem, present: bool, check: str = "") -> str:
    """Why the folder must be rebuilt before this job's own change ('' if it need not)."""
    if dirs.changing(state.work, eco):
        return "an earlier change was cut short (killed, timed out or cancelled)"
    if check:
        return check
    if not present and state.job.declared:
        return "it is missing, and packages are declared installed"
    return ""


def _rebuild(state: Runner, eco: Ecosystem, specs: tuple[str, ...], reason: str) -> int:
    """Remove the folder and install `specs` afresh (each alone if all at once fails).
    0, 1 (some left out, said above), or 128+N when interrupted (marker kept)."""
    state.say(f"rebuilding the {eco} folder with {len(specs)} package(s): {reason}")
    _mark(state, eco)
    shutil.rmtree(dirs.folder(state.work, eco), ignore_errors=True)
    if os.path.lexists(dirs.folder(state.work, eco)):
        raise Refused(f"could not remove {dirs.ROOT}/{eco} to rebuild it")
    installer = _Python(state) if eco == "python" else _Node(state)
    installer.create()
    failed: list[str] = []
    if specs:
        code = installer.install(list(specs))
        stopped = state.ended(code, installer.tool)
        if stopped is not None:
            return stopped
        if code != 0 and len(specs) > 1:
            state.say("installing them together failed; trying each alone")
            for spec in specs:
                code = installer.install([spec])
                stopped = state.ended(code, installer.tool)
                if stopped is not None:
                    return stopped
                if code != 0:
                    failed.append(spec)
        elif code != 0:
            failed = list(specs)
    _unmark(state, eco)
    if failed:
        state.say(f"rebuilt without: {', '.join(failed)} (their errors are above)")
        return 1
    state.say(f"rebuilt the {eco} folder")
    return 0


def _apply(state: Runner, eco: Ecosystem, installer: _Python | _Node, reason: str) -> int:
    job = state.job
    if job.action == "rebuild":
        return _rebuild(state, eco, job.specs, reason or "asked for")
    if reason:
        code = _rebuild(state, eco, job.declared, reason)
        if code > 1:
            return code
    elif not os.path.isdir(dirs.folder(state.work, eco)):
        if job.action == "remove":
            state.say(f"nothing to remove: no {eco} packages are installed")
            return 0
        _mark(state, eco)
        installer.create()
        _unmark(state, eco)
    if not job.specs:
        state.say("nothing to do: this run's packages were re-queued or removed meanwhile")
        return 0
    _mark(state, eco)
    code = installer.install(list(job.specs)) if job.action == "install" \
        else installer.remove(list(job.specs))
    stopped = state.ended(code, installer.tool)
    if stopped is not None:
        return stopped
    _unmark(state, eco)  # pip and npm leave a consistent folder when they fail on their own
    if code != 0:
        state.say(f"{installer.tool} exited {code}: nothing else changed")
        return 1
    if job.action == "install":
        for line in installer.versions(list(job.specs)):
            state.say(line)
    return 0


# -- Python --------------------------------------------------------------------------

class _Python:
    tool = "pip"

    def __init__(self, state: Runner) -> None:
        self.state = state
        self.venv = dirs.folder(state.work, "python")
        self.python = str(self.venv / "bin" / "python3")

    def create(self) -> None:
        """The image's python3 (the one this process runs on), no pip inside: pip runs
        from its wheel against it, so the venv holds only the user's packages."""
        venv.EnvBuilder(symlinks=True, with_pip=False).create(str(self.venv))

    def pip_argv(self) -> list[str]:
        wheels = sorted(glob.glob(DEBIAN_PIP))
        if wheels:
            return [self.python, f"{wheels[-1]}/pip"]
        if importlib.util.find_spec("pip") is not None:
            return [sys.executable, "-m", "pip", "--python", self.python]
        raise Refused("this image has no pip (Debian's python3-pip-whl)")

    def _env(self) -> dict[str, str]:
        job = self.state.job
        env = self.state.env()
        env["PATH"] = f"{self.venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
        env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1",
                   PIP_PROGRESS_BAR="off")
        urls = [u for u in (job.pip_index_url, *job.pip_extra_index_urls) if u]
        if job.pip_index_url:
            env["PIP_INDEX_URL"] = job.pip_index_url
        if job.pip_extra_index_urls:
            env["PIP_EXTRA_INDEX_URL"] = " ".join(job.pip_extra_index_urls)
        plain = sorted({urlsplit(u).netloc.rpartition("@")[2] for u in urls
                        if u.startswith("http://")})
        if plain:  # an http:// mirror the operator chose: pip would ignore it otherwise
            env["PIP_TRUSTED_HOST"] = " ".join(plain)
        return env

    def install(self, specs: list[str]) -> int:
        return self.state.run([*self.pip_argv(), "install", "--upgrade", "--no-cache-dir",
                               "--no-warn-script-location", *specs], self._env())

    def remove(self, names: list[str]) -> int:
        return self.state.run([*self.pip_argv(), "uninstall", "-y", *names], self._env())

    def versions(self, specs: list[str]) -> list[str]:
        found = dirs.python_versions(self.state.work)
        out = []
        for spec in specs:
            name = python_package(spec).name
            out.append(f"installed: {name} {found.get(name, '(not found)')}")
        return out


def python_job(state: Runner) -> int:
    installer = _Python(state)
    installer.pip_argv()  # refuse before touching anything when there is no pip
    check = dirs.check_venv(state.work)
    bad = check.reason if check.state in ("other_python", "broken") else ""
    reason = _repair_reason(state, "python", check.state != "absent", bad)
    return _apply(state, "python", installer, reason)


# -- Node ----------------------------------------------------------------------------

class _Node:
    tool = "npm"

    def __init__(self, state: Runner) -> None:
        self.state = state
        self.prefix = dirs.folder(state.work, "node")
        npm = shutil.which("npm", path=os.environ.get("PATH", ""))
        if npm is None:
            raise Refused("node packages need the image's -node variant: this one has no"
                          " npm (docs/dependencies.md)")
        self.npm = npm

    def create(self) -> None:
        self.prefix.mkdir(mode=0o755, parents=True, exist_ok=True)
        manifest = self.prefix / "package.json"
        if not manifest.exists():
            manifest.write_text('{"name": "qledge-dependencies", "private": true}\n')

    def _env(self) -> dict[str, str]:
        env = self.state.env()
        env.update(npm_config_update_notifier="false", npm_config_fund="false",
                   npm_config_audit="false", npm_config_logs_max="0",
                   # a cache per run, removed after it: the work volume stays bounded
                   npm_config_cache=str(self.cache))
        if self.state.job.npm_registry:
            env["npm_config_registry"] = self.state.job.npm_registry
        return env

    @property
    def cache(self) -> Path:
        return dirs.root(self.state.work) / f".npm-cache-{os.getpid()}"

    def _npm(self, verb: str, words: list[str]) -> int:
        try:
            return self.state.run([self.npm, verb, "--prefix", str(self.prefix), *words],
                                  self._env())
        finally:
            shutil.rmtree(self.cache, ignore_errors=True)

    def install(self, specs: list[str]) -> int:
        code = self._npm("install", specs)
        if code == 0:
            self._link_for_esm()
        return code

    def remove(self, names: list[str]) -> int:
        return self._npm("uninstall", names)

    def _link_for_esm(self) -> None:
        """ESM `import` ignores NODE_PATH: a `work/node_modules` link lets scripts under
        the work dir find the packages either way (never over something that is there)."""
        link = self.state.work / "node_modules"
        if not os.path.lexists(link):
            with contextlib.suppress(OSError):
                os.symlink(f"{dirs.ROOT}/node/node_modules", link)

    def versions(self, specs: list[str]) -> list[str]:
        out = []
        for spec in specs:
            name = node_package(spec).name
            out.append(f"installed: {name} "
                       f"{dirs.node_version(self.state.work, name) or '(not found)'}")
        return out


def node_job(state: Runner) -> int:
    installer = _Node(state)
    present = dirs.node_modules(state.work).is_dir()
    return _apply(state, "node", installer, _repair_reason(state, "node", present))
