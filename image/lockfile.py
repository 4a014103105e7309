"""Read the hash-pinned locks (uv's `--generate-hashes` format) in image builds.

    python3 lockfile.py pick   LOCK NAME...   the entries NAME..., hashes included
    python3 lockfile.py drop   LOCK NAME...   the lock without NAME...
    python3 lockfile.py verify LOCK FILE...   each sdist/wheel FILE: its sha256 is pinned
    python3 lockfile.py check  LOCK [--absent NAME]... [--path DIR]
    python3 lockfile.py target LOCK MACHINE   the entries whose marker holds on a Linux
                                              MACHINE (uname -m), markers removed

`check` runs under the interpreter whose environment it checks (the image's
venv): every lock entry whose environment marker holds there must be installed
at exactly its pinned version, and nothing else may be (pip and setuptools
excepted: the build removes them right after). `--absent NAME` also requires
that NAME's marker excludes this platform (uvloop on arm/v7). `--path DIR`
checks the distributions in DIR (a `pip install --target` directory: the
node variant's /opt/qledge/node) instead of the interpreter's. Standard library
only, plus `packaging` (or pip's vendored copy) to evaluate markers. Exits 1
with one line per problem.

`target` serves a build that installs another platform's wheels natively (pip's
`--platform` with `--target`): pip would evaluate the markers for the build
machine, so the lock given to it is already narrowed to the target's entries.
The Python version is the build interpreter's, which the build requires to be
the target's (same Debian release; the image build compares bytecode magic).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
import sys
from dataclasses import dataclass
from pathlib import Path

_HEAD = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?$")
_HASH = re.compile(r"^\s+--hash=sha256:([0-9a-f]{64})\s*\\?$")
TOOLING = frozenset({"pip", "setuptools"})


class LockError(Exception):
    pass


@dataclass(frozen=True)
class Entry:
    name: str  # normalised (PEP 503)
    version: str
    marker: str | None
    hashes: frozenset[str]
    text: str  # the entry's lines as in the lock


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse(text: str) -> list[Entry]:
    entries: list[Entry] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _HEAD.match(lines[i])
        if not m:
            if lines[i].strip() and not lines[i].lstrip().startswith("#"):
                raise LockError(f"line {i + 1}: not a pinned requirement: {lines[i]!r}")
            i += 1
            continue
        block, hashes = [lines[i]], set()
        i += 1
        while i < len(lines) and (h := _HASH.match(lines[i])):
            hashes.add(h.group(1))
            block.append(lines[i])
            i += 1
        if not hashes:
            raise LockError(f"{m.group(1)}: no --hash lines (the lock must be hash-pinned)")
        entries.append(Entry(normalise(m.group(1)), m.group(2), m.group(3), frozenset(hashes),
                             "\n".join(block)))
    return entries


def _select(entries: list[Entry], names: list[str], keep: bool) -> list[Entry]:
    wanted = {normalise(n) for n in names}
    missing = wanted - {e.name for e in entries}
    if missing:
        raise LockError(f"not in the lock: {', '.join(sorted(missing))}")
    return [e for e in entries if (e.name in wanted) == keep]


def pick(entries: list[Entry], names: list[str]) -> str:
    return "".join(e.text + "\n" for e in _select(entries, names, True))


def drop(entries: list[Entry], names: list[str]) -> str:
    return "".join(e.text + "\n" for e in _select(entries, names, False))


def _dist_of(filename: str) -> tuple[str, str]:
    """(name, version) from an sdist or wheel file name."""
    for suffix in (".tar.gz", ".zip"):
        if filename.endswith(suffix):
            name, _, version = filename[: -len(suffix)].rpartition("-")
            return normalise(name), version
    if filename.endswith(".whl"):
        name, version = filename.split("-")[:2]
        return normalise(name), version
    raise LockError(f"{filename}: neither an sdist nor a wheel")


def verify(entries: list[Entry], files: list[Path]) -> list[str]:
    by_name = {e.name: e for e in entries}
    done = []
    for path in files:
        name, version = _dist_of(path.name)
        entry = by_name.get(name)
        if entry is None or entry.version != version:
            raise LockError(f"{path.name}: {name}=={version} is not pinned by the lock")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest not in entry.hashes:
            raise LockError(f"{path.name}: sha256 {digest} is not among the lock's hashes")
        done.append(f"{path.name} sha256:{digest} pinned")
    return done


def _marker_holds(marker: str | None, machine: str | None = None) -> bool:
    if marker is None:
        return True
    try:
        from packaging.markers import Marker
    except ImportError:
        from pip._vendor.packaging.markers import Marker  # type: ignore[no-redef]
    if machine is None:
        return bool(Marker(marker).evaluate())
    target = {"platform_machine": machine, "sys_platform": "linux", "os_name": "posix",
              "platform_system": "Linux"}
    return bool(Marker(marker).evaluate(target))


def target(entries: list[Entry], machine: str) -> str:
    """The entries a Linux `machine` installs, without their markers (pip would read
    them for the build machine)."""
    out = []
    for e in entries:
        if _marker_holds(e.marker, machine):
            rest = e.text.partition("\n")[2]
            out.append(f"{e.name}=={e.version} \\" + ("\n" + rest if rest else "") + "\n")
    return "".join(out)


def installed_in(path: Path | None = None) -> dict[str, str]:
    """name -> version of the running interpreter's distributions, or of those in `path`."""
    dists = importlib.metadata.distributions(**({} if path is None else {"path": [str(path)]}))
    return {normalise(d.metadata["Name"]): d.version for d in dists}


