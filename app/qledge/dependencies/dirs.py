"""Where dependencies live in the work volume, and what is there (docs/dependencies.md).

    work/.deps/python/            the virtual environment (`task *.py` runs use it)
    work/.deps/node/              npm's --prefix: package.json, node_modules/
    work/.deps/<eco>.changing     present while a change is under way (see below)
    work/.deps/<eco>.lock         flock of the install process

The `.changing` marker is written (and fsynced) before pip or npm touch a folder and
removed only after they exited on their own. A marker found later means a change was
cut short — a kill, a timeout, a cancel, a power cut — and the folder may hold a
half-extracted package that pip would call "already satisfied": the next run rebuilds
the folder from the declared list before it does anything else.

Read by the worker (the tasks' PATH/NODE_PATH, installed versions, start-up checks)
and by the install process. Reads are bounded and never follow a link at the last
component; a version is shown only if it looks like one.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Literal

import msgspec

from .spec import Ecosystem, normalize_python

ROOT = ".deps"
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]{0,63}")
_CFG_VERSION = re.compile(r"^\s*(?:version_info|version)\s*=\s*(\d+)\.(\d+)", re.M)
MAX_ENTRIES = 5000  # site-packages entries read for the installed versions
VenvState = Literal["absent", "ok", "other_python", "broken"]


class Check(msgspec.Struct, frozen=True, kw_only=True):
    state: VenvState
    reason: str = ""  # for the run's log and the API


def root(work: Path) -> Path:
    return work / ROOT


def folder(work: Path, eco: Ecosystem) -> Path:
    return root(work) / eco


def marker(work: Path, eco: Ecosystem) -> Path:
    return root(work) / f"{eco}.changing"


def node_modules(work: Path) -> Path:
    return folder(work, "node") / "node_modules"


def venv_bin(work: Path) -> Path:
    return folder(work, "python") / "bin"


def this_python() -> tuple[int, int]:
    return sys.version_info[0], sys.version_info[1]


def _read(path: Path, limit: int) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def check_venv(work: Path, want: tuple[int, int] | None = None) -> Check:
    """Is the venv there, and made by this Python (major.minor)? A venv of another
    minor finds none of its packages (they sit in lib/python3.X of the old one)."""
    venv = folder(work, "python")
    if not os.path.lexists(venv):
        return Check(state="absent")
    major, minor = want or this_python()
    raw = _read(venv / "pyvenv.cfg", 4096)
    if raw is None:
        return Check(state="broken", reason="it has no pyvenv.cfg")
    m = _CFG_VERSION.search(raw.decode("utf-8", "replace"))
    if m is None:
        return Check(state="broken", reason="its pyvenv.cfg names no Python version")
    if (int(m[1]), int(m[2])) != (major, minor):
        return Check(state="other_python",
                     reason=f"it was made by Python {m[1]}.{m[2]}, this is {major}.{minor}")
    python = venv / "bin" / "python3"
    if not os.path.exists(python) or not os.access(python, os.X_OK):
        return Check(state="broken", reason="its bin/python3 is missing or does not run")
    if not (venv / "lib" / f"python{major}.{minor}" / "site-packages").is_dir():
        return Check(state="broken", reason="it has no site-packages folder")
    return Check(state="ok")


def site_packages(work: Path) -> Path:
    major, minor = this_python()
    return folder(work, "python") / "lib" / f"python{major}.{minor}" / "site-packages"


def python_versions(work: Path) -> dict[str, str]:
    """{normalized name: version} from the names of the `.dist-info` folders (a wheel's
    `<name>-<version>.dist-info`: neither part holds a '-')."""
    out: dict[str, str] = {}
    try:
        with os.scandir(site_packages(work)) as it:
            for n, entry in enumerate(it):
                if n >= MAX_ENTRIES:
                    break
                stem = entry.name.removesuffix(".dist-info")
                if stem == entry.name or "-" not in stem:
                    continue
                name, _, version = stem.partition("-")
                if _VERSION.fullmatch(version):
                    out[normalize_python(name)] = version
    except OSError:
        return {}
    return out


def node_version(work: Path, name: str) -> str | None:
    raw = _read(node_modules(work) / name / "package.json", 256 * 1024)
    if raw is None:
        return None
    try:
        version = msgspec.json.decode(raw, type=dict[str, object]).get("version")
    except msgspec.DecodeError:
        return None
    return version if isinstance(version, str) and _VERSION.fullmatch(version) else None


def changing(work: Path, eco: Ecosystem) -> bool:
    return os.path.lexists(marker(work, eco))


def task_env(work: Path, base_path: str) -> dict[str, str]:
    """What every task gets so its scripts find the packages: the venv's bin first on
    PATH and NODE_PATH at node_modules. Set before the folders exist (the first install
    needs no refresh to be seen); only a venv known unusable — made by another Python,
    broken — stays off PATH until its rebuild."""
    env = {"NODE_PATH": str(node_modules(work))}
    if check_venv(work).state in ("absent", "ok"):
        env["PATH"] = f"{venv_bin(work)}:{base_path}"
    return env
