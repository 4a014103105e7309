"""System → Import: a QingLong backup's report in the panel, a confirmation that counts
what Apply will do, then what was done — in English and 中文 (issue 38)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from .conftest import FAST, shoot, sign_in, sign_in_at
from _appliance import Appliance
from support import free_port

BACKUP = Path(__file__).resolve().parents[1] / "fixtures" / "qinglong" / "2.21.0-backup.tgz"


def test_the_report_says_kinds_and_outcomes_in_chinese(page: Page, appliance: Appliance,
                                                      tmp_path: Path) -> None:
    sign_in(page)
    page.goto("/#/system")
    page.get_by_role("button", name="中文").click()
    system = page.locator(".system")
    expect(system).to_contain_text("启动时")  # the rounds' kinds, not the server's words
    expect(system).not_to_contain_text(re.compile(r"\b(periodic|startup)\b"))
    card = page.locator("#sys-import")
    check = card.get_by_role("button", name="检查")
    expect(check).to_be_disabled()  # nothing chosen yet: nothing to check
    card.locator("#imp-file").set_input_files(str(BACKUP))
    expect(check).to_be_enabled()
    check.click()
    expect(card.locator("tr", has_text="Hello Python")).to_contain_text("将新建")
    rows = card.locator("tbody tr")
    assert rows.count() > 5
    for i in range(rows.count()):
        for cell in (0, 1):  # kind and outcome: words of the panel, never the server's
            said = rows.nth(i).locator("td").nth(cell).inner_text()
            assert not re.search(r"[A-Za-z]{3,}", said), (i, cell, said)
    for th in card.locator("th").all():  # a header on one line, not broken mid-word
        box = th.bounding_box()
        assert box is not None and box["height"] < 40, th.inner_text()
    shoot(page, "import-report-zh")


def test_check_a_backup_then_apply_it(page: Page, appliance: Appliance,
                                      tmp_path: Path) -> None:
    sign_in(page)
    page.goto("/#/system")
    card = page.locator("#sys-import")
    expect(card.get_by_role("heading", name="Import from QingLong")).to_be_visible()
    junk = tmp_path / "x.tgz"
    junk.write_bytes(b"junk")
    card.locator("#imp-file").set_input_files(str(junk))
    card.get_by_role("button", name="Check").click()
    toast = page.locator("#toast")
    expect(toast).to_contain_text("the uploaded file is neither")
    assert "/" not in toast.inner_text()  # no server path
    card.locator("#imp-file").set_input_files(str(BACKUP))
    card.get_by_role("button", name="Check").click()
    hello = card.locator("tr", has_text="Hello Python")
    expect(hello).to_contain_text("will be created")
    expect(card.locator("tr", has_text="Legacy repo pull")).to_contain_text("skipped")
    shoot(page, "import-report-en")
    card.get_by_role("button", name="Apply").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text(re.compile(r"\d+ will be created, \d+ updated, \d+ skipped"))
    dialog.locator("[data-action=cancel]").click()  # nothing happens
    expect(card.locator("#imp-result")).to_have_count(0)
    card.get_by_role("button", name="Apply").click()
    dialog.locator("[data-action=confirm]").click()
    result = card.locator("#imp-result")
    expect(result).to_contain_text(re.compile(r"Imported: [1-9]\d* created"))
    # What is left for the user: no conflict here, but skipped items to finish by hand
    # (the backup's linux package, its SSH subscription…), marked in the report.
    expect(result).to_contain_text("Nothing is left to decide.")
    marked = card.locator("tr[data-by-hand]").count()
    assert marked > 0
    expect(result).to_contain_text(f"{marked} skipped items are yours to finish by hand")
    expect(hello).to_contain_text("created")
    expect(card.get_by_role("button", name="Apply")).to_have_count(0)  # the applied report
    shoot(page, "import-applied-en")
    page.goto("/#/tasks")
    expect(page.get_by_text("Hello Python").first).to_be_visible()


@pytest.fixture
def own(tmp_path: Path) -> Iterator[Appliance]:
    app = Appliance(tmp_path / "state", free_port(), **FAST)
    try:
        app.start(timeout=60)
        yield app
    finally:
        app.stop()


def test_each_conflict_gets_its_own_choice(page: Page, own: Appliance) -> None:
    """Three scripts of the backup differ from qledge's: one row each with a select;
    the default for all fills them, one is changed by hand; the confirmation counts the
    choices; the result says what was done and that nothing is left to decide."""
    scripts = own.state / "work" / "scripts"
    scripts.mkdir(parents=True, exist_ok=True)
    mine = {"hello.py": "print('mine')\n", "greet.js": "console.log('mine')\n",
            "backup.sh": "echo mine\n"}
    for name, text in mine.items():
        (scripts / name).write_text(text)
    sign_in_at(page, own)
    page.goto(f"http://127.0.0.1:{own.port}/#/system")
    page.get_by_role("button", name="中文").click()
    card = page.locator("#sys-import")
    card.locator("#imp-file").set_input_files(str(BACKUP))
    card.get_by_role("button", name="检查").click()
    rows = card.locator("tr[data-action=conflict]")
    expect(rows).to_have_count(3)
    expect(rows.first).to_contain_text("qledge 中同一位置有另一个文件")  # the reason, in 中文
    card.locator("#imp-default").select_option("skip")  # the default for every conflict
    for select in card.locator("select[data-choice]").all():
        expect(select).to_have_value("skip")
    card.locator("select[data-choice='script:hello.py']").select_option("rename")
    card.locator("select[data-choice='script:greet.js']").select_option("replace")
    shoot(page, "import-conflicts-zh")
    card.get_by_role("button", name="导入").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("1 项两者都保留（改名），1 项替换，1 项保留原样，0 项暂不处理")
    dialog.locator("[data-action=confirm]").click()
    result = card.locator("#imp-result")
    expect(result).to_contain_text("没有需要决定的了")
    assert (scripts / "hello.py").read_text() == mine["hello.py"]
    assert (scripts / "hello.qinglong.py").exists()  # renamed: both kept
    assert (scripts / "greet.js").read_text() != mine["greet.js"]  # replaced
    assert (scripts / "backup.sh").read_text() == mine["backup.sh"]  # skipped: kept
    shoot(page, "import-choices-applied-zh")
