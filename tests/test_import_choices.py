"""The panel's import decides each conflict on its own (issue 38): the upload's
`choices` field ("<kind>:<key>" → rename|replace|skip) wins over `on_conflict` for
that item; the report says which choices a conflict offers, and each reason as a code.
Real uploads through the API into a real appliance state (SQLite, scripts folder)."""

from __future__ import annotations

import json
from pathlib import Path

from starlette.testclient import TestClient

from qledge import settings

BACKUP = Path(__file__).resolve().parent / "fixtures" / "qinglong" / "2.21.0-backup.tgz"
MINE = {"hello.py": "print('mine')\n", "greet.js": "console.log('mine')\n",
        "backup.sh": "echo mine\n"}


def _upload(client: TestClient, *, apply: bool, choices: dict[str, str] | None = None,
            on_conflict: str = "") -> dict[str, object]:
    data = {"choices": json.dumps(choices)} if choices is not None else {}
    query = f"?apply={str(apply).lower()}" + (f"&on_conflict={on_conflict}" if on_conflict
                                               else "")
    r = client.post("/api/v1/imports/qinglong" + query, data=data,
                    files={"file": ("data.tgz", BACKUP.read_bytes())})
    assert r.status_code == 200, r.text
    body: dict[str, object] = r.json()
    return body


def _scripts(report: dict[str, object]) -> dict[str, dict[str, object]]:
    items = report["items"]
    assert isinstance(items, list)
    return {i["key"]: i for i in items if i["kind"] == "script" and i["key"] in MINE}


def test_each_conflict_takes_its_own_choice(client: TestClient,
                                            conf: settings.Settings) -> None:
    folder = conf.scripts_path
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in MINE.items():
        (folder / name).write_text(text)

    dry = _scripts(_upload(client, apply=False))
    assert set(dry) == set(MINE), sorted(dry)
    for item in dry.values():  # listed with what can decide it, reason as a code
        assert item["action"] == "conflict"
        assert item["choices"] == ["rename", "replace", "skip"]
        assert item["why"] == {"code": "CLASH", "params": {"clash": "OTHER_FILE"}}

    choices = {"script:hello.py": "rename", "script:greet.js": "replace",
               "script:backup.sh": "skip"}
    planned = _scripts(_upload(client, apply=False, choices=choices))
    assert {k: i["action"] for k, i in planned.items()} == {
        "hello.py": "create", "greet.js": "change", "backup.sh": "skip"}
    assert planned["backup.sh"]["why"]["code"] == "CLASH_KEPT"  # type: ignore[index]
    assert not (folder / "hello.qinglong.py").exists()  # a dry run wrote nothing

    # Applied: a default for the rest (replace) does not override a single choice.
    done = _upload(client, apply=True, choices=choices, on_conflict="replace")
    assert done["applied"] is True
    assert (folder / "hello.py").read_text() == MINE["hello.py"]  # renamed beside it
    assert (folder / "hello.qinglong.py").exists()
    assert (folder / "greet.js").read_text() != MINE["greet.js"]  # replaced
    assert (folder / "backup.sh").read_text() == MINE["backup.sh"]  # kept
    counts = done["counts"]
    assert isinstance(counts, dict)
    assert counts["script"]["conflict"] == 0


def test_a_bad_choice_is_refused_with_a_code(client: TestClient) -> None:
    too_many = json.dumps({f"script:{n}.py": "skip" for n in range(10_001)})
    for bad in ('{"script:x": "merge"}', "[1]", "not json", too_many):
        r = client.post("/api/v1/imports/qinglong", data={"choices": bad},
                        files={"file": ("data.tgz", BACKUP.read_bytes())})
        assert r.status_code == 422, r.text
        assert r.json()["field"] == "choices"
        assert r.json()["code"] in ("NOT_ONE_OF", "BAD_CHOICES")
