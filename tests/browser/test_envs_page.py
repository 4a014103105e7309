"""The Envs page in a real browser against the real supervised appliance: a pasted
multi-line value kept byte for byte, long values that never squeeze the columns,
search, bulk actions (asked first), ordering, import and export in QingLong's shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from .conftest import shoot, sign_in
from _appliance import Appliance

pytestmark = pytest.mark.slow

LONG = "pt_key=" + "A1b2C3d4" * 105 + ";"  # 848 characters, like a real cookie


def clear_envs(app: Appliance) -> None:
    for env in app.api("GET", "/envs").json()["items"]:
        assert app.api("DELETE", f"/envs/{env['id']}").status_code == 204


def open_envs(page: Page) -> None:
    sign_in(page)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Envs").click()
    expect(page.get_by_role("heading", name="Environment variables", level=1)).to_be_visible()


def test_a_pasted_multi_line_value_round_trips_byte_for_byte(
        page: Page, appliance: Appliance) -> None:
    clear_envs(appliance)
    open_envs(page)
    page.get_by_role("button", name="New variable").click()
    page.get_by_label("Name", exact=True).fill("JD_COOKIE")
    value = page.get_by_label("Value", exact=True)
    value.focus()
    # a paste, as the clipboard gives it: CR LF kept
    page.evaluate("""() => {
      const dt = new DataTransfer();
      dt.setData('text/plain', 'a\\nb\\r\\nc');
      document.getElementById('e-value').dispatchEvent(
        new ClipboardEvent('paste', { clipboardData: dt, bubbles: true, cancelable: true }));
    }""")
    page.get_by_role("button", name="Add variable").click()
    expect(page.locator('tr[data-env-name="JD_COOKIE"]')).to_be_visible()
    (env,) = appliance.api("GET", "/envs").json()["items"]
    assert env["value"] == "a\nb\r\nc"
    # an edit of another line keeps the CR LF the textarea cannot show
    page.locator('tr[data-env-name="JD_COOKIE"]').get_by_role("button", name="Edit").click()
    value.press("Control+End")
    value.type("d")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("button", name="Save")).to_have_count(0)  # the form closed
    assert appliance.api("GET", f"/envs/{env['id']}").json()["value"] == "a\nb\r\ncd"
    # a reveal shows it as it is
    page.get_by_role("button", name="Reveal JD_COOKIE").click()
    assert page.locator("pre.env-full").text_content() == "a\nb\r\ncd"


def test_long_values_search_bulk_order_import_export(
        page: Page, appliance: Appliance, tmp_path: Path) -> None:
    clear_envs(appliance)
    for name, value, remarks in [("JD_COOKIE", LONG, "account 1"), ("JD_COOKIE", "pt_key=2;",
                                 "account 2"), ("TG_BOT_TOKEN", "123:abc", "bot"),
                                 ("PUSH_KEY", "SCT1", "")]:
        r = appliance.api("POST", "/envs", json={"name": name, "value": value,
                                                 "remarks": remarks})
        assert r.status_code == 201, r.text
    open_envs(page)
    rows = page.locator("table.env-grid tbody tr[data-env-id]")
    expect(rows).to_have_count(4)
    # duplicates: how they are joined is said
    expect(page.locator('tr[data-env-name="JD_COOKIE"]').first).to_contain_text(
        "(×2, joined with &)")
    # revealing an 848-character value: a wrapping row of its own; the name never wraps
    first = rows.first
    name_h = first.locator(".env-name code").bounding_box()
    first.get_by_role("button", name="Reveal JD_COOKIE").click()
    full = page.locator("pre.env-full")
    expect(full).to_have_text(LONG)
    after = first.locator(".env-name code").bounding_box()
    assert name_h and after and after["height"] <= name_h["height"] + 1
    table = page.locator("table.env-grid").bounding_box()
    card = page.locator("table.env-grid").locator("..").bounding_box()
    assert table and card and table["width"] <= card["width"]
    shoot(page, "envs-en")
    page.locator('[data-action="lang"]').click()
    expect(page.get_by_role("heading", name="环境变量", level=1)).to_be_visible()
    shoot(page, "envs-zh")
    page.locator('[data-action="lang"]').click()
    expect(page.get_by_role("heading", name="Environment variables", level=1)).to_be_visible()

    # search filters by name, value or remarks
    search = page.get_by_label("Search name, value or remarks")
    search.fill("bot")
    expect(rows).to_have_count(1)
    search.fill("jd_")
    expect(rows).to_have_count(2)
    search.fill("")

    # order: Move down the first; persisted (and the joined order with it)
    page.get_by_role("button", name="JD_COOKIE Move down").first.click()
    expect(rows.nth(1)).to_contain_text("account 1")
    listed = appliance.api("GET", "/envs").json()["items"]
    assert [e["remarks"] for e in listed][:2] == ["account 2", "account 1"]

    # bulk: disable two, asked first; Cancel changes nothing
    for name in ("TG_BOT_TOKEN", "PUSH_KEY"):
        page.get_by_label(f"Select {name}").check()
    expect(page.get_by_text("2 selected")).to_be_visible()
    page.get_by_role("button", name="Disable selected").click()
    ask = page.get_by_role("dialog", name="Disable 2 variables?")
    ask.get_by_role("button", name="Cancel").click()
    assert all(e["enabled"] for e in appliance.api("GET", "/envs").json()["items"])
    page.get_by_role("button", name="Disable selected").click()
    ask.get_by_role("button", name="Disable selected").click()
    expect(page.locator('tr[data-env-name="PUSH_KEY"]')).to_contain_text("disabled")
    states = {e["name"]: e["enabled"] for e in appliance.api("GET", "/envs").json()["items"]}
    assert states == {"JD_COOKIE": True, "TG_BOT_TOKEN": False, "PUSH_KEY": False}

    # export: QingLong's shape, every env (none selected)
    with page.expect_download() as got:
        page.get_by_role("button", name="Export").click()
    exported = json.loads(Path(got.value.path()).read_text())
    assert exported[-1] == {"name": "PUSH_KEY", "value": "SCT1", "remarks": "", "status": 1}
    assert {e["value"] for e in exported} >= {LONG, "pt_key=2;"}

    # bulk delete all, then import the export back; a malformed file is refused first
    for cb in page.locator('[data-role="pick"]').all():
        cb.check()
    page.get_by_role("button", name="Delete selected").click()
    page.get_by_role("dialog", name="Delete 4 variables?").get_by_role(
        "button", name="Delete selected").click()
    expect(page.get_by_text("No variables yet.")).to_be_visible()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"name": "OK", "value": "1"}, {"name": "1BAD", "value": "x"}]))
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Import…").click()
    chooser.value.set_files(str(bad))
    expect(page.get_by_text(
        "Import refused: item 2: the name is missing or not a shell identifier")).to_be_visible()
    good = tmp_path / "envs.json"
    good.write_text(json.dumps([{**e, "id": i, "position": 4.5e15, "timestamp": "x"}
                                for i, e in enumerate(exported)]))
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Import…").click()
    chooser.value.set_files(str(good))
    preview = page.get_by_role("dialog", name="Import 4 variables?")
    expect(preview.locator('[data-role="import-preview"] li')).to_have_count(4)
    preview.get_by_role("button", name="Import", exact=True).click()
    expect(rows).to_have_count(4)
    again = appliance.api("GET", "/envs").json()["items"]
    assert [(e["name"], e["value"], e["remarks"], e["enabled"]) for e in again] == [
        (e["name"], e["value"], e["remarks"], e["status"] == 0) for e in exported]
