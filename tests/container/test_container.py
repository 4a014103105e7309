"""The crash drills inside real containers: full suite on amd64, smoke on arm64 (qemu).

scripts/test builds both images first (scripts/image build). Without a Docker
engine the tests skip with the reason — except under CI, where that is a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.drill, pytest.mark.slow]
DRILL = Path(__file__).with_name("drill.py")


def _image(platform: str) -> str:
    return "qledge:local-" + platform.split("/")[-1]


def _require(platform: str) -> None:
    docker = "/usr/bin/docker"
    ok = os.access(docker, os.X_OK) and subprocess.run(
        [docker, "image", "inspect", _image(platform)], capture_output=True).returncode == 0
    if not ok:
        reason = f"{_image(platform)} not built (scripts/image build --platform {platform})"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.mark.parametrize(("platform", "mode"), [("linux/amd64", "full"),
                                                ("linux/arm64", "smoke")])
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
    expected = ["worker_kill_mid_run", "secrets_out_of_reach"] if mode == "smoke" else [
        "worker_kill_mid_run", "secrets_out_of_reach", "docker_restart",
        "docker_kill_then_start"]
    assert summary["drills"] == expected
