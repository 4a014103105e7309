"""The status sets have one home (model.py) and one SQL spelling (db/statuses.py)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from qledge.db import statuses as st
from qledge.model import (
    ACTIVE_ATTEMPT,
    ACTIVE_RUN,
    TERMINAL_ATTEMPT,
    TERMINAL_RUN,
    AttemptStatus,
    RunStatus,
)

PACKAGE = Path(__file__).resolve().parents[1] / "app" / "qledge"
VALUES = {s.value for s in RunStatus} | {s.value for s in AttemptStatus}


def test_every_status_is_active_or_terminal_never_both() -> None:
    assert set(RunStatus) == ACTIVE_RUN | TERMINAL_RUN
    assert not ACTIVE_RUN & TERMINAL_RUN
    assert set(AttemptStatus) == ACTIVE_ATTEMPT | TERMINAL_ATTEMPT
    assert not ACTIVE_ATTEMPT & TERMINAL_ATTEMPT
    # A finished attempt's status becomes its run's (transitions._finish).
    assert {s.value for s in TERMINAL_ATTEMPT} == {s.value for s in TERMINAL_RUN}


def _named(sql: str) -> set[str]:
    return set(re.findall(r"'([a-z_]+)'", sql))


def test_the_sql_spellings_name_exactly_the_sets() -> None:
    assert _named(st.active_run()) == {s.value for s in ACTIVE_RUN}
    assert _named(st.terminal_run("r.status")) == {s.value for s in TERMINAL_RUN}
    assert _named(st.active_attempt("a.status")) == {s.value for s in ACTIVE_ATTEMPT}
    assert _named(st.terminal_attempt()) == {s.value for s in TERMINAL_ATTEMPT}
    assert st.is_("r.status", RunStatus.QUEUED) == "r.status = 'queued'"


def test_the_active_spellings_are_the_partial_indexes_where() -> None:
    """SQLite matches a partial index's WHERE term for term (docs/storage.md)."""
    sql = (PACKAGE / "db" / "migrations" / "0007_slim_schema.sql").read_text("utf-8")
    wheres = {name: " ".join(where.split()) for name, where in re.findall(
        r"CREATE INDEX (\w+) ON [^;]*? WHERE ([^;]+);", sql)}
    assert f"({wheres['runs_active']})" == st.active_run()
    # attempts_active is gone since 0022 (active attempts are found through runs_active)
    # but its spelling is still the one the attempts' filters use
    assert f"({wheres['attempts_active']})" == st.active_attempt()


def _sql_strings(tree: ast.Module) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
            out.append((node.lineno, text))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append((node.lineno, node.value))
    return [(n, t) for n, t in out if re.search(r"\b(SELECT|UPDATE|INSERT|DELETE|WHERE)\b", t)]


def test_no_status_literal_or_set_is_copied_in_app() -> None:
    literal = re.compile(r"'(" + "|".join(sorted(VALUES)) + r")'")
    copies = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in ("model.py", "db/statuses.py"):
            continue
        tree = ast.parse(path.read_text("utf-8"))
        copies += [f"{rel}:{n} SQL names a status" for n, text in _sql_strings(tree)
                   if literal.search(text)]
        for node in ast.walk(tree):
            if isinstance(node, ast.Tuple | ast.Set | ast.List):
                members = [e for e in node.elts if isinstance(e, ast.Attribute)
                           and isinstance(e.value, ast.Name)
                           and e.value.id in ("RunStatus", "AttemptStatus")]
                if len(members) >= 2:
                    copies.append(f"{rel}:{node.lineno} a set of statuses")
    assert copies == []
