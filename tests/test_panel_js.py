"""The panel's JavaScript on its own: `node --check` on every module, a small linter of
the rules that matter here (docs/panel.md "Checks"), and `node --test` on the pure
helpers (tests/panel/*.test.mjs). Node is needed (scripts/bootstrap installs it); without
it these skip, and CI turns a skip without a reviewed reason into a failure."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from qledge.http import panel

PANEL = panel.PANEL_DIR
TESTS = Path(__file__).parent / "panel"
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed")

FORBIDDEN = {
    r"\.innerHTML\b": "innerHTML", r"\.outerHTML\s*=": "outerHTML",
    r"\binsertAdjacentHTML\b": "insertAdjacentHTML", r"\bdocument\.write": "document.write",
    r"\beval\s*\(": "eval", r"\bnew\s+Function\b": "new Function",
    r"\bwindow(?:\.\w+|\[[^\]]*\])\s*=(?!=)": "assignment on window",
    r"\bglobalThis\b": "globalThis",
}
_EXPORT_LIST = re.compile(r"^export\s*\{([^}]*)\};?", re.M)
_EXPORT_DECL = re.compile(r"^export\s+(?:async\s+)?(?:function|const|let|class)\s+(\w+)", re.M)


def _strip_comments(text: str) -> str:
    return re.sub(r"/\*.*?\*/|(?<![:'\"\\])//[^\n]*", "", text, flags=re.S)


def exports(text: str) -> set[str]:
    names = set(_EXPORT_DECL.findall(text))
    for group in _EXPORT_LIST.findall(text):
        names.update(n.strip() for n in group.split(",") if n.strip())
    return names


def lint(files: dict[str, str]) -> list[str]:
    """Problems in `files` (name -> text of a panel module), one line each."""
    problems = []
    for name, text in files.items():
        code = _strip_comments(text)
        for pattern, what in FORBIDDEN.items():
            if re.search(pattern, code):
                problems.append(f"{name}: {what}")
        # every import is `import { … } from './x.js';`, which the server can rename
        for line in re.findall(r"^\s*import\b[^;]*;?", code, re.M):
            if not panel.IMPORT.match(line.strip()):
                problems.append(f"{name}: import not of the form import {{ … }} from './x.js': "
                                f"{line.strip()[:60]}")
        if re.search(r"\bimport\s*\(", code):
            problems.append(f"{name}: dynamic import()")
        body = panel.IMPORT.sub("", code)
        for m in panel.IMPORT.finditer(code):
            dep = m.group(2)
            names = [n.strip() for n in m.group(1).split("{", 1)[1].split("}")[0].split(",")
                     if n.strip()]
            if dep not in files:
                problems.append(f"{name}: imports {dep}, which does not exist")
                continue
            for n in names:
                if n not in exports(files[dep]):
                    problems.append(f"{name}: {dep} does not export {n}")
                if not re.search(rf"(?<![\w.$]){re.escape(n)}(?![\w$])", body):
                    problems.append(f"{name}: {n} imported and not used")
        for n in exports(text):
            if not re.search(rf"^(?:export\s+)?(?:async\s+)?(?:function|const|let|class)\s+{n}\b",
                             code, re.M):
                problems.append(f"{name}: exports {n}, which it does not define")
    return problems


def _modules() -> dict[str, str]:
    return {p.name: p.read_text("utf-8") for p in PANEL.glob("*.js")}


def test_the_panel_modules_pass_the_lint() -> None:
    assert lint(_modules()) == []


GOOD = {"a.js": "export const x = 1;\nexport function y() { return x; }\n",
        "b.js": "import { x, y } from './a.js';\nexport { z };\nconst z = x + y();\n"}


@pytest.mark.parametrize(("change", "found"), [
    ("el.innerHTML = s;", "innerHTML"),
    ("el.outerHTML = s;", "outerHTML"),
    ("el.insertAdjacentHTML('beforeend', s);", "insertAdjacentHTML"),
    ("document.write(s);", "document.write"),
    ("eval(s);", "eval"),
    ("const f = new Function('return 1');", "new Function"),
    ("window.QLEDGE = {};", "assignment on window"),
    ("window['x'] = 1;", "assignment on window"),
    ("globalThis.x = 1;", "globalThis"),
    ("import { w } from './a.js';\nw();", "does not export w"),
    ("import { x } from './gone.js';", "does not exist"),
    ("import { y } from './a.js';", "y imported and not used"),
    ("import * as a from './a.js';\na.x;", "import not of the form"),
    ("import('./a.js');", "dynamic import()"),
    ("export { nothing };", "does not define"),
])
def test_each_lint_rule_fails_on_a_bad_sample(change: str, found: str) -> None:
    assert lint(GOOD) == []
    bad = {**GOOD, "c.js": "import { x } from './a.js';\n" + change + "\nconsole.log(x);\n"}
    problems = lint(bad)
    assert any(found in p and p.startswith("c.js") for p in problems), problems


def _as_esm(tmp_path: Path) -> Path:
    """The modules next to a package.json that makes node read .js as ES modules."""
    for path in PANEL.glob("*.js"):
        shutil.copy(path, tmp_path / path.name)
    (tmp_path / "package.json").write_text('{"type": "module"}\n')
    return tmp_path


@needs_node
def test_node_check_passes_on_every_module_and_fails_on_a_broken_one(tmp_path: Path) -> None:
    root = _as_esm(tmp_path)
    assert NODE is not None
    for path in sorted(root.glob("*.js")):
        r = subprocess.run([NODE, "--check", str(path)], capture_output=True, text=True,
                           timeout=60, check=False)
        assert r.returncode == 0, (path.name, r.stderr)
    (root / "broken.js").write_text("export function f( {\n")
    r = subprocess.run([NODE, "--check", str(root / "broken.js")], capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode != 0 and "SyntaxError" in r.stderr


def _node_test(root: Path, tests: Path) -> subprocess.CompletedProcess[str]:
    assert NODE is not None
    return subprocess.run([NODE, "--test", *sorted(str(p) for p in tests.glob("*.test.mjs"))],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={"PATH": "/usr/bin:/bin", "PANEL_MODULES": str(root),
                               "TZ": "UTC"})


@needs_node
def test_node_unit_tests_of_the_pure_helpers(tmp_path: Path) -> None:
    r = _node_test(_as_esm(tmp_path), TESTS)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert re.search(r"^# pass [1-9]", r.stdout, re.M) and "# fail 0" in r.stdout, r.stdout


@needs_node
def test_node_unit_tests_fail_when_a_helper_breaks(tmp_path: Path) -> None:
    root = _as_esm(tmp_path)
    core = (root / "core.js").read_text()
    broken = core.replace("const units = ['B', 'KiB'", "const units = ['B', 'KB'")
    assert broken != core
    (root / "core.js").write_text(broken)
    r = _node_test(root, TESTS)
    assert r.returncode != 0 and "fmtBytes" in r.stdout, r.stdout[-3000:]
