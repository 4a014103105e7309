"""The skip policy of tests/_skips.py, run on small throwaway suites in a child pytest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import _skips
from support import ROOT

QEMU_SKIP = '''
import pytest

@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_orphaned_grandchildren_are_reaped(arch):
    if arch == "aarch64":
        pytest.skip({reason!r})
'''
UNJUSTIFIED = '''
import pytest

def test_needs_a_tool():
    pytest.skip("frobnicator is not installed")

def test_fine():
    pass
'''
MODULE_SKIP = '''
import pytest

pytest.skip("whole module needs a frobnicator", allow_module_level=True)
'''


def _suite(tmp_path: Path, files: dict[str, str], *, ci: str | None) -> tuple[int, str]:
    suite = tmp_path / "suite"
    (suite / "tests").mkdir(parents=True)
    (suite / "pytest.ini").write_text("[pytest]\n")
    for name, text in files.items():
        (suite / "tests" / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = str(ROOT / "tests")
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # only the policy, and quick
    if ci is not None:
        env["CI"] = ci
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "_skips", "-p",
                           "no:cacheprovider", "-q", "tests"], cwd=suite, env=env,
                          capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr


def test_the_suite_runs_with_the_policy(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.get_plugin("qledge-skips") is _skips


def test_the_justified_qemu_skip_passes_under_ci(tmp_path: Path) -> None:
    reason = "qemu-user does not implement PR_SET_CHILD_SUBREAPER"
    code, out = _suite(tmp_path, {"test_launcher.py": QEMU_SKIP.format(reason=reason)},
                       ci="true")
    assert code == 0, out
    assert "1 passed, 1 skipped" in out and "unjustified" not in out, out


def test_the_justified_node_with_another_reason_fails_under_ci(tmp_path: Path) -> None:
    code, out = _suite(tmp_path, {"test_launcher.py": QEMU_SKIP.format(reason="no qemu")},
                       ci="true")
    assert code == 1, out
    assert "test_orphaned_grandchildren_are_reaped[aarch64]: no qemu" in out, out


def test_an_unjustified_skip_fails_the_run_under_ci(tmp_path: Path) -> None:
    code, out = _suite(tmp_path, {"test_tools.py": UNJUSTIFIED}, ci="true")
    assert code == 1, out
    assert "unjustified skips: the run FAILS under CI" in out, out
    assert "tests/test_tools.py::test_needs_a_tool: frobnicator is not installed" in out, out
    assert "1 passed, 1 skipped" in out, out


def test_a_skipped_module_fails_the_run_under_ci(tmp_path: Path) -> None:
    code, out = _suite(tmp_path, {"test_module.py": MODULE_SKIP}, ci="1")
    assert code == 1, out
    assert "tests/test_module.py: whole module needs a frobnicator" in out, out


@pytest.mark.parametrize("ci", [None, "", "false"])
def test_a_developer_run_reports_the_skip_and_passes(tmp_path: Path, ci: str | None) -> None:
    code, out = _suite(tmp_path, {"test_tools.py": UNJUSTIFIED}, ci=ci)
    assert code == 0, out
    assert "skips CI would fail on (CI=true)" in out, out
    assert "tests/test_tools.py::test_needs_a_tool: frobnicator is not installed" in out, out


def test_failures_stay_failures(tmp_path: Path) -> None:
    failing = UNJUSTIFIED.replace("    pass", "    assert False")
    code, out = _suite(tmp_path, {"test_tools.py": failing}, ci="true")
    assert code == 1, out
    assert "1 failed, 1 skipped" in out, out
