"""System → Import: a QingLong backup's report in the panel, then Apply."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from .conftest import sign_in
from _appliance import Appliance

BACKUP = Path(__file__).resolve().parents[1] / "fixtures" / "qinglong" / "2.21.0-backup.tgz"


def test_check_a_backup_then_apply_it(page: Page, appliance: Appliance) -> None:
    sign_in(page)
    page.goto("/#/system")
    card = page.locator("#sys-import")
    expect(card.get_by_role("heading", name="Import from QingLong")).to_be_visible()
    card.locator("#imp-file").set_input_files(str(BACKUP))
    card.get_by_role("button", name="Check").click()
    hello = card.locator("tr", has_text="Hello Python")
    expect(hello).to_contain_text("create")
    expect(card.locator("tr", has_text="Legacy repo pull")).to_contain_text("skip")
    card.get_by_role("button", name="Apply").click()
    expect(card.get_by_role("button", name="Apply")).to_have_count(0)  # the applied report
    page.goto("/#/tasks")
    expect(page.get_by_text("Hello Python").first).to_be_visible()
