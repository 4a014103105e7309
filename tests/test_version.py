"""The version has one place, `__version__` in app/qledge/__init__.py; everything reads it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import qledge

ROOT = Path(__file__).resolve().parents[1]
# Every file that once carried its own copy of the version, and their neighbours.
BUILD_FILES = ("pyproject.toml", "Containerfile", "compose.yaml", "buildx/docker-bake.hcl",
               "image/launcher/Makefile", "scripts/image", "scripts/build-launcher",
               "scripts/test", "scripts/bootstrap", "README.md", "docs/image.md")


def test_scripts_version_prints_the_one_place() -> None:
    out = subprocess.run([ROOT / "scripts" / "version"], capture_output=True, text=True,
                         check=True)
    assert out.stdout == f"{qledge.__version__}\n"
    assert re.fullmatch(r"\d+\.\d+\.\d+", qledge.__version__)


def test_the_cli_prints_the_same_version() -> None:
    out = subprocess.run([sys.executable, "-m", "qledge", "version"], capture_output=True,
                         text=True, check=True, cwd=ROOT / "app")
    assert out.stdout == f"qledge {qledge.__version__}\n"


def test_no_build_file_carries_a_copy_of_the_version() -> None:
    copy = re.compile(rf"(?<![\d.]){re.escape(qledge.__version__)}(?![\d.])")
    found = [f"{name}:{text[:m.start()].count(chr(10)) + 1}" for name in BUILD_FILES
             for text in [(ROOT / name).read_text("utf-8")] for m in copy.finditer(text)]
    assert found == []
    pyproject = (ROOT / "pyproject.toml").read_text("utf-8")
    assert re.search(r'^dynamic = \["version"\]$', pyproject, flags=re.MULTILINE)
    assert not re.search(r"^version\s*=", pyproject, flags=re.MULTILINE)
