"""The scripts editor in a real browser against the real supervised appliance: the leave
guard on every navigation, Tab indenting, highlighting, find in file, and the debug run
beside the editor that leaves no task behind (docs/panel.md, docs/scripts.md#run)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from .conftest import PHONE, shoot, sign_in
from _appliance import Appliance

pytestmark = pytest.mark.slow

SCRIPT = ("# cron: 5 9 * * *\nimport os\n\n\ndef main():\n    name = 'checkin'  # say hi\n"
          "    print(name, 42)\n    print('done')\n\n\nmain()\n")


def put_script(app: Appliance, path: str, content: str) -> None:
    target = app.state / "work" / "scripts" / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content)


def open_file(page: Page, path: str) -> None:
    sign_in(page)
    page.goto("/#/scripts/" + path.replace("/", "%2F"))
    expect(page.get_by_label(f"Content of {path}")).to_be_visible()


def test_leaving_an_edited_script_by_the_top_navigation_asks_first(
        page: Page, appliance: Appliance) -> None:
    put_script(appliance, "demo/leave.py", "print(1)\n")
    open_file(page, "demo/leave.py")
    editor = page.get_by_label("Content of demo/leave.py")
    editor.fill("print(2)\n")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Envs").click()
    leave = page.get_by_role("dialog", name="Discard unsaved changes?")
    expect(leave).to_be_visible()
    leave.get_by_role("button", name="Cancel").click()
    # still here, edits kept, and the address is the script's again
    expect(editor).to_have_value("print(2)\n")
    expect(page).to_have_url(re.compile(r"#/scripts/demo%2Fleave\.py$"))
    # the language switch asks too
    page.locator('[data-action="lang"]').click()
    expect(leave).to_be_visible()
    leave.get_by_role("button", name="Cancel").click()
    expect(page.get_by_role("heading", name="Scripts", level=1)).to_be_visible()
    # Discard goes where the link pointed, and nothing was saved
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Envs").click()
    page.get_by_role("dialog", name="Discard unsaved changes?").get_by_role(
        "button", name="Discard").click()
    expect(page.get_by_role("heading", name="Environment variables", level=1)).to_be_visible()
    assert (appliance.state / "work" / "scripts" / "demo" / "leave.py").read_text() == "print(1)\n"
    # once saved, leaving asks nothing
    page.go_back()
    expect(editor).to_have_value("print(1)\n")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Runs").click()
    expect(page.get_by_role("heading", name="Runs", level=1)).to_be_visible()


def test_tab_indents_highlighting_and_find(page: Page, appliance: Appliance) -> None:
    put_script(appliance, "demo/edit.py", SCRIPT)
    open_file(page, "demo/edit.py")
    editor = page.get_by_label("Content of demo/edit.py")
    # highlighting: text-only spans of each kind under the textarea, same text
    hl = page.locator("pre.hl")
    expect(hl.locator("span.t-k", has_text="def")).to_have_count(1)
    expect(hl.locator("span.t-c", has_text="# say hi")).to_have_count(1)
    expect(hl.locator("span.t-s", has_text="'checkin'")).to_have_count(1)
    expect(hl.locator("span.t-n", has_text="42")).to_have_count(1)
    assert hl.text_content() == SCRIPT + "\n"

    # Tab indents the lines of a selection, Shift+Tab outdents them; focus stays
    editor.focus()
    editor.evaluate("(a) => a.setSelectionRange(a.value.indexOf('print(name'),"
                    " a.value.indexOf(\"'done')\"))")
    page.keyboard.press("Tab")
    expect(editor).to_have_value(SCRIPT.replace("    print(", "        print("))
    expect(editor).to_be_focused()
    page.keyboard.press("Shift+Tab")
    expect(editor).to_have_value(SCRIPT)
    # Tab at a caret inserts the indent; Esc then Tab leaves the editor
    editor.evaluate("(a) => a.setSelectionRange(0, 0)")
    page.keyboard.press("Tab")
    expect(editor).to_have_value("    " + SCRIPT)
    page.keyboard.press("Escape")
    page.keyboard.press("Tab")
    expect(editor).not_to_be_focused()
    expect(page.get_by_text("Unsaved changes")).to_be_visible()

    # find: Ctrl+F opens the bar; matches counted and marked; Enter goes to the next
    editor.focus()
    page.keyboard.press("Control+f")
    find = page.get_by_label("Find in file")
    expect(find).to_be_focused()
    find.fill("print")
    expect(page.locator('[data-role="find-count"]')).to_have_text("1 of 2")
    expect(hl.locator("mark")).to_have_count(2)
    expect(hl.locator("mark.cur")).to_have_count(1)
    find.press("Enter")
    expect(page.locator('[data-role="find-count"]')).to_have_text("2 of 2")
    assert editor.evaluate("(a) => a.value.slice(a.selectionStart, a.selectionEnd)") == "print"
    find.fill("nothing-like-this")
    expect(page.locator('[data-role="find-count"]')).to_have_text("0 of 0")
    find.press("Escape")
    expect(hl.locator("mark")).to_have_count(0)
    expect(editor).to_be_focused()


def test_debug_run_shows_its_log_beside_the_editor_and_leaves_no_task(
        page: Page, appliance: Appliance) -> None:
    put_script(appliance, "demo/checkin.py", SCRIPT)
    before = appliance.api("GET", "/tasks").json()["items"]
    open_file(page, "demo/checkin.py")
    page.get_by_role("button", name="Run", exact=True).click()
    panel = page.locator('[data-role="debug-run"]')
    expect(panel).to_be_visible()
    expect(panel.locator("pre.log")).to_contain_text("checkin 42\ndone")
    expect(panel.locator('[data-role="debug-status"]')).to_have_text(
        re.compile(r"succeeded\s+exit 0"))
    expect(page).to_have_url(re.compile(r"#/scripts/demo%2Fcheckin\.py$"))
    # beside the editor on a desktop
    ed = page.locator(".code-wrap").bounding_box()
    box = panel.bounding_box()
    assert ed and box and box["x"] > ed["x"] + ed["width"] - 1
    # no task in the API's list nor in the Tasks page
    assert appliance.api("GET", "/tasks").json()["items"] == before
    shoot(page, "scripts-debug-run-en")
    page.set_viewport_size(PHONE)
    box = panel.bounding_box()
    ed = page.locator(".code-wrap").bounding_box()
    assert ed and box and box["y"] > ed["y"] + ed["height"] - 1  # below on a phone
    page.locator('[data-action="lang"]').click()
    expect(page.get_by_role("heading", name="脚本", level=1)).to_be_visible()
    page.get_by_role("button", name="运行", exact=True).click()
    expect(panel.locator("pre.log")).to_contain_text("done")
    shoot(page, "scripts-debug-run-zh")
    page.locator('[data-action="lang"]').click()
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Tasks").click()
    expect(page.get_by_role("heading", name="Tasks", level=1)).to_be_visible()
    expect(page.get_by_text("task demo/checkin.py")).to_have_count(0)


def test_phone_editor_first_tree_in_a_drawer_and_compact_nav(
        page: Page, appliance: Appliance) -> None:
    put_script(appliance, "demo/phone.py", SCRIPT)
    page.set_viewport_size(PHONE)
    open_file(page, "demo/phone.py")
    menu = page.get_by_role("button", name="Menu")
    nav = page.get_by_role("navigation", name="Main")
    expect(menu).to_have_attribute("aria-expanded", "false")
    expect(nav).to_be_hidden()
    header = page.locator("header.top").bounding_box()
    assert header and header["height"] < 70, header
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    page.screenshot(path=str(Path(_shots()) / "phone-nav-closed-en.png"))
    menu.focus()
    page.keyboard.press("Enter")
    expect(menu).to_have_attribute("aria-expanded", "true")
    expect(nav).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    page.screenshot(path=str(Path(_shots()) / "phone-nav-open-en.png"))
    menu.click()
    expect(nav).to_be_hidden()
    # the editor comes before the tree, which is folded behind "Files"
    files = page.get_by_role("button", name="Files")
    expect(files).to_have_attribute("aria-expanded", "false")
    tree = page.locator("#tree-body")
    expect(tree).to_be_hidden()
    editor = page.locator(".code-wrap").bounding_box()
    toggle = files.bounding_box()
    assert editor and toggle and toggle["y"] > editor["y"]
    files.click()
    expect(tree).to_be_visible()
    expect(tree.get_by_role("link", name="phone.py")).to_be_visible()
    page.locator('[data-action="lang"]').click()
    page.set_viewport_size(PHONE)
    page.screenshot(path=str(Path(_shots()) / "phone-nav-closed-zh.png"))
    page.get_by_role("button", name="菜单").click()
    page.screenshot(path=str(Path(_shots()) / "phone-nav-open-zh.png"))
    page.locator('[data-action="lang"]').click()


def _shots() -> str:
    from .conftest import SHOTS
    SHOTS.mkdir(parents=True, exist_ok=True)
    return str(SHOTS)
