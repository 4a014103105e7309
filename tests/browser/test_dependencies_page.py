"""The dependencies page in a real browser against the real appliance: a refused spec
shown under its field, an install that opens its run's live log, the installed version
in the list, remove and forget, and the Chinese labels."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from _pkg_index import PackageServer, make_wheel

from .conftest import FAST, sign_in_at
from _appliance import Appliance
from support import free_port

pytestmark = pytest.mark.slow


@pytest.fixture
def own(tmp_path: Path) -> Iterator[Appliance]:
    srv = PackageServer()
    srv.add_wheel("tinypkg", make_wheel(tmp_path / "w", "tinypkg", "1.0.0"))
    app = Appliance(tmp_path / "state", free_port(), pip_index_url=srv.index_url(), **FAST)
    try:
        app.start(timeout=60)
        yield app
    finally:
        app.stop()
        srv.close()


def test_install_remove_and_forget_from_the_panel(page: Page, own: Appliance) -> None:
    sign_in_at(page, own)
    nav = page.get_by_role("navigation")
    nav.get_by_role("link", name="Dependencies").click()
    expect(page.get_by_role("heading", name="Dependencies", level=1)).to_be_visible()
    expect(page.locator("main")).to_contain_text("No dependencies yet.")
    specs = page.get_by_label("Packages, one per line")
    specs.fill("--index-url=http://elsewhere/simple")
    page.get_by_role("button", name="Install").click()
    expect(page.locator("#d-specs-err")).to_contain_text("looks like an option")
    expect(specs).to_have_attribute("aria-invalid", "true")
    expect(specs).to_be_focused()

    specs.fill("tinypkg==1.0.0")
    page.get_by_role("button", name="Install").click()
    expect(page).to_have_url(re.compile(r"#/runs/"))  # the run, its live log
    expect(page.locator("#log")).to_contain_text("Successfully installed tinypkg-1.0.0",
                                                 timeout=60_000)
    expect(page.locator("#run-status")).to_contain_text("succeeded", timeout=60_000)

    nav.get_by_role("link", name="Dependencies").click()
    row = page.locator("tr[data-dep='tinypkg']")
    expect(row).to_contain_text("installed")
    expect(row).to_contain_text("1.0.0")
    expect(row).to_contain_text("tinypkg==1.0.0")
    row.get_by_role("button", name="Remove — tinypkg").click()
    expect(page.locator("#run-status")).to_contain_text("succeeded", timeout=60_000)
    nav.get_by_role("link", name="Dependencies").click()
    expect(row).to_contain_text("removed")
    page.get_by_role("button", name="中文").click()
    expect(nav.get_by_role("link", name="依赖")).to_be_visible()
    expect(row).to_contain_text("已移除")
    page.get_by_role("button", name="English").click()
    row.get_by_role("button", name="Delete — tinypkg").click()
    expect(page.locator("main")).to_contain_text("No dependencies yet.")
