"""Every error code the native API can answer with has words in the panel, in English
and 中文, and the words use only the values the answer carries (issue 38).

The codes are read from the source (an AST walk of the raise sites under http/,
operations/ and auth/: class attributes `code = "X"`, assignments `x.code = "X"`,
keywords `code="X"` (the answer's precise `code` beside its class's `error`), the
scripts table), not from a list kept by hand; the registry
(http/codes.py) must name each and declare the params each raise site sends. A
field rule (fields.FieldError, the answer's `rule`) is checked the same way.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from starlette.testclient import TestClient

from qledge.http import codes, errors
from test_panel import _field_rules, _i18n_table

APP = Path(codes.__file__).resolve().parents[1]
WALKED = [APP / "http", APP / "operations", APP / "auth"]
CJK = re.compile(r"[\u4e00-\u9fff]")


def _strings(node: ast.AST) -> list[str]:
    """The upper-case string constants of an expression (`"A" if x else "B"` → both)."""
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and re.fullmatch(r"[A-Z][A-Z0-9_]+", n.value)]


def _dict_keys(node: ast.AST) -> set[str]:
    return {k.value for k in getattr(node, "keys", []) if isinstance(k, ast.Constant)}


def raised_codes() -> dict[str, set[str]]:
    """code → the param names its raise sites send (params= and extra= literals)."""
    found: dict[str, set[str]] = {}
    for folder in WALKED:
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text("utf-8"))):
                if isinstance(node, ast.Assign) and any(
                        (isinstance(t, ast.Name) and t.id == "code")
                        or (isinstance(t, ast.Attribute) and t.attr == "code")
                        for t in node.targets):
                    for code in _strings(node.value):
                        found.setdefault(code, set())
                elif isinstance(node, ast.Dict) and "error" in _dict_keys(node):
                    # A body built by hand ({"error": "LOG_EVICTED", ...}).
                    value = node.values[[getattr(k, "value", None) for k in node.keys]
                                        .index("error")]
                    for code in _strings(value):
                        found.setdefault(code, set()).update(
                            _dict_keys(node) - {"error", "message"})
                elif isinstance(node, ast.Call):
                    kw = {k.arg: k.value for k in node.keywords if k.arg}
                    if "code" in kw:
                        sent = _dict_keys(kw.get("params", ast.Dict())) | _dict_keys(
                            kw.get("extra", ast.Dict()))
                        for code in _strings(kw["code"]):
                            found.setdefault(code, set()).update(sent)
    for _status, code in errors.SCRIPT_ERRORS.values():
        found.setdefault(code, set())
    found.setdefault("SCRIPT_ERROR", set())
    return found


def test_the_walk_finds_the_raise_sites() -> None:
    found = raised_codes()
    # A walk that silently found nothing would make every check below pass.
    assert {"NOT_FOUND", "BAD_APPRISE_URL", "BAD_PACKAGE_SPEC", "SCRIPT_PATH_INVALID",
            "SIGNIN_THROTTLED", "IMPORT_SOURCE_INVALID", "WRONG_TYPE"} <= set(found)
    assert len(found) > 60


def test_every_raised_code_is_registered_with_its_params() -> None:
    found = raised_codes()
    unregistered = sorted(set(found) - set(codes.CODES))
    assert not unregistered, f"codes raised but not in http/codes.py: {unregistered}"
    stale = sorted(set(codes.CODES) - set(found))
    assert not stale, f"codes in http/codes.py that nothing raises: {stale}"
    for code, sent in found.items():
        assert sent <= set(codes.CODES[code]), (code, sent - set(codes.CODES[code]))


def test_every_code_has_english_and_chinese_words() -> None:
    table = _i18n_table()
    missing = [c for c in codes.CODES if f"err.{c}" not in table]
    assert not missing, f"no words in i18n.js for {missing}"
    no_zh = [c for c in codes.CODES if not CJK.search(table[f"err.{c}"][1])]
    assert not no_zh, f"no 中文 for {no_zh}"
    rules = [r for r in _field_rules() if not CJK.search(table.get(f"code.{r}", ("", ""))[1])]
    assert not rules, f"no 中文 for the field rules {rules}"


def test_a_code_template_uses_only_the_params_its_answer_carries() -> None:
    table = _i18n_table()
    for code, params in codes.CODES.items():
        for text in table[f"err.{code}"]:
            used = set(re.findall(r"\{(\w+)\}", text))
            assert used <= set(params) | {"field"}, (code, text, used - set(params))
    # The fallback for a code the panel does not know names it, in the reader's words:
    # never the server's English message.
    fallback_zh = table["err.unknownCode"][1]
    assert "{message}" not in fallback_zh and "{code}" in fallback_zh


def test_answers_carry_the_code_and_the_params(client: TestClient) -> None:
    r = client.post("/api/v1/tasks", json={"name": "x", "command": "echo", "schedule":
                                           "0 * * * *", "retries": "three"})
    assert r.status_code == 422
    body = r.json()
    assert (body["error"], body["code"], body["field"], body["params"]) == (
        "INVALID", "WRONG_TYPE", "retries", {"expected": "int"})
    r = client.post("/api/v1/tasks", json={"name": "x", "command": "echo",
                                           "schedule": "0 * * * *", "retries": 99})
    body = r.json()
    assert (body["error"], body["rule"], body["field"]) == ("INVALID", "OUT_OF_RANGE",
                                                            "retries")
    assert {"min", "max"} <= set(body["params"])
    r = client.post("/api/v1/notifications/channels", json={"name": "c", "url": "nope"})
    assert (r.status_code, r.json()["code"], r.json()["field"]) == (422, "BAD_APPRISE_URL",
                                                                    "url")
    r = client.get("/api/v1/runs/999999999")
    assert r.json()["error"] == "NOT_FOUND" and r.json()["params"] == {"what": "run"}
    r = client.get("/api/v1/runs?limit=x")
    assert (r.json()["error"], r.json()["code"], r.json()["field"]) == (
        "INVALID", "NOT_INTEGER", "limit")


def said_codes() -> dict[str, set[str]]:
    """Every code of the import report (importer/said.py `said("CODE", english, **params)`)
    with the params each of its sites sends (their intersection)."""
    found: dict[str, set[str]] = {}
    for path in APP.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in (
                    "said", "Said") and node.args and isinstance(node.args[0], ast.Constant):
                code, sent = node.args[0].value, {k.arg for k in node.keywords if k.arg}
                found[code] = found[code] & sent if code in found else sent
    found.pop("", None)  # NO_CLASH
    return found


def test_every_import_report_code_has_words_with_its_params() -> None:
    table = _i18n_table()
    found = said_codes()
    assert {"CLASH", "NOT_VALID", "IDENTICAL", "SYMLINK", "NO_CONFIG"} <= set(found)
    assert len(found) > 60
    # A template that is only a nested code ({clash}: itself one of these) has no words.
    missing = [c for c in found if not CJK.search(table.get(f"imp.why.{c}", ("", ""))[1])
               and not re.fullmatch(r"\{\w+\}", table.get(f"imp.why.{c}", ("", ""))[1])]
    assert not missing, f"no 中文 in i18n.js for the import report's {missing}"
    for code, params in found.items():
        for text in table[f"imp.why.{code}"]:
            used = set(re.findall(r"\{(\w+)\}", text))
            assert used <= params, (code, text, used - params)
