"""In 中文 mode no English text from the server reaches the page (issue 38).

The walk triggers the refusals a new user meets (bad cron, env name, retries, apprise
URL, package spec, subscription, script path, a wrong import file) through the panel's
own `api` and the way its forms show a refusal (the toast), opens the import report,
the System page and a retried run's timeline, and fails on any visible text that

* contains an English `message` the server answered with (or an English reason or
  note of the import report), or
* in the translated areas (the toast, the report's kind/outcome/reason cells, the
  timeline, the System page's words) holds an English word: a plain word of the
  panel's English catalogue that its 中文 catalogue never uses (so `cron`, `qledge`,
  `SIGTERM`, names and paths pass; `valid`, `schedule`, `created` do not). No
  allowlist: the words come from the catalogues.

A self-check makes one code untranslated on purpose (its 中文 set to its English) and
proves the walk catches it.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from .conftest import shoot, sign_in
from _appliance import Appliance

pytestmark = pytest.mark.slow

BACKUP = Path(__file__).resolve().parents[1] / "fixtures" / "qinglong" / "2.21.0-backup.tgz"
TASK = {"name": "walk", "command": "echo hi", "schedule": "0 3 * * *"}
# Each refusal: (method, path, body), as the panel's forms send them.
REFUSALS: list[tuple[str, str, Any]] = [
    ("POST", "/tasks", {**TASK, "schedule": "every day at noon"}),  # bad cron
    ("POST", "/tasks", {**TASK, "retries": 99}),  # retries out of range
    ("POST", "/tasks", {**TASK, "retries": "three"}),  # retries not a number
    ("POST", "/envs", {"name": "1-bad name", "value": "x"}),  # env name
    ("POST", "/notifications/channels", {"name": "c", "url": "not-a-url"}),  # apprise
    ("POST", "/notifications/channels", {"name": "c", "url": "nosuch://x"}),
    ("POST", "/dependencies", {"type": "python", "specs": ["--index-url=http://x"]}),
    ("POST", "/subscriptions", {"name": "s", "type": "git", "url": "git@github.com:a/b.git",
                                "alias": "s"}),  # subscription over SSH
    ("POST", "/subscriptions", {"name": "s", "type": "git", "url": "https://x/y.git",
                                "alias": "../up"}),  # subscription alias
    ("GET", "/scripts/file?path=../etc/passwd", None),  # script path
]

# The panel's own modules (hashed names): the same instances the page runs.
_MODULES = """async (names) => {
  const urls = performance.getEntriesByType('resource').map((e) => e.name);
  const out = {};
  for (const n of names) out[n] = urls.find((u) => u.includes('/assets/' + n + '.'));
  return out;
}"""
_SHOW = """async ([core, method, path, body]) => {
  const m = await import(core);
  try { await m.api(method, path, body ?? undefined); return 'accepted'; }
  catch (e) { m.notify(e.message, 'error'); return e.message; }
}"""


def _catalogue(page: Page, i18n: str) -> dict[str, dict[str, str]]:
    table: dict[str, dict[str, str]] = page.evaluate(
        "async (u) => { const m = await import(u); return m.STRINGS; }", i18n)
    return table


def _words(text: str) -> set[str]:
    """The plain words of `text`: letters only, 3 or more, not all capitals. A token with
    a digit, `_`, `-`, `.` or `/` is a name (an alias, a variable, a path), not English."""
    tokens = re.findall(r"[A-Za-z0-9_./-]+", text)
    return {w.lower() for w in tokens if re.fullmatch(r"[A-Za-z]{3,}", w) and not w.isupper()}


class Walk:
    """What the server said in English, and the words only the English side uses."""

    def __init__(self, strings: dict[str, dict[str, str]]) -> None:
        self.messages: set[str] = set()
        self.zh_words = set().union(*(_words(v) for v in strings["zh"].values()))
        self.en_words = set().union(*(_words(v) for v in strings["en"].values()))

    def heard(self, text: str) -> None:
        # Said whole, it is English from the server (its words are the catalogue's to
        # judge: a message also holds names, such as a scope, an alias).
        if text and len(text) >= 8:
            self.messages.add(text)

    def english(self) -> set[str]:
        return self.en_words - self.zh_words

    def problems(self, page: Page, areas: list[str]) -> list[str]:
        found = []
        body = page.locator("body").inner_text()
        found += [f"server English on the page: {m!r}" for m in self.messages if m in body]
        english = self.english()
        for selector in areas:
            for el in page.locator(selector).all():
                if not el.is_visible():
                    continue
                text = el.inner_text()
                bad = sorted(_words(text) & english)
                if bad:
                    found.append(f"{selector}: English {bad} in {text[:120]!r}")
        return found


def _zh(page: Page) -> None:
    page.get_by_role("button", name="中文").click()
    expect(page.get_by_role("button", name="English")).to_be_visible()


def test_no_english_from_the_server_in_chinese(page: Page, appliance: Appliance) -> None:
    http = appliance.http
    # A run that fails, retries once and fails again: its timeline has the retry.
    task = http.post("/api/v1/tasks", json={
        "name": "retried", "command": "exit 3", "schedule": "0 3 * * *", "retries": 1,
        "retry_delay_s": 1}).json()
    run_id = http.post(f"/api/v1/tasks/{task['id']}/runs").json()["run"]["id"]
    sign_in(page)
    _zh(page)
    mods = page.evaluate(_MODULES, ["core", "i18n"])
    strings = _catalogue(page, mods["i18n"])
    walk = Walk(strings)

    # 1. The refusals: each said from the catalogue, in the toast.
    for method, path, body in REFUSALS:
        raw = http.request(method, "/api/v1" + path, json=body)
        assert 400 <= raw.status_code < 500, (path, raw.text)
        walk.heard(raw.json()["message"])
        said = page.evaluate(_SHOW, [mods["core"], method, path, body])
        assert said != "accepted" and re.search(r"[\u4e00-\u9fff]", said), (path, said)
        problems = walk.problems(page, ["#toast"])
        assert not problems, (path, problems)

    # 2. The import: a wrong file, then a real backup's report.
    page.goto("/#/system")
    card = page.locator("#sys-import")
    junk = appliance.state / "junk.tgz"
    junk.write_bytes(b"junk")
    walk.heard(http.post("/api/v1/imports/qinglong",
                         files={"file": ("x.tgz", b"junk")}).json()["message"])
    card.locator("#imp-file").set_input_files(str(junk))
    card.get_by_role("button", name="检查").click()
    expect(page.locator("#toast")).to_contain_text("不是青龙备份")
    assert not walk.problems(page, ["#toast"])
    report = http.post("/api/v1/imports/qinglong",
                       files={"file": ("data.tgz", BACKUP.read_bytes())}).json()
    for item in report["items"]:
        walk.heard(item["reason"])
        if item["label_coded"]:  # a label the importer wrote (not a name from QingLong)
            walk.heard(item["label"])
        for note in item["notes"]:
            walk.heard(note)
    for note in report["notes"]:
        walk.heard(note)
    card.locator("#imp-file").set_input_files(str(BACKUP))
    card.get_by_role("button", name="检查").click()
    expect(card.locator(".imp-report tbody tr").first).to_be_visible()
    areas = [".imp-report td:nth-child(1)", ".imp-report td:nth-child(2)",
             ".imp-report td:nth-child(4)", "#imp-notes", "#toast"]
    problems = walk.problems(page, areas)
    assert not problems, problems

    # 3. The System page's words (profile, volumes, rounds, isolation, nodes).
    system = [".system dl dd", ".volume .vol-head", ".volume [data-role]",
              "[data-count] td:first-child", "#sys-nodes td:nth-child(2)"]
    problems = walk.problems(page, system)
    assert not problems, problems
    shoot(page, "zh-walk-system")

    # 4. A retried run's timeline.
    deadline = time.monotonic() + 60
    while http.get(f"/api/v1/runs/{run_id}").json()["status"] not in ("failed",):
        assert time.monotonic() < deadline, "the retried run did not finish"
        time.sleep(0.5)
    page.goto(f"/#/runs/{run_id}")
    timeline = page.locator(".ev-text")
    expect(timeline.filter(has_text="重试")).to_have_count(1)
    problems = walk.problems(page, [".status-line", "#run-reason", ".ev-text", ".ev-text + div",
                                    "table td"])
    assert not problems, problems
    shoot(page, "zh-walk-run")


def test_the_walk_catches_an_untranslated_code(page: Page, appliance: Appliance) -> None:
    """The self-check: with one code's 中文 set to its English (an untranslated code),
    the same check fails on the refusal it says."""
    sign_in(page)
    _zh(page)
    mods = page.evaluate(_MODULES, ["core", "i18n"])
    walk = Walk(_catalogue(page, mods["i18n"]))
    method, path, body = REFUSALS[4]  # an apprise URL that is none
    walk.heard(appliance.http.request(method, "/api/v1" + path, json=body).json()["message"])
    # The refusal names both its code and the picker's field rule: both untranslated.
    page.evaluate("async (u) => { const m = await import(u);"
                  " for (const k of ['err.BAD_APPRISE_URL', 'code.NOT_APPRISE_URL'])"
                  " m.STRINGS.zh[k] = m.STRINGS.en[k]; }",
                  mods["i18n"])
    page.evaluate(_SHOW, [mods["core"], method, path, body])
    problems = walk.problems(page, ["#toast"])
    assert problems and "English" in problems[0], problems
