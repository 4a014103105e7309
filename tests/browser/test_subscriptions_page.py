"""The subscriptions page in a real browser against the real appliance: create with a
field error shown under its field, the secret never shown back, Pull now leading to
the run, the last pull's result in the list, and the Chinese labels."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from _git_server import GitRepo, GitServer

from .conftest import sign_in
from _appliance import Appliance

pytestmark = pytest.mark.slow
SECRET = "tok-9f2c41e8"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[GitServer]:
    repo = GitRepo(tmp_path / "repo")
    repo.write("daily.js", "// cron: 15 8 * * *\nconst $ = new Env('daily');\n")
    repo.commit()
    srv = GitServer({"repo": repo.path}, auth=("u", SECRET))
    yield srv
    srv.close()


def test_create_pull_and_see_the_result(page: Page, appliance: Appliance,
                                        served: GitServer) -> None:
    sign_in(page)
    page.get_by_role("navigation").get_by_role("link", name="Subscriptions").click()
    page.get_by_role("button", name="New subscription").click()
    page.get_by_label("Name", exact=True).fill("mine")
    page.get_by_label("URL").fill(served.url("repo"))
    page.get_by_label("Branch").fill("main")
    page.get_by_label("Alias (folder)").fill("pagesub")
    page.get_by_label("Pull schedule").fill("99 * * * *")
    page.get_by_label("Username").fill("u")
    page.get_by_label("Password or token").fill(SECRET)
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#s-schedule-err")).to_be_visible()
    schedule = page.get_by_label("Pull schedule")
    expect(schedule).to_have_attribute("aria-invalid", "true")
    expect(schedule).to_have_attribute("aria-describedby", "s-schedule-err")
    expect(schedule).to_be_focused()
    page.get_by_label("Pull schedule").fill("@every 360m")  # an interval, stored as 6h
    page.get_by_role("button", name="Save").click()
    row = page.locator("tr[data-sub='pagesub']")
    expect(row).to_contain_text("@every 6h")
    expect(page.locator("body")).not_to_contain_text(SECRET)

    row.get_by_role("button", name="Pull now — mine").click()
    expect(page.locator("main")).to_contain_text("succeeded", timeout=60_000)
    page.get_by_role("navigation").get_by_role("link", name="Subscriptions").click()
    expect(row).to_contain_text("succeeded")
    expect(row).to_contain_text("+1")
    row.get_by_role("button", name="Edit — mine").click()
    expect(page.get_by_label("Password or token")).to_have_value("")
    expect(page.get_by_label("Alias (folder)")).to_be_disabled()
    page.get_by_role("button", name="中文").click()
    expect(page.get_by_role("navigation").get_by_role("link", name="订阅")).to_be_visible()
    page.get_by_role("button", name="English").click()
