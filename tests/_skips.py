"""Skips under CI: every skip must be justified, or the run fails.

A skip hides a promise going unproven. On a developer's machine a missing tool
is a fair reason; under CI (`CI=true`, set by .ci/run) scripts/bootstrap
installs everything, so a skip there is a failure unless it is listed in
JUSTIFIED with the reason it must give. A developer run lists the skips CI
would refuse at the end of its summary. Registered by tests/conftest.py.
"""

from __future__ import annotations

import os

import pytest

# node id -> text its skip reason must contain. Reviewed: each is a limit of the
# machine CI runs on, not a missing install.
JUSTIFIED = {
    # The aarch64 launcher runs under qemu-user, whose prctl() answers EINVAL to
    # PR_SET_CHILD_SUBREAPER (the launcher tolerates that); the x86_64 case runs natively.
    "tests/test_launcher.py::test_orphaned_grandchildren_are_reaped[aarch64]":
        "qemu-user does not implement PR_SET_CHILD_SUBREAPER",
    "tests/test_launcher.py::test_orphaned_grandchildren_are_reaped[armv7]":
        "qemu-user does not implement PR_SET_CHILD_SUBREAPER",
    # qemu-user answers ENOSYS to the Landlock syscalls: under emulation the launcher's
    # "Landlock unavailable" path is tested instead; confinement itself runs natively.
    **{f"tests/test_launcher.py::{test}[{arch}]": "qemu-user has no Landlock (ENOSYS)"
       for test in ("test_deny_confines_the_command", "test_deny_resolves_symlinks_and_nesting",
                    "test_confinement_failing_in_the_child_runs_nothing_when_required",
                    "test_confinement_failing_in_the_child_auto_runs_unconfined",
                    "test_deny_leaves_nothing_in_the_waiting_launcher")
       for arch in ("aarch64", "armv7")},
    # A seccomp filter installed before exec would act on qemu-user's own syscalls,
    # not the emulated launcher's: the /proc/self/fd fallback is proven natively.
    **{f"tests/test_launcher.py::test_without_close_range_leaked_fds_are_closed_from_proc"
       f"[{arch}]": "the seccomp filter is written for x86_64 hosts"
       for arch in ("aarch64", "armv7")},
}

_skipped: list[tuple[str, str]] = []


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    if hasattr(report, "wasxfail"):
        return f"xfail: {report.wasxfail}"
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def unjustified(skipped: list[tuple[str, str]],
                justified: dict[str, str] = JUSTIFIED) -> list[tuple[str, str]]:
    """The (node id, reason) pairs that no entry of `justified` covers."""
    return [(node, reason) for node, reason in skipped
            if not (node in justified and justified[node] in reason)]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        _skipped.append((report.nodeid, _reason(report)))


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:
        _skipped.append((report.nodeid, _reason(report)))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # A run that skipped everything collected "no tests": under CI that fails too.
    passing = (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)
    if under_ci() and unjustified(_skipped) and exitstatus in passing:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    bad = unjustified(_skipped)
    if not bad:
        return
    title = ("unjustified skips: the run FAILS under CI" if under_ci()
             else "skips CI would fail on (CI=true)")
    terminalreporter.section(title, sep="=", red=under_ci(), yellow=not under_ci())
    for node, reason in bad:
        terminalreporter.line(f"{node}: {reason}")
    terminalreporter.line("A skip under CI needs an entry in tests/_skips.py:JUSTIFIED.")