def check(entries: list[Entry], absent: list[str],
          installed: dict[str, str] | None = None) -> tuple[list[str], str]:
    """(problems, summary) for the running interpreter's environment, or `installed`."""
    if installed is None:
        installed = installed_in()
    expected = {e.name: e.version for e in entries if _marker_holds(e.marker)}
    excluded = sorted(e.name for e in entries if e.name not in expected)
    problems = []
    for name in absent:
        if normalise(name) in expected:
            problems.append(f"{name}: its marker holds here, but it must not be installed")
    for name, version in sorted(expected.items()):
        got = installed.get(name)
        if got != version:
            problems.append(f"{name}: pinned {version}, installed {got or 'nothing'}")
    for name, version in sorted(installed.items()):
        if name not in expected and name not in TOOLING:
            problems.append(f"{name}=={version}: installed but not in the lock for this platform")
    summary = (f"lock check: {len(expected)} of {len(entries)} entries installed at their "
               f"pins; excluded by marker here: {', '.join(excluded) or 'none'}")
    return problems, summary


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("pick", "drop", "verify", "check", "target"):
        print(__doc__, file=sys.stderr)
        return 2
    cmd, lock, rest = argv[0], Path(argv[1]), argv[2:]
    try:
        entries = parse(lock.read_text())
        if cmd == "pick":
            sys.stdout.write(pick(entries, rest))
        elif cmd == "drop":
            sys.stdout.write(drop(entries, rest))
        elif cmd == "target":
            if len(rest) != 1:
                raise LockError("target: one MACHINE (uname -m: x86_64, aarch64, armv7l)")
            sys.stdout.write(target(entries, rest[0]))
        elif cmd == "verify":
            if not rest:
                raise LockError("verify: no files given")
            print("\n".join(verify(entries, [Path(f) for f in rest])))
        else:
            absent = [rest[i + 1] for i, a in enumerate(rest) if a == "--absent"]
            paths = [Path(rest[i + 1]) for i, a in enumerate(rest) if a == "--path"]
            if len(paths) > 1:
                raise LockError("check: one --path at most")
            if paths and not paths[0].is_dir():
                raise LockError(f"check: {paths[0]} is not a directory")
            problems, summary = check(entries, absent, installed_in(paths[0]) if paths else None)
            if problems:
                print("\n".join(f"lockfile: {p}" for p in problems), file=sys.stderr)
                return 1
            print(summary)
    except (LockError, OSError) as exc:
        print(f"lockfile: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
