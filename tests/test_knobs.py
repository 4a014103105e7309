"""Test and tool knobs live in QLTEST_*, a name space the settings never read.

Settings refuse an unknown QLEDGE_* variable at start-up (a typo must not fall
back to a default), and a developer's environment reaches the worker: a knob
such as the soak seed or the screenshot directory, documented as
`QLTEST_SOAK_SEED=… scripts/drill host`, is set while supervisord starts the
worker. So every QLEDGE_* name in the tree must be a setting or the product's
own tooling, and every documented QLTEST_* assignment must leave the worker
starting.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from qledge import settings

from _appliance import Appliance
from support import ROOT, free_port

# Where commands and variables are documented for people to copy.
DOCS = [ROOT / "README.md", ROOT / "README.zh-CN.md", ROOT / "image/launcher/README.md",
        *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "zh").glob("*.md")),
        *sorted(p for p in (ROOT / "scripts").iterdir() if p.is_file())]
# Everything that could set or read a variable the worker then sees.
TREE = [*DOCS, ROOT / "Containerfile", ROOT / "compose.yaml",
        *sorted(p for p in (ROOT / "rootfs").rglob("*") if p.is_file()),
        *sorted((ROOT / "app").rglob("*.py")), *sorted((ROOT / "scripts").rglob("*.py")),
        *sorted((ROOT / "tests").rglob("*.py"))]
# Deliberately wrong names, only in the tests that prove they are refused.
TYPOS = {"QLEDGE_PROFLE", "QLEDGE_SOAK_SEED", "QLEDGE_SCREENSHOTS_DIR"}
TYPO_TESTS = {ROOT / "tests/test_settings.py", Path(__file__).resolve()}
_NAME = re.compile(r"\b(QLEDGE_[A-Z0-9_]*[A-Z0-9])\b")
_ASSIGNMENT = re.compile(r"\b(QLTEST_[A-Z0-9_]+)=([^\s`'\"]+)")


def _setting_names() -> set[str]:
    return {f"QLEDGE_{name.upper()}" for name in settings._FIELDS} | settings._IGNORED_ENV


def _documented_test_knobs() -> dict[str, str]:
    found: dict[str, str] = {}
    for path in DOCS:
        for name, value in _ASSIGNMENT.findall(path.read_text(errors="replace")):
            found.setdefault(name, value)
    return found


def test_every_qledge_variable_in_the_tree_is_a_setting_or_product_tooling() -> None:
    names = _setting_names()
    strays = {}
    for path in TREE:
        for name in _NAME.findall(path.read_text(errors="replace")):
            if name not in names and not (name in TYPOS and path in TYPO_TESTS):
                strays.setdefault(name, str(path.relative_to(ROOT)))
    assert strays == {}, "rename these test/tool knobs to QLTEST_* (settings refuse them)"


def test_settings_refuse_a_qledge_typo_and_ignore_qltest_knobs() -> None:
    for typo in TYPOS:
        try:
            settings.load({typo: "1"})
        except settings.SettingsError as exc:
            assert typo in str(exc)
        else:
            raise AssertionError(f"{typo} was accepted")
    knobs = {f"QLTEST_{n}": "1" for n in ("SOAK_SEED", "SCREENSHOTS_DIR", "ANY_NEW_KNOB")}
    assert settings.load(knobs) == settings.load({})


def _migrate(state: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`qledge migrate`: the image entrypoint's start-up check, with this environment."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("QLEDGE_", "QLTEST_"))}
    return subprocess.run([sys.executable, "-m", "qledge", "migrate"], capture_output=True,
                          text=True, timeout=60,
                          env={**clean, "QLEDGE_STATE_DIR": str(state), **env})


def test_documented_commands_leave_the_worker_starting(tmp_path: Path) -> None:
    """`QLTEST_SOAK_SEED=… scripts/drill host` and `QLTEST_SCREENSHOTS_DIR=docs/screenshots`
    (the browser tests) in their fast form: the real supervised appliance started with
    every documented QLTEST_* assignment in its environment answers /readyz."""
    knobs = _documented_test_knobs()
    assert {"QLTEST_SOAK_SEED", "QLTEST_SCREENSHOTS_DIR"} <= set(knobs), knobs
    done = _migrate(tmp_path / "m", **knobs)
    assert done.returncode == 0, done.stderr
    # the names they replace stop start-up, naming themselves
    for old in ("QLEDGE_SOAK_SEED", "QLEDGE_SCREENSHOTS_DIR"):
        refused = _migrate(tmp_path / "m", **{old: "1"})
        assert refused.returncode == 2 and old in refused.stderr, refused

    app = Appliance(tmp_path / "state", free_port())
    app.env.update(knobs)
    try:
        app.start(timeout=60)
        assert app.http.get("/readyz").status_code == 200
        assert app.api("GET", "/tasks").status_code == 200
    finally:
        app.stop()
