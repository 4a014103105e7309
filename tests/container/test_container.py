"""The crash drills inside real containers: the full suite on amd64 and arm/v7
(qemu-arm, ~50 s; QLTEST_ARMV7_DRILL=smoke keeps only the worker kill), smoke
on arm64 (qemu).

scripts/test builds the three images first (scripts/image build). Without a
Docker engine the tests skip with the reason — except under CI, where that is a
failure. The worker must announce the event loop its image is meant to have:
uvloop, or asyncio's own on arm/v7 (no uvloop wheel there).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .drill import tag_of

pytestmark = [pytest.mark.drill, pytest.mark.slow]
DRILL = Path(__file__).with_name("drill.py")


def _image(platform: str) -> str:
    return tag_of(platform)


def _require(platform: str) -> None:
    docker = "/usr/bin/docker"
    ok = os.access(docker, os.X_OK) and subprocess.run(
        [docker, "image", "inspect", _image(platform)], capture_output=True).returncode == 0
    if not ok:
        reason = f"{_image(platform)} not built (scripts/image build --platform {platform})"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


ARMV7_MODE = "smoke" if os.environ.get("QLTEST_ARMV7_DRILL") == "smoke" else "full"
LOOP = {"linux/amd64": "uvloop", "linux/arm64": "uvloop", "linux/arm/v7": "asyncio"}


@pytest.mark.parametrize(("platform", "mode"), [("linux/amd64", "full"),
                                                ("linux/arm64", "smoke"),
                                                ("linux/arm/v7", ARMV7_MODE)])
def test_container_drill(platform: str, mode: str) -> None:
    _require(platform)
    args = [sys.executable, str(DRILL), "--platform", platform]
    if mode == "smoke":
        args.append("--smoke")
    res = subprocess.run(args, capture_output=True, text=True, timeout=1800)
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["ok"], f"{summary}\n{res.stderr[-4000:]}"
    assert res.returncode == 0
    assert summary["duplicates"] == 0 and summary["false_successes"] == 0
    assert summary["terminal_events"] == summary["runs"] > 0
    assert summary["loop"] == LOOP[platform], summary
    expected = ["worker_kill_mid_run", "task_form", "secrets_out_of_reach"] if mode == "smoke" \
        else ["worker_kill_mid_run", "task_form", "secrets_out_of_reach", "docker_restart",
              "docker_kill_then_start"]
    assert summary["drills"] == expected
