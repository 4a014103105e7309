"""The operator panel's static serving: budget, hashed names, cache headers, CSP."""

from __future__ import annotations

import ast
import gzip
import hashlib
import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from qledge.http import panel

PANEL = panel.PANEL_DIR
BUDGET = 328 * 1024  # docs/panel.md "Budget"


def _asset_urls(html: str) -> list[str]:
    return re.findall(r'(?:src|href)="(/assets/[^"]+)"', html)


def test_all_panel_assets_fit_the_budget() -> None:
    files = [p for p in PANEL.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"index.html", *panel.ASSETS}
    total = sum(p.stat().st_size for p in files)
    assert total <= BUDGET, f"panel assets are {total} bytes, budget {BUDGET}"


def test_no_third_party_urls_in_the_panel() -> None:
    for path in PANEL.rglob("*"):
        if path.is_file():
            # The SVG namespace is a name the DOM needs, not a URL anything fetches.
            text = path.read_text("utf-8").replace("'http://www.w3.org/2000/svg'", "''")
            assert not re.search(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", text, re.I), path


def test_index_is_no_cache_with_a_strict_csp(client: TestClient) -> None:
    r = client.get("/")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    assert r.headers["cache-control"] == "no-cache"
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp
    assert "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["referrer-policy"] == "no-referrer"
    assert "{{" not in r.text
    assert r.text == client.get("/index.html").text


def test_assets_have_content_hashes_and_immutable_caching(client: TestClient) -> None:
    html = client.get("/").text
    assert len(_asset_urls(html)) == len(panel.ASSETS)  # app.css and main.js
    served = panel.Panel()
    assert set(served.urls) == {"app.css", *panel.modules()}
    for name, url in served.urls.items():
        stem, digest, suffix = url.rsplit("/", 1)[1].split(".")
        assert stem == name.rsplit(".", 1)[0]
        r = client.get(url, headers={"Accept-Encoding": "identity"})
        assert r.status_code == 200
        # the body is the file with its imports naming their hashed files; the hash is
        # taken over that body, so a dependency's change renames its importers too
        assert digest == hashlib.sha256(r.content).hexdigest()[:16]
        assert r.content.decode() == panel.IMPORT.sub(
            lambda m: m.group(1) + "./" + served.urls[m.group(2)].rsplit("/", 1)[1] + m.group(3),
            (PANEL / name).read_text("utf-8"))
        assert r.headers["cache-control"] == "public, max-age=31536000, immutable"
        want = "text/javascript" if suffix == "js" else "text/css"
        assert r.headers["content-type"].startswith(want)
        assert r.headers["x-content-type-options"] == "nosniff"
        for dep in panel.imports((PANEL / name).read_text("utf-8")):
            assert f"from '.{served.urls[dep].removeprefix('/assets')}';" in r.text, (name, dep)


def test_a_changed_module_renames_every_module_that_imports_it(tmp_path: Path) -> None:
    for path in PANEL.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    before = panel.Panel(tmp_path).urls
    (tmp_path / "i18n.js").write_text((tmp_path / "i18n.js").read_text() + "\n// v2\n")
    after = panel.Panel(tmp_path).urls
    changed = {name for name in before if before[name] != after[name]}
    # i18n.js, core.js (imports it), every page (imports core) and main.js; not the CSS,
    # nor qr.js and zones.js, which import nothing
    assert changed == set(panel.modules()) - {"qr.js", "zones.js"}, changed


def test_an_import_cycle_or_a_missing_module_fails_at_startup(tmp_path: Path) -> None:
    for path in PANEL.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    i18n = (tmp_path / "i18n.js").read_text()
    (tmp_path / "i18n.js").write_text("import { t } from './core.js';\n" + i18n)
    with pytest.raises(ValueError, match="cycle"):
        panel.Panel(tmp_path)
    (tmp_path / "i18n.js").write_text("import { x } from './gone.js';\n" + i18n)
    with pytest.raises(FileNotFoundError):
        panel.Panel(tmp_path)


def test_unknown_or_stale_asset_names_are_404(client: TestClient) -> None:
    for url in ("/assets/app.js", "/assets/app.0000000000000000.js", "/assets/index.html",
                "/assets/../app.js", "/assets/app.css"):
        r = client.get(url)
        assert r.status_code == 404, url
        assert "immutable" not in r.headers.get("cache-control", "")


def test_gzip_and_etag_revalidation(client: TestClient) -> None:
    url = _asset_urls(client.get("/").text)[-1]
    raw = client.get(url, headers={"Accept-Encoding": "identity"})
    # httpx decodes gzip transparently; compare the decoded body and check the header
    zipped = client.get(url, headers={"Accept-Encoding": "gzip"})
    assert zipped.headers["content-encoding"] == "gzip"
    assert zipped.content == raw.content
    assert int(zipped.headers["content-length"]) < len(raw.content)
    assert zipped.headers["vary"] == "Accept-Encoding"
    etag = client.get("/").headers["etag"]
    again = client.get("/", headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.content == b""


def test_api_still_needs_the_bearer_while_the_panel_does_not(client: TestClient) -> None:
    saved = client.headers.pop("Authorization")
    try:
        assert client.get("/").status_code == 200
        assert client.get("/api/v1/tasks").status_code == 401
    finally:
        client.headers["Authorization"] = saved


def test_hashes_are_computed_from_contents_at_startup(tmp_path: Path) -> None:
    for path in PANEL.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    before = {a.url for a in panel.Panel(tmp_path).assets.values()}
    (tmp_path / "app.css").write_bytes((tmp_path / "app.css").read_bytes() + b"\n/* v2 */\n")
    after = panel.Panel(tmp_path)
    changed = {a.url for a in after.assets.values()} - before
    assert len(changed) == 1 and next(iter(changed)).startswith("/assets/app.")
    assert next(iter(changed)) in after.index.body.decode()
    assert gzip.decompress(after.assets[next(iter(changed)).rsplit("/", 1)[1]].gzipped) \
        .endswith(b"/* v2 */\n")


def test_index_naming_an_unknown_asset_fails_at_startup(tmp_path: Path) -> None:
    for path in PANEL.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    (tmp_path / "index.html").write_text('<script src="{{extra.js}}"></script>')
    with pytest.raises(ValueError):
        panel.Panel(tmp_path)


def _scripts_text() -> str:
    return "".join((PANEL / name).read_text("utf-8") for name in panel.modules()
                   if name != "i18n.js")


def test_every_file_in_the_panel_is_served_and_one_module_loads_the_rest(
        client: TestClient) -> None:
    on_disk = {p.name for p in PANEL.iterdir() if p.is_file()} - {"index.html"}
    # a file no module imports would never load
    assert on_disk == {"app.css", *panel.modules()}
    html = client.get("/").text
    assert re.findall(r"<script[^>]*>", html) == [
        f'<script type="module" src="{panel.Panel().urls["main.js"]}">']


def test_modules_stay_small() -> None:
    for name in panel.modules():
        if name != "i18n.js":  # a table of strings, not code
            text = (PANEL / name).read_text("utf-8")
            assert len(text.splitlines()) <= 400, f"{name} is growing into a monolith again"


def test_index_without_the_entry_module_fails_at_startup(tmp_path: Path) -> None:
    for path in PANEL.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    (tmp_path / "index.html").write_text('<link rel="stylesheet" href="{{app.css}}">')
    with pytest.raises(ValueError):
        panel.Panel(tmp_path)


_STRING = r"'((?:[^'\\]|\\.)*)'"


def _i18n_table() -> dict[str, tuple[str, str]]:
    """i18n.js's table, `'key': 'English|Chinese',` one entry per key (a long one as
    `'English|' +` and `'Chinese',` on the next line). Exactly one `|` per entry: the
    panel splits on it."""
    text = (PANEL / "i18n.js").read_text("utf-8")
    entries = re.findall(rf"^  '([^']+)': {_STRING}(?: \+\n +{_STRING})?,$", text, re.M)
    assert len(entries) == len(re.findall(r"^  '[^']+': '", text, re.M)), "a malformed entry"
    keys = [key for key, _, _ in entries]
    assert len(keys) == len(set(keys)), "a key twice: the later one would win silently"
    table = {}
    for key, first, second in entries:
        both = first + second
        assert both.count("|") == 1, f"{key}: not one '|' between English and Chinese"
        en, zh = both.split("|")
        table[key] = (en, zh)
    return table


def _i18n_keys() -> set[str]:
    return set(_i18n_table())


def test_every_string_has_english_and_chinese() -> None:
    table = _i18n_table()
    assert len(table) > 150
    assert [key for key, (en, zh) in table.items() if not en.strip() or not zh.strip()] == []
    used = set(re.findall(r"\bt\('([a-zA-Z0-9_.]+)'", _scripts_text()))
    assert {k for k in used if not k.endswith(".")} <= set(table)


def test_every_reason_code_and_status_is_explained() -> None:
    from qledge.model import Reason, RunStatus

    en = _i18n_keys()
    assert {f"reason.{r.value}" for r in Reason} <= en
    assert {f"status.{s.value}" for s in RunStatus} <= en


def emitted_event_types() -> set[str]:
    """Every run event type the backend can write (`NewEvent(type="…")` in app/)."""
    app = Path(panel.__file__).resolve().parents[1]
    found: set[str] = set()
    for path in app.rglob("*.py"):
        found |= set(re.findall(r'NewEvent\(\s*type="([^"]+)"', path.read_text("utf-8")))
    return found


def test_every_event_type_the_backend_emits_has_words() -> None:
    from qledge.runtime.diskwatch import REASON, REASON_UNKNOWN

    types = emitted_event_types()
    assert {"run.created", "run.finished", "run.held", "attempt.signal_sent"} <= types
    handled = set(re.findall(r"case '([a-z_.]+)':", (PANEL / "run.js").read_text("utf-8")))
    assert types <= handled, f"no words for {types - handled} (falls back to raw JSON)"
    assert {f"held.{REASON}", f"held.{REASON_UNKNOWN}"} <= _i18n_keys()


def test_every_log_read_error_and_file_kind_has_words() -> None:
    """The `error` codes of a log read or stream (docs/api.md) and the `kind` of a file that
    replaced a log (launch/logs.py) are shown in words, never as raw codes."""
    app = Path(panel.__file__).resolve().parents[1]
    codes = set(re.findall(r'"(LOG_[A-Z_]+)"', "".join(
        p.read_text("utf-8") for p in (app / "http").glob("*.py"))))
    assert {"LOG_NOT_REGULAR_FILE", "LOG_READ_TIMEOUT", "LOG_READ_BUSY"} <= codes
    import stat

    from qledge.launch import logs
    # Every kind a log path can turn out to be (a regular file is no error).
    modes = (stat.S_IFDIR, stat.S_IFLNK, stat.S_IFIFO, stat.S_IFSOCK, stat.S_IFCHR,
             stat.S_IFBLK, 0)
    kinds = {logs._kind(mode) for mode in modes}
    assert {"fifo", "symlink", "directory", "socket", "device"} <= kinds
    en = _i18n_keys()
    assert {f"log.err.{c}" for c in codes} <= en, {f"log.err.{c}" for c in codes} - en
    assert {f"kind.{k}" for k in kinds} <= en, {f"kind.{k}" for k in kinds} - en


def test_every_deletion_reason_and_isolation_mode_has_words() -> None:
    """The System page's deletions by kind and reason (the zero-filled shape of
    /api/v1/system) and the warning for each task_isolation mode are in words; an
    evicted log's reason (DISK_CRITICAL…) reads the same on the run page."""
    import typing

    from qledge.runtime.retention.keeper import _by_reason
    from qledge.settings import Settings

    en = _i18n_keys()
    shape = _by_reason({})
    assert {"DISK_CRITICAL", "DISK_PRESSURE", "SIZE_CAP"} <= set(shape["logs"])
    assert {f"system.del.{kind}" for kind in shape} <= en
    assert {f"evict.{why}" for reasons in shape.values() for why in reasons} <= en
    modes = typing.get_args(typing.get_type_hints(Settings, include_extras=True)
                            ["task_isolation"])
    assert set(modes) == {"auto", "required", "off"}
    assert {f"system.iso.{mode}" for mode in modes} <= en


def test_the_stylesheet_closes_every_block() -> None:
    """An unclosed rule swallows every rule after it (a merge once left a selector line
    twice, and the phone navigation and half the page styles silently went)."""
    text = re.sub(r"/\*.*?\*/", "", (PANEL / "app.css").read_text("utf-8"), flags=re.S)
    depth = 0
    for n, line in enumerate(text.splitlines(), 1):
        depth += line.count("{") - line.count("}")
        assert depth >= 0, f"app.css:{n} closes a block that is not open"
    assert depth == 0, "app.css leaves a block open"


def _field_rules() -> dict[str, set[str]]:
    """Every FieldError code the app can raise, read from the source (an AST walk of
    app/qledge), each with the params every one of its raisers sends (their
    intersection: a template may use only those). A code computed at run time (the
    task form's reasons) is taken from the set tasks/spec.py refuses at save."""
    from qledge.tasks import spec

    sent: dict[str, set[str]] = {}
    app = Path(spec.__file__).resolve().parents[1]
    for path in app.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if not (isinstance(node, ast.Call) and node.args and "FieldError" in {
                    getattr(node.func, "id", None), getattr(node.func, "attr", None)}):
                continue
            params = {k.arg for k in node.keywords if k.arg}
            first = node.args[0]
            codes = ([first.value] if isinstance(first, ast.Constant)
                     else [r.value for r in spec._REFUSED_AT_SAVE])
            for code in codes:
                sent[code] = sent[code] & params if code in sent else params
    assert len(sent) > 20, sorted(sent)  # the walk found the rules, not nothing
    return sent


def test_every_field_rule_the_api_can_return_has_words_in_both_languages() -> None:
    table = _i18n_table()
    missing = [code for code in _field_rules()
               if not re.search(r"[\u4e00-\u9fff]", table.get(f"code.{code}", ("", ""))[1])]
    assert not missing, f"no 中文 in i18n.js for the field rules {missing}"


def test_a_rule_template_uses_only_the_params_the_server_sends() -> None:
    table = _i18n_table()
    for code, params in _field_rules().items():
        for text in table[f"code.{code}"]:
            used = set(re.findall(r"\{(\w+)\}", text))
            assert used <= params | {"field"}, (code, text, used - params)
