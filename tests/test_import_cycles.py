"""No import cycle among app/qledge's modules (docs/architecture.md).

Every import counts — at module level, under `if TYPE_CHECKING:` and inside a
function — since each of those is how a cycle is hidden rather than removed. A
cycle is a strongly connected component of the import graph. None remains; KNOWN
lists the ones allowed for a while and may only shrink: the test fails on a new
cycle and also on a listed one that no longer exists.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "app" / "qledge"

# Empty since Syncer, Dependencies and Metrics stopped taking the whole Runtime; a
# cycle that has to stay for a while is listed here with why.
KNOWN: frozenset[frozenset[str]] = frozenset()


def _name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exists(name: str) -> bool:
    rel = Path(*name.split(".")[1:]) if "." in name else Path()
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py"
                                                             ).is_file()


def imports_of(name: str, is_package: bool, tree: ast.Module) -> set[str]:
    """The qledge modules this module imports, wherever the import statement stands."""
    found: set[str] = set()
    here = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "qledge"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if target.split(".")[0] != "qledge":
                continue
            # `from pkg import mod` imports the module; `from mod import name` the module.
            subs = {f"{target}.{a.name}" for a in node.names if _exists(f"{target}.{a.name}")}
            found |= subs if subs and len(subs) == len(node.names) else subs | {target}
    return {m for m in found if _exists(m) and m != name}


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = _name(path)
        tree = ast.parse(path.read_text("utf-8"), filename=str(path))
        graph[name] = imports_of(name, path.name == "__init__.py", tree)
    return graph


def cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.add(frozenset(component))
    return found


def test_no_import_cycle_beyond_the_known_ones() -> None:
    found = cycles(import_graph())
    new = [sorted(c) for c in found - KNOWN]
    gone = [sorted(c) for c in KNOWN - found]
    assert new == [], f"import cycles: {new}"
    assert gone == [], f"no longer cycles, remove them from KNOWN: {gone}"


def test_the_cycle_rule_sees_each_kind_of_import() -> None:
    guarded = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                        "    from .lifecycle import Runtime\n")
    assert imports_of("qledge.runtime.metrics", False, guarded) == {
        "qledge.runtime.lifecycle"}
    inner = ast.parse("def f():\n    from ..operations import cancel_run\n")
    assert imports_of("qledge.runtime.dependencies", False, inner) == {"qledge.operations"}
    sibling = ast.parse("from . import conc, overlap\nimport qledge.db.runs\n")
    assert imports_of("qledge.runtime.chains", False, sibling) == {
        "qledge.runtime.conc", "qledge.runtime.overlap", "qledge.db.runs"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {
        frozenset({"a", "b", "c"})}
    assert cycles({"a": {"b"}, "b": set()}) == set()
