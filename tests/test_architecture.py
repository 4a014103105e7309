"""Structural rules of app/qledge/ (docs/architecture.md), checked on the source."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "app" / "qledge"


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        yield rel, ast.parse(path.read_text("utf-8"), filename=rel)


def _imported(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module


def test_only_cron_wraps_cronsim() -> None:
    users = {rel for rel, tree in _modules()
             if any(name.split(".")[0] == "cronsim" for name in _imported(tree))}
    assert users == {"cron.py"}


def test_one_wall_clock() -> None:
    own_clocks = []
    for rel, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and re.fullmatch(
                    r"_?(now|wall)_ms", node.name):
                own_clocks.append(f"{rel}:{node.name}")
            elif isinstance(node, ast.Attribute) and node.attr in ("time", "time_ns") and \
                    isinstance(node.value, ast.Name) and node.value.id == "time" and \
                    rel not in ("clock.py", "audit.py"):  # audit compares file mtimes, in s
                own_clocks.append(f"{rel}:{node.lineno}")
    assert own_clocks == ["clock.py:now_ms"]


# Functions that run on threads of their own, where a blocking sleep stalls nobody.
THREAD_BODIES = {("launch/_exitpoll.py", "_run")}


def test_nothing_sleeps_on_the_event_loop() -> None:
    sleeps = []
    for rel, tree in _modules():
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef) or \
                    (rel, func.name) in THREAD_BODIES:
                continue
            sleeps += [f"{rel}:{func.name}" for node in ast.walk(func)
                       if isinstance(node, ast.Attribute) and node.attr == "sleep"
                       and isinstance(node.value, ast.Name) and node.value.id == "time"]
    assert sleeps == []


def test_no_background_task_is_dropped() -> None:
    """A task nobody holds can be collected mid-run and its exception is lost: every
    create_task/ensure_future result is kept (and awaited at stop by its owner)."""
    spawners = ("create_task", "ensure_future")
    dropped = []
    for rel, tree in _modules():
        for node in ast.walk(tree):
            calls = []
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                calls.append(node.value)  # a statement: the result goes nowhere
            elif isinstance(node, ast.Lambda) and isinstance(node.body, ast.Call):
                calls.append(node.body)  # a callback's return value goes nowhere
            for call in calls:
                func = call.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in spawners:
                    dropped.append(f"{rel}:{call.lineno}")
    assert dropped == []
