"""The scripts API: /api/v1/scripts (admin token) and QingLong's /open/scripts calls
(scope `scripts`), with their shapes and every named error."""

from __future__ import annotations

import os
import shutil
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from qledge.scripts import ship as shipped_scripts
from qledge.scripts.folder import Limits, Scripts
from test_qinglong_api import bearer, get_token, make_app

pytestmark = pytest.mark.pg  # also run on PostgreSQL: scripts/test's QLTEST_BACKEND=pg pass

API = "/api/v1/scripts"


def root_of(client: TestClient) -> Path:
    """The scripts folder, emptied of the notify helpers shipped at start-up
    (docs/notifications.md): these tests start from an empty folder."""
    path: Path = client.app.state.runtime.settings.scripts_path  # type: ignore[attr-defined]
    for name in shipped_scripts.FILES:
        (path / name).unlink(missing_ok=True)
    return path


def put(client: TestClient, path: str, content: str, **extra: Any) -> Any:
    return client.put(f"{API}/file", json={"path": path, "content": content, **extra})


def test_create_read_overwrite_history_restore_and_meta(client: TestClient) -> None:
    r = put(client, "jd/sign.js", "// cron: 5 9 * * *\nconst $ = new Env('签到');\n")
    assert r.status_code == 201, r.text
    first = r.json()
    assert first["created"] and first["history"] == "none" and first["path"] == "jd/sign.js"
    r = put(client, "jd/sign.js", "v2\n", base_sha256=first["sha256"])
    assert r.status_code == 200 and r.json()["history"] == "kept"
    got = client.get(f"{API}/file", params={"path": "jd/sign.js"}).json()
    assert got["content"] == "v2\n" and got["size"] == 3 and got["sha256"] == r.json()["sha256"]
    assert isinstance(got["mtime_ms"], int)

    hist = client.get(f"{API}/history", params={"path": "jd/sign.js"}).json()
    assert hist["keep"] == 5 and len(hist["items"]) == 1
    vid = hist["items"][0]["id"]
    ver = client.get(f"{API}/history/version", params={"path": "jd/sign.js", "id": vid}).json()
    assert ver["content"].startswith("// cron: 5 9")
    r = client.post(f"{API}/history/restore", json={"path": "jd/sign.js", "id": vid})
    assert r.status_code == 200 and r.json()["history"] == "kept"
    assert (root_of(client) / "jd" / "sign.js").read_text().startswith("// cron")

    meta = client.get(f"{API}/meta", params={"path": "jd/sign.js"}).json()
    assert meta == {"path": "jd/sign.js", "schedule": "5 9 * * *",
                    "schedule_from": "cron_comment", "name": "签到", "name_from": "env",
                    "command": "task jd/sign.js"}


def test_tree_folder_move_delete_download_and_upload(client: TestClient) -> None:
    root = root_of(client)
    assert client.post(f"{API}/folder", json={"path": "a/b"}).status_code == 201
    put(client, "a/b/x.py", "print(1)\n")
    (root / "node_modules").mkdir()
    tree = client.get(API).json()
    assert tree["path"] == "" and tree["truncated"] is False
    assert tree["limits"]["max_upload"] == Limits().max_upload
    a = tree["items"][0]
    assert (a["name"], a["type"], a["path"]) == ("a", "directory", "a")
    assert a["children"][0]["children"][0]["path"] == "a/b/x.py"
    assert [n["name"] for n in tree["items"]] == ["a"]  # node_modules hidden
    one = client.get(API, params={"path": "a", "depth": "1"}).json()
    assert one["items"][0]["name"] == "b" and "children" not in one["items"][0]

    r = client.post(f"{API}/move", json={"from": "a/b/x.py", "to": "c/y.py"})
    assert r.json() == {"from": "a/b/x.py", "to": "c/y.py", "type": "file"}
    r = client.get(f"{API}/download", params={"path": "c/y.py"})
    assert r.status_code == 200 and r.content == b"print(1)\n"
    assert r.headers["content-disposition"] == "attachment; filename=\"y.py\"; " \
                                               "filename*=UTF-8''y.py"
    assert r.headers["content-type"] == "application/octet-stream"

    name = "签到 x.js"
    r = client.post(f"{API}/upload", params={"path": "c"},
                    files={"file": (name, b"\x00binary ok\n")})
    assert r.status_code == 201, r.text
    assert (root / "c" / name).read_bytes() == b"\x00binary ok\n"
    r = client.get(f"{API}/download", params={"path": f"c/{name}"})
    cd = r.headers["content-disposition"]
    assert cd == f"attachment; filename=\"__ x.js\"; filename*=UTF-8''{urllib.parse.quote(name)}"
    r = client.post(f"{API}/upload", params={"path": "c"}, files={"file": (name, b"again")})
    assert r.status_code == 409 and r.json()["error"] == "SCRIPT_EXISTS"
    r = client.post(f"{API}/upload", params={"path": "c", "overwrite": "1"},
                    files={"file": (name, b"again")})
    assert r.status_code == 200 and r.json()["history"] == "kept"
    r = client.post(f"{API}/upload", params={"path": "c"},
                    files={"file": ("../x.js", b"x")})
    assert r.status_code == 400 and r.json()["reason"] == "not_a_name"
    assert r.json()["field"] == "filename"
    r = client.post(f"{API}/upload", files={"other": ("a.js", b"x"), "file2": ("b.js", b"y")})
    assert r.status_code == 400 and "one file per upload" in r.json()["message"]

    r = client.delete(API, params={"path": "c"})
    assert r.json() == {"path": "c", "type": "directory", "entries": 2}
    assert not (root / "c").exists()
    assert sorted(e.name for e in root.iterdir()) == ["a", "node_modules"]  # no staged leftovers


