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


# The flat modules at the top are the core every feature shares; a feature is a package
# of its own (importer/, subscriptions/, scripts/, ...), found by its folder.
CORE = {"__init__.py", "__main__.py", "model.py", "transitions.py", "cron.py", "interval.py",
        "taskform.py", "settings.py", "ids.py", "clock.py", "paths.py", "process.py",
        "failpoints.py", "node.py", "cluster_auth.py", "fields.py", "limits.py"}


def test_features_are_packages() -> None:
    assert {path.name for path in PACKAGE.glob("*.py")} == CORE


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
                    rel not in ("clock.py", "audit/receipts.py"):  # audit: file mtimes, in s
                own_clocks.append(f"{rel}:{node.lineno}")
    assert own_clocks == ["clock.py:now_ms"]


def test_only_db_speaks_sqlite() -> None:
    """Storage errors are named in db/errors.py: a module outside db/ that caught
    sqlite3's classes would let a second backend's errors through (docs/fleet.md, "SQL
    dialect differences").
    No exemption: QingLong's own SQLite file is read by db/qinglong.py."""
    users = {rel for rel, tree in _modules() if not rel.startswith("db/")
             and any(name.split(".")[0] == "sqlite3" for name in _imported(tree))}
    assert users == set()


# The backends' own modules and drivers: everything outside db/ types against
# db/interface.py's Protocols and gets its Database from db/backend.py.
BACKEND_MODULES = {"qledge.db.sqlite", "qledge.db.pg", "aiosqlite", "asyncpg"}


def _imports(rel: str, tree: ast.Module) -> Iterator[tuple[int, str, list[str], bool]]:
    """Every import of a module as (line, absolute source, imported names, whether the
    source is a bare package — `from . import x`); `import a.b` is ("a.b", [])."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, [], False
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = _module_name(rel).split(".")
                if not rel.endswith("__init__.py"):
                    parts = parts[:-1]
                base = ".".join(parts[:len(parts) - node.level + 1])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            yield node.lineno, source, [a.name for a in node.names], node.module is None


def backend_imports(rel: str, tree: ast.Module) -> list[str]:
    found = []
    for lineno, source, aliases, _ in _imports(rel, tree):
        names = [source, *(f"{source}.{a}" for a in aliases)]
        found += [f"{rel}:{lineno} {name}" for name in names
                  if name in BACKEND_MODULES or name.split(".")[0] in BACKEND_MODULES]
    return found


def test_only_db_knows_the_backends() -> None:
    found = [f for rel, tree in _modules() if not rel.startswith("db/")
             for f in backend_imports(rel, tree)]
    assert found == []


def test_the_backend_rule_catches_each_spelling() -> None:
    def check(rel: str, source: str) -> list[str]:
        return backend_imports(rel, ast.parse(source))

    assert check("runtime/x.py", "from ..db.sqlite import Database\n") == [
        "runtime/x.py:1 qledge.db.sqlite"]
    assert check("runtime/x.py", "from ..db import pg, runs\n") == ["runtime/x.py:1 qledge.db.pg"]
    assert check("x.py", "import asyncpg\nfrom .db.interface import Tx\n") == ["x.py:1 asyncpg"]
    assert check("runtime/x.py", "from ..db.interface import Database\n"
                 "from ..db import backend\n") == []


# Functions that run on threads of their own, where a blocking sleep stalls nobody
# (cli/task.py: the operator's `task` program, a process without an event loop).
THREAD_BODIES = {("launch/_exitpoll.py", "_run"), ("cli/task.py", "follow")}


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


# Writes that are operations: only operations/ calls them (runtime/overlap.py
# creates every run under the overlap policy: a trigger's, a tick's inside the tick's own
# transaction, docs/qinglong-compat.md;
# operations/subscriptions.py creates a subscription's pull task, runtime/subscriptions.py
# keeps in step the tasks a pull owns, docs/subscriptions.md; runtime/dependencies.py
# keeps the dependency queues, which are tasks, docs/dependencies.md; a chain's
# run commits with its upstream run's end, in a terminal listener).
OPERATION_WRITES = {"create_task", "update_task", "delete_task", "create_run", "create_env",
                    "update_env", "delete_envs", "set_envs_enabled", "rename_envs"}
OPERATION_CALLERS = {"operations/tasks.py", "operations/envs.py", "operations/subscriptions.py",
                     "runtime/subscriptions.py", "runtime/dependencies.py"}
ALLOWED_WRITES = {("runtime/overlap.py", "create_run")}


def _db_modules(tree: ast.Module) -> set[str]:
    """Local names of the db/ modules a module imports (`from ..db import runs as r`)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level and (node.module or "") == "db":
            names |= {alias.asname or alias.name for alias in node.names}
    return names


