"""System → Import: a QingLong backup's report in the panel, a confirmation that counts
what Apply will do, then what was done — in English and 中文 (issue 38)."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page, expect

from .conftest import shoot, sign_in
from _appliance import Appliance

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
    expect(hello).to_contain_text("created")
    expect(card.get_by_role("button", name="Apply")).to_have_count(0)  # the applied report
    shoot(page, "import-applied-en")
    page.goto("/#/tasks")
    expect(page.get_by_text("Hello Python").first).to_be_visible()