def _err(r: Any, status: int, code: str, reason: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body: dict[str, Any] = r.json()
    assert body["error"] == code and body["reason"] == reason, body
    assert body["message"] and body["field"]
    return body


def test_every_refusal_is_a_named_json_error(client: TestClient, tmp_path: Path) -> None:
    root = root_of(client)
    put(client, "a.js", "a")
    (root / "dir").mkdir()
    os.symlink(tmp_path, root / "link")
    os.mkfifo(root / "pipe")
    (root / "bin").write_bytes(b"\x00\x01")
    body = _err(client.get(f"{API}/file", params={"path": "../a.js"}), 400,
                "SCRIPT_PATH_INVALID", "dotdot")
    assert body["field"] == "path" and body["path"] == "../a.js"
    _err(client.get(f"{API}/file", params={"path": "/etc/passwd"}), 400,
         "SCRIPT_PATH_INVALID", "absolute")
    _err(client.get(f"{API}/file", params={"path": "a\x00b"}), 400, "SCRIPT_PATH_INVALID",
         "nul")
    _err(client.get(f"{API}/file", params={"path": "link/x"}), 403, "SCRIPT_PATH_SYMLINK",
         "symlink")
    _err(client.get(f"{API}/file", params={"path": "pipe"}), 403, "SCRIPT_NOT_REGULAR", "fifo")
    _err(client.get(f"{API}/file", params={"path": "nope.js"}), 404, "SCRIPT_NOT_FOUND",
         "not_found")
    _err(client.get(f"{API}/file", params={"path": "dir"}), 409, "SCRIPT_WRONG_TYPE",
         "is_directory")
    _err(client.get(f"{API}/file", params={"path": "bin"}), 415, "SCRIPT_BINARY", "binary")
    _err(put(client, "a.js", "x", create=True), 409, "SCRIPT_EXISTS", "exists")
    _err(put(client, "a.js", "x", base_sha256="0" * 64), 409, "SCRIPT_CHANGED", "changed")
    _err(client.post(f"{API}/folder", json={"path": "dir"}), 409, "SCRIPT_EXISTS", "exists")
    _err(client.post(f"{API}/move", json={"from": "a.js", "to": "dir"}), 409, "SCRIPT_EXISTS",
         "exists")
    _err(client.post(f"{API}/move", json={"from": "dir", "to": "dir/sub"}), 400,
         "SCRIPT_PATH_INVALID", "into_itself")
    body = _err(client.post(f"{API}/move", json={"from": "../x", "to": "y"}), 400,
                "SCRIPT_PATH_INVALID", "dotdot")
    assert body["field"] == "from"
    _err(client.get(f"{API}/history/version", params={"path": "a.js", "id": "nope"}), 404,
         "SCRIPT_VERSION_NOT_FOUND", "version_not_found")
    _err(client.delete(API, params={"path": "nope"}), 404, "SCRIPT_NOT_FOUND", "not_found")
    # malformed bodies and missing parameters use the API's usual errors
    r = client.get(f"{API}/file")
    assert r.status_code == 422 and r.json()["field"] == "path"
    r = client.put(f"{API}/file", json={"path": "a.js"})
    assert r.status_code == 422 and r.json()["field"] == "content"
    for depth in ("x", "\u00b2"):  # "²" passed isdigit() and broke int(): a 500
        r = client.get(API, params={"depth": depth})
        assert r.status_code == 422 and r.json()["field"] == "depth", r.text
    assert (root / "a.js").read_text() == "a"  # nothing changed by any of it


def test_bounds_are_413_and_409(client: TestClient) -> None:
    rt = client.app.state.runtime  # type: ignore[attr-defined]
    sc = Scripts(rt.settings.scripts_path, rt.settings.script_history_path,
                 Limits(max_text=100, delete_entries=3))
    client.app.state.scripts = sc  # type: ignore[attr-defined]
    _err(put(client, "a.js", "x" * 101), 413, "SCRIPT_TOO_LARGE", "too_large")
    r = client.put(f"{API}/file", content=b'{"path": "a.js", "content": "' + b"x" * 70_000
                   + b'"}', headers={"Content-Type": "application/json"})
    _err(r, 413, "SCRIPT_TOO_LARGE", "too_large")
    (sc.root / "big.js").write_bytes(b"x" * 101)
    _err(client.get(f"{API}/file", params={"path": "big.js"}), 413, "SCRIPT_TOO_LARGE",
         "too_large")
    assert client.get(f"{API}/download", params={"path": "big.js"}).content == b"x" * 101
    (sc.root / "d").mkdir()
    for i in range(4):
        (sc.root / "d" / str(i)).write_text("x")
    _err(client.delete(API, params={"path": "d"}), 409, "SCRIPT_TREE_TOO_LARGE",
         "tree_too_large")
    assert len(list((sc.root / "d").iterdir())) == 4


def test_a_missing_scripts_folder_is_503(client: TestClient) -> None:
    shutil.rmtree(root_of(client))
    _err(client.get(API), 503, "SCRIPTS_UNAVAILABLE", "root_unavailable")


def test_the_native_api_needs_the_admin_token(client: TestClient) -> None:
    for method, url in (("GET", API), ("GET", f"{API}/file?path=a"), ("PUT", f"{API}/file"),
                        ("POST", f"{API}/upload"), ("GET", f"{API}/download?path=a")):
        r = client.request(method, url, headers={"Authorization": "Bearer wrong-token-xxxxx"})
        assert r.status_code == 401, (method, url)
    cid, secret = make_app(client, "s", ["scripts"])
    app_token = get_token(client, cid, secret)
    assert client.get(API, headers=bearer(app_token)).status_code == 401  # /open only


# -- /open/scripts ------------------------------------------------------------------------

@pytest.fixture
def ql(client: TestClient) -> tuple[TestClient, dict[str, str]]:
    cid, secret = make_app(client, "scripts-app", ["scripts"])
    return client, bearer(get_token(client, cid, secret))


def test_open_tree_and_file_in_qinglongs_shapes(ql: tuple[TestClient, dict[str, str]]) -> None:
    client, auth = ql
    root = root_of(client)
    put(client, "sub/a.js", "console.log(1)\n")
    put(client, "top.py", "print(1)\n")
    (root / "yarn.lock").write_text("x")
    os.symlink("top.py", root / "alias.py")  # QingLong leaves symlinks out of its tree
    r = client.get("/open/scripts", headers=auth)
    assert r.status_code == 200
    body = r.json()
    assert body["code"] == 200
    sub, top = body["data"]
    assert set(sub) == {"title", "key", "type", "parent", "createTime", "children"}
    assert (sub["title"], sub["key"], sub["type"], sub["parent"]) == ("sub", "sub",
                                                                      "directory", "")
    assert sub["children"] == [{"title": "a.js", "key": "sub/a.js", "type": "file",
                                "parent": "sub", "size": 15,
                                "createTime": sub["children"][0]["createTime"]}]
    assert (top["title"], top["type"], top["size"]) == ("top.py", "file", 9)
    one = client.get("/open/scripts", params={"path": "sub"}, headers=auth).json()["data"]
    assert [f["key"] for f in one] == ["sub/a.js"]
    r = client.get("/open/scripts/detail", params={"path": "sub", "file": "a.js"},
                   headers=auth)
    assert r.json() == {"code": 200, "data": "console.log(1)\n"}
    r = client.get("/open/scripts/top.py", headers=auth)
    assert r.json() == {"code": 200, "data": "print(1)\n"}
    r = client.get("/open/scripts/a.js", params={"path": "sub/"}, headers=auth)
    assert r.json()["data"] == "console.log(1)\n"
    # refusals keep QingLong's error shape
    r = client.get("/open/scripts/detail", params={"path": "..", "file": "x"}, headers=auth)
    assert r.status_code == 400
    assert r.json() == {"code": 400, "message": "path must not contain '..'"}
    r = client.get("/open/scripts/detail", params={"path": "/ql/data/scripts", "file": "x"},
                   headers=auth)
    assert r.status_code == 400 and "absolute" in r.json()["message"]
    r = client.get("/open/scripts/detail", params={"file": "alias.py"}, headers=auth)
    assert r.status_code == 403 and r.json()["code"] == 403


def test_open_create_update_rename_delete_and_download(
        ql: tuple[TestClient, dict[str, str]]) -> None:
    client, auth = ql
    root = root_of(client)

    def call(method: str, url: str, **kw: Any) -> Any:
        r = client.request(method, url, headers=auth, **kw)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("application/json")
        return r.json()

    assert call("POST", "/open/scripts", json={"filename": "a.js", "path": "p",
                                               "content": "one"}) == {"code": 200}
    assert (root / "p" / "a.js").read_text() == "one"
    call("POST", "/open/scripts", json={"filename": "x", "path": "p", "directory": "q/r"})
    assert (root / "p" / "q" / "r").is_dir()
    call("POST", "/open/scripts", json={"filename": "x", "path": "p", "directory": "q/r"})
    # save-as: originFilename differs, the old name goes
    call("POST", "/open/scripts", json={"filename": "b.js", "path": "p",
                                        "originFilename": "a.js", "content": "two"})
    assert not (root / "p" / "a.js").exists() and (root / "p" / "b.js").read_text() == "two"
    call("PUT", "/open/scripts", json={"filename": "b.js", "path": "p", "content": "three"})
    assert (root / "p" / "b.js").read_text() == "three"
    hist = client.get(f"{API}/history", params={"path": "p/b.js"}).json()["items"]
    assert len(hist) == 1  # PUT kept "two"
    # QingLong's web client: the file part first, then filename/path/content/directory
    files = [("file", ("up.sh", b"echo up\n", "application/octet-stream")),
             ("filename", (None, b"up.sh")), ("path", (None, b"p/q")),
             ("content", (None, b"")), ("directory", (None, b""))]
    call("POST", "/open/scripts", files=files)
    assert (root / "p" / "q" / "up.sh").read_bytes() == b"echo up\n"
    # a multipart create without a file: a folder or content, like the JSON body
    call("POST", "/open/scripts", files=[("filename", (None, b"m.js")), ("path", (None, b"p")),
                                        ("content", (None, b"multi"))])
    assert (root / "p" / "m.js").read_text() == "multi"

    call("PUT", "/open/scripts/rename", json={"filename": "m.js", "path": "p",
                                              "newFilename": "n.js"})
    assert (root / "p" / "n.js").read_text() == "multi"
    r = client.post("/open/scripts/download", json={"filename": "n.js", "path": "p"},
                    headers=auth)
    assert r.status_code == 200 and r.content == b"multi"
    assert "attachment" in r.headers["content-disposition"]

    call("DELETE", "/open/scripts", json={"filename": "n.js", "path": "p"})
    call("DELETE", "/open/scripts", json={"filename": "n.js", "path": "p"})  # idempotent
    call("DELETE", "/open/scripts", json={"filename": "q", "path": "p", "type": "directory"})
    assert sorted(e.name for e in (root / "p").iterdir()) == ["b.js"]

    r = client.put("/open/scripts/rename", json={"filename": "b.js", "path": "p",
                                                 "newFilename": "../../b.js"}, headers=auth)
    assert r.status_code == 400 and r.json() == {"code": 400,
                                                 "message": "to must not contain '..'"}
    r = client.post("/open/scripts", json={"path": "p"}, headers=auth)
    assert r.status_code == 400 and r.json()["code"] == 400  # filename is required


def test_open_scripts_need_the_scripts_scope(client: TestClient) -> None:
    root_of(client)
    cid, secret = make_app(client, "crons-only", ["crons", "envs", "logs"])
    auth = bearer(get_token(client, cid, secret))
    for method, url, kw in (("GET", "/open/scripts", {}),
                            ("GET", "/open/scripts/detail?file=a.js", {}),
                            ("POST", "/open/scripts", {"json": {"filename": "a.js"}}),
                            ("PUT", "/open/scripts", {"json": {"filename": "a", "content": ""}}),
                            ("DELETE", "/open/scripts", {"json": {"filename": "a.js"}}),
                            ("POST", "/open/scripts/download", {"json": {"filename": "a"}}),
                            ("PUT", "/open/scripts/rename", {"json": {}})):
        r = client.request(method, url, headers=auth, **kw)
        assert r.status_code == 403, (method, url, r.text)
        assert r.json() == {"code": 403, "message": "this app has no 'scripts' scope"}
    assert not list(root_of(client).iterdir())
    r = client.get("/open/scripts", headers={"Authorization": ""})
    assert r.status_code == 401 and r.json()["code"] == 401
    r = client.get("/open/scripts", headers=bearer("not-a-token-at-all"))
    assert r.status_code == 401 and r.json() == {"code": 401, "message": "invalid token"}
    assert client.get("/open/scripts").status_code == 200  # the admin token: every scope


def test_download_names_survive_quotes_and_unicode() -> None:
    from qledge.http.scripts import content_disposition

    assert content_disposition('a "b".js') == (
        "attachment; filename=\"a _b_.js\"; filename*=UTF-8''a%20%22b%22.js")
    assert content_disposition("签.js") == (
        "attachment; filename=\"_.js\"; filename*=UTF-8''%E7%AD%BE.js")


def test_the_scripts_scope_is_offered_to_apps(client: TestClient) -> None:
    r = client.post("/api/v1/apps", json={"name": "x", "scopes": ["scripts", "nope"]})
    assert r.status_code == 422 and "scripts" in r.json()["message"]


def test_open_save_as_never_removes_a_folder_and_checks_before_writing(
        ql: tuple[TestClient, dict[str, str]]) -> None:
    # Issue 35, finding 14: originFilename "keepme" removed the folder keepme/ with its
    # history; "../x" answered 400 after the new file was already written.
    client, auth = ql
    root = root_of(client)
    (root / "keepme").mkdir()
    (root / "keepme" / "mine.py").write_text("print('mine')\n")
    assert client.put(f"{API}/file", json={"path": "keepme/mine.py", "content": "v2\n"}
                      ).status_code == 200  # one version in the history
    r = client.post("/open/scripts", headers=auth, json={
        "filename": "new.py", "originFilename": "keepme", "content": "x"})
    assert r.status_code == 409 and r.json()["code"] == 409, r.text
    assert (root / "keepme" / "mine.py").read_text() == "v2\n"
    assert len(client.get(f"{API}/history", params={"path": "keepme/mine.py"}
                          ).json()["items"]) == 1
    r = client.post("/open/scripts", headers=auth, json={
        "filename": "new2.py", "originFilename": "../x", "content": "x"})
    assert r.status_code == 400 and "originFilename" in r.json()["message"], r.text
    (root / "link.py").symlink_to("keepme/mine.py")
    r = client.post("/open/scripts", headers=auth, json={
        "filename": "new3.py", "originFilename": "link.py", "content": "x"})
    assert r.status_code == 403, r.text
    assert (root / "link.py").is_symlink()
    assert not any((root / n).exists() for n in ("new.py", "new2.py", "new3.py"))
    # A missing old name is no error (QingLong's save-as of a file already gone).
    r = client.post("/open/scripts", headers=auth, json={
        "filename": "new4.py", "originFilename": "gone.py", "content": "x"})
    assert r.status_code == 200 and (root / "new4.py").read_text() == "x"