def test_operations_have_one_home() -> None:
    outside = []
    for rel, tree in _modules():
        if rel in OPERATION_CALLERS or rel.startswith("db/"):
            continue
        db = _db_modules(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            name, owner = node.func.attr, node.func.value
            owner_name = owner.attr if isinstance(owner, ast.Attribute) else getattr(
                owner, "id", "")
            writes = name in OPERATION_WRITES and owner_name in db and \
                (rel, name) not in ALLOWED_WRITES
            follow_up = rel.startswith("http/") and (owner_name, name) in (
                ("scheduler", "wake"), ("cancellation", "request"))
            if writes or follow_up:
                outside.append(f"{rel}:{node.lineno} {owner_name}.{name}")
    assert outside == []


# The one arrow into the HTTP edge: `qledge serve` builds the app (the composition root).
HTTP_IMPORTERS = {("cli/serve.py", "qledge.http.app")}


def http_imports(rel: str, tree: ast.Module) -> list[str]:
    """Where a module outside http/ imports the HTTP edge (any spelling)."""
    if rel.startswith("http/"):
        return []
    found = []
    for lineno, source, aliases, bare in _imports(rel, tree):
        names = [f"{source}.{a}" for a in aliases] if bare else [source]
        found += [f"{rel}:{lineno} {name}" for name in names
                  if (name == "qledge.http" or name.startswith("qledge.http."))
                  and (rel, name) not in HTTP_IMPORTERS]
    return found


def test_nothing_outside_http_imports_http() -> None:
    """The edge depends on the domain, never the other way: a rule a feature needs (the
    QingLong importer checks tasks, envs, subscriptions, apps) lives in the domain
    (tasks/spec.py, envs/spec.py, …), and http/errors.py maps its FieldError."""
    found = [f for rel, tree in _modules() for f in http_imports(rel, tree)]
    assert found == []


def test_the_http_import_rule_catches_each_spelling() -> None:
    def check(rel: str, source: str) -> list[str]:
        return http_imports(rel, ast.parse(source))

    assert check("importer/build.py", "from ..http.tasks import validated\n") == [
        "importer/build.py:1 qledge.http.tasks"]
    assert check("importer/_items.py", "from ..http import apps\n") == [
        "importer/_items.py:1 qledge.http"]
    assert check("runtime/x.py", "from .. import http\n") == ["runtime/x.py:1 qledge.http"]
    assert check("runtime/x.py", "import qledge.http.errors\n") == [
        "runtime/x.py:1 qledge.http.errors"]
    assert check("cli/serve.py", "from ..http.app import create_app\n") == []
    assert check("http/tasks.py", "from .errors import Invalid\n") == []
    assert check("tasks/spec.py", "from ..fields import FieldError\n") == []


def _module_name(rel: str) -> str:
    parts = rel.removesuffix(".py").split("/")
    return ".".join(["qledge", *[p for p in parts if p != "__init__"]])


def _is_module(name: str) -> bool:
    rel = Path(*name.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel).is_dir()


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_crossings(rel: str, tree: ast.Module) -> list[str]:
    """Where this module reaches into another module's private names.

    The rule: a name `_x` is private to the module that defines it — importing it
    (`from .m import _x`) or reading it off an imported module (`m._x`) is the
    defect. A private *module* `pkg/_m.py` is a helper of its package: the modules
    beside it and in its subpackages may import it (`from . import _m`, `from ._m
    import name`), nobody else may, and even they only take its public names.
    """
    here = _module_name(rel)
    package = here if rel.endswith("__init__.py") else here.rpartition(".")[0]
    found, modules = [], set()

    def check_module(target: str, line: int) -> None:
        """A private module is importable only from its own package (and within it)."""
        parts = target.split(".")
        for i, part in enumerate(parts[1:], start=1):
            owner = ".".join(parts[:i])
            if _private(part) and package != owner and not package.startswith(owner + "."):
                found.append(f"{rel}:{line} imports private module {target}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "qledge":
                    check_module(alias.name, node.lineno)
                    modules.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            if source.split(".")[0] != "qledge":
                continue
            check_module(source, node.lineno)
            for alias in node.names:
                target = f"{source}.{alias.name}"
                if _is_module(target):
                    check_module(target, node.lineno)
                    modules.add(alias.asname or alias.name)
                elif _private(alias.name):
                    found.append(f"{rel}:{node.lineno} imports {alias.name} from {source}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and \
                isinstance(node.value, ast.Name) and node.value.id in modules:
            found.append(f"{rel}:{node.lineno} reads {node.value.id}.{node.attr}")
    return found


def test_no_module_imports_another_modules_private_names() -> None:
    crossings = [c for rel, tree in _modules() for c in private_crossings(rel, tree)]
    assert crossings == []


def test_the_private_name_rule_catches_each_kind_of_crossing() -> None:
    """The rule above on made-up sources (so a rule that never fires cannot pass)."""
    def check(rel: str, source: str) -> list[str]:
        return private_crossings(rel, ast.parse(source))

    assert check("db/leases.py", "from .rows import _attempt\n") == [
        "db/leases.py:1 imports _attempt from qledge.db.rows"]
    assert check("http/x.py", "from ..db import rows\nrows._attempt(1)\n") == [
        "http/x.py:2 reads rows._attempt"]
    assert check("http/x.py", "from ..scripts import _tree\n") == [
        "http/x.py:1 imports private module qledge.scripts._tree"]
    assert check("http/x.py", "from ..scripts._tree import walk\n") == [
        "http/x.py:1 imports private module qledge.scripts._tree"]
    assert check("http/x.py", "import qledge.scripts._tree\n") == [
        "http/x.py:1 imports private module qledge.scripts._tree"]
    # the pattern: a package's modules use its private helper module's public names
    assert check("scripts/folder.py", "from . import _tree as fs\nfs.walk(1)\n") == []
    assert check("http/scripts.py", "from ._files import offload\n") == []
    assert check("http/qinglong/scripts.py", "from .._files import offload\n") == []
    assert check("tasks/spec.py", "from ..http._files import offload\n") == [
        "tasks/spec.py:1 imports private module qledge.http._files"]
    assert check("scripts/folder.py", "from . import _tree as fs\nfs._temp_name()\n") == [
        "scripts/folder.py:2 reads fs._temp_name"]
    assert check("x.py", "from . import __version__\nobj._private = 1\n") == []


# What a string that is SQL begins with (case-sensitive: SQL in this code base is upper
# case, prose and HTTP verbs are not caught by these).
SQL_START = re.compile(
    r"\s*(SELECT\s|INSERT\s|UPDATE\s|DELETE\s+FROM\s|REPLACE\s+INTO\s|WITH\s|NOTIFY\s"
    r"|LISTEN\s|UNLISTEN\s|BEGIN\b|COMMIT\b|ROLLBACK\b|SAVEPOINT\s|RELEASE\s|PRAGMA\s"
    r"|CREATE\s|DROP\s|ALTER\s|VACUUM\b|EXPLAIN\s|SET\s+LOCAL\s)")


def sql_literals(rel: str, tree: ast.Module) -> list[str]:
    """String literals (an f-string by its leading text) that look like SQL."""
    parts = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
             for v in node.values}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            lead = node.values[0] if node.values else None
            text = lead.value if isinstance(lead, ast.Constant) else ""
        elif isinstance(node, ast.Constant) and id(node) not in parts:
            text = node.value
        else:
            continue
        if isinstance(text, str) and SQL_START.match(text):
            found.append(f"{rel}:{node.lineno} {text.strip()[:40]!r}")
    return found


def test_only_db_holds_sql() -> None:
    """SQL outside db/ would bypass the Database/Tx interface both backends satisfy
    (db/interface.py): a NOTIFY is Tx.notify, a liveness probe Database.ping."""
    found = [f for rel, tree in _modules() if not rel.startswith("db/")
             for f in sql_literals(rel, tree)]
    assert found == []


def test_the_sql_rule_catches_statements_and_spares_prose() -> None:
    def check(source: str) -> list[str]:
        return sql_literals("x.py", ast.parse(source))

    assert check('tx.one("SELECT 1")\n') == ["x.py:1 'SELECT 1'"]
    assert check('c = "NOTIFY"\nawait tx.execute(f"NOTIFY {c}")\n') == ["x.py:2 'NOTIFY'"]
    assert check('q = ("\\n  UPDATE runs SET a = 1"\n     " WHERE id = ?")\n') == [
        "x.py:1 'UPDATE runs SET a = 1 WHERE id = ?'"]
    assert check('x = "DELETE FROM t"\ny = "BEGIN"\nz = f"PRAGMA {p}"\n') == [
        "x.py:1 'DELETE FROM t'", "x.py:2 'BEGIN'", "x.py:3 'PRAGMA'"]
    assert check('Route("/apps/{id}", f, methods=["DELETE", "PUT"])\n'
                 'log.info("Selected %s", n)\nm = "update the task"\n'
                 'f"{n} SELECT"\n') == []


def http_write_transactions(rel: str, tree: ast.Module) -> list[str]:
    """Where an http/ module opens a write transaction itself: `async with … .write(…)`
    or any `db.write(…)`."""
    found = []
    for node in ast.walk(tree):
        calls = []
        if isinstance(node, ast.AsyncWith):
            calls += [item.context_expr for item in node.items]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Attribute | ast.Name) and \
                getattr(node.func.value, "attr", getattr(node.func.value, "id", "")) == "db":
            calls.append(node)
        found += [f"{rel}:{call.lineno}" for call in calls
                  if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                  and call.func.attr == "write"]
    return sorted(set(found))


def test_http_never_opens_a_write_transaction() -> None:
    """An endpoint reads through db/ or calls one operation of operations/:
    a write of its own would skip the operation's checks and follow-ups."""
    found = [f for rel, tree in _modules() if rel.startswith("http/")
             for f in http_write_transactions(rel, tree)]
    assert found == []


def test_the_http_write_rule_catches_each_spelling() -> None:
    def check(source: str) -> list[str]:
        return http_write_transactions("http/x.py", ast.parse(source))

    assert check("async def f(rt):\n    async with rt.db.write() as tx:\n        pass\n"
                 ) == ["http/x.py:2"]
    assert check("async def f(db):\n    async with db.write(durable=False) as tx:\n"
                 "        pass\n") == ["http/x.py:2"]
    assert check("def f(rt):\n    return rt.db.write()\n") == ["http/x.py:2"]
    assert check("async def f(rt):\n    async with rt.db.read() as tx:\n        pass\n"
                 "    sc.write(path, data)\n    parser.write(chunk)\n") == []


def _targets(node: ast.AST) -> Iterator[ast.expr]:
    if isinstance(node, ast.Assign):
        pending = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        pending = [node.target]
    else:
        return
    while pending:
        target = pending.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            pending.extend(target.elts)
        elif isinstance(target, ast.Starred):
            pending.append(target.value)
        else:
            yield target


def wiring_assignments(rel: str, tree: ast.Module) -> list[str]:
    """Attributes set on an object other than `self` (`x.a = `, `self.x.a = `, `+=`,
    setattr): a collaborator completed after its construction."""
    found: list[str] = []
    for node in ast.walk(tree):
        for target in _targets(node):
            if isinstance(target, ast.Attribute) and not (
                    isinstance(target.value, ast.Name) and target.value.id == "self"):
                found.append(f"{rel}:{getattr(node, 'lineno', 0)}: {ast.unparse(target)}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "setattr"):
            found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_runtime_wires_by_construction() -> None:
    """Runtime.start makes each collaborator complete (constructor arguments, order of
    creation); it never sets an attribute on one afterwards (docs/architecture.md)."""
    rel = "runtime/lifecycle.py"
    tree = ast.parse((PACKAGE / rel).read_text("utf-8"), filename=rel)
    assert wiring_assignments(rel, tree) == []


def test_the_wiring_rule_catches_each_spelling() -> None:
    source = """
class Runtime:
    def start(self):
        self.ok = 1
        self.node.node_id = 2
        disk.on_pressure = f
        self.a, fleet.unrecorded = 3, 4
        sched.rounds += 1
        self.supervisor.boot_id: str = ""
        setattr(self.scheduler, "tell_peers", f)
"""
    found = wiring_assignments("m.py", ast.parse(source))
    assert [line.split(": ", 1)[1] for line in found] == [
        "self.node.node_id", "disk.on_pressure", "fleet.unrecorded", "sched.rounds",
        "self.supervisor.boot_id", "setattr(self.scheduler, 'tell_peers', f)"]


def test_the_error_shape_comes_from_the_mounted_application_not_the_path() -> None:
    """http/errors.py renders both shapes and branches on no path: QingLong's handlers
    are registered by its own mounted application (http/qinglong/)."""
    tree = ast.parse((PACKAGE / "http" / "errors.py").read_text())
    paths = [n.value for n in ast.walk(tree)
             if isinstance(n, ast.Constant) and isinstance(n.value, str)
             and n.value.startswith("/open")]
    assert paths == []
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "url"]
