"""The Scripts page in a real browser against the real supervised appliance: create,
edit, save, history restore, "Create task from this script", upload, rename, delete,
and refusals (a traversal, a planted symlink) shown as readable errors."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from .conftest import sign_in
from _appliance import Appliance

pytestmark = pytest.mark.slow

V1 = "// cron: 5 9 * * *\nconst $ = new Env('签到');\nconsole.log('v1');\n"
V2 = "// cron: 5 9 * * *\nconst $ = new Env('签到');\nconsole.log('v2');\n"


def scripts_dir(appliance: Appliance) -> Path:
    return appliance.state / "work" / "scripts"


def open_scripts(page: Page) -> None:
    sign_in(page)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Scripts").click()
    expect(page.get_by_role("heading", name="Scripts", level=1)).to_be_visible()


def test_create_edit_save_and_restore_from_history(page: Page, appliance: Appliance) -> None:
    root = scripts_dir(appliance)
    open_scripts(page)

    # A traversal typed as the new file's path is refused, with the API's reason, in the
    # dialog; nothing is written outside the scripts folder.
    page.get_by_role("button", name="New file").click()
    dialog = page.get_by_role("dialog", name="New file")
    dialog.get_by_label("Path in the scripts folder").fill("../outside.js")
    dialog.get_by_role("button", name="Create").click()
    expect(dialog.get_by_role("alert")).to_have_text("path must not contain '..'")
    expect(dialog.get_by_label("Path in the scripts folder")).to_have_attribute(
        "aria-invalid", "true")
    assert not (root.parent / "outside.js").exists()
    dialog.get_by_label("Path in the scripts folder").fill("jd/sign.js")
    dialog.get_by_role("button", name="Create").click()
    expect(page).to_have_url(re.compile(r"#/scripts/jd%2Fsign\.js$"))
    assert (root / "jd" / "sign.js").read_text() == ""

    editor = page.get_by_label("Content of jd/sign.js")
    expect(editor).to_have_value("")
    editor.fill(V1)
    expect(page.locator(".code-wrap .gutter")).to_have_text("1\n2\n3\n4")
    expect(page.get_by_text("Unsaved changes")).to_be_visible()
    # leaving through the tree with unsaved edits asks first; Cancel keeps them
    page.get_by_role("navigation", name="Scripts folder").get_by_role(
        "link", name="scripts/").click()
    leave = page.get_by_role("dialog", name="Discard unsaved changes?")
    expect(leave).to_contain_text("jd/sign.js")
    leave.get_by_role("button", name="Cancel").click()
    expect(editor).to_have_value(V1)
    expect(page).to_have_url(re.compile(r"#/scripts/jd%2Fsign\.js$"))
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator("[data-role='editor'] [aria-live]")).to_contain_text("Saved")
    assert (root / "jd" / "sign.js").read_text() == V1
    editor.fill(V2)
    editor.press("Control+s")  # the keyboard shortcut saves too
    expect(page.locator("[data-role='editor'] [aria-live]")).to_contain_text("Saved")
    assert (root / "jd" / "sign.js").read_text() == V2
    # the tree shows the new folder unfolded and the file as the current page
    tree = page.get_by_role("navigation", name="Scripts folder")
    expect(tree.get_by_role("link", name="sign.js")).to_have_attribute("aria-current", "page")

    # History: the contents the two saves replaced, newest first; show one, restore it.
    page.get_by_role("button", name="History").click()
    versions = page.locator("[data-role='history'] ol.versions li")
    expect(versions).to_have_count(2)
    versions.nth(0).get_by_role("button", name=re.compile("^Show")).click()
    expect(page.locator("pre.preview-version")).to_have_text(V1)
    versions.nth(0).get_by_role("button", name=re.compile("^Restore")).click()
    confirm = page.get_by_role("dialog", name="Restore this version?")
    confirm.get_by_role("button", name="Restore").click()
    expect(page.get_by_label("Content of jd/sign.js")).to_have_value(V1)
    assert (root / "jd" / "sign.js").read_text() == V1
    r = appliance.api("GET", "/scripts/history", params={"path": "jd/sign.js"})
    assert len(r.json()["items"]) == 3  # the restore kept V2 as a version in turn

    # "Create task from this script": the task editor, prefilled from the header.
    page.get_by_role("button", name="Create task from this script").click()
    expect(page.get_by_role("heading", name="New task", level=1)).to_be_visible()
    expect(page.get_by_label("Name", exact=True)).to_have_value("签到")
    expect(page.get_by_label("Command")).to_have_value("task jd/sign.js")
    expect(page.get_by_label("Cron schedule")).to_have_value("5 9 * * *")
    expect(page.locator(".fire-times li")).to_have_count(5)


def test_refusals_are_shown_as_errors(page: Page, appliance: Appliance) -> None:
    root = scripts_dir(appliance)
    secret = appliance.state / "data" / "secrets"
    os.symlink(secret, root / "secrets-link")
    try:
        open_scripts(page)
        tree = page.get_by_role("navigation", name="Scripts folder")
        expect(tree).to_contain_text("secrets-link (symlink: not opened by the panel)")
        expect(tree.get_by_role("link", name="secrets-link")).to_have_count(0)
        # a traversal and a symlink typed into the address bar: readable errors, no content
        page.goto("/#/scripts/" + "..%2F..%2Fdata%2Fsecrets%2Fadmin.token")
        alert = page.locator("#main .script-main [role='alert']")
        expect(alert).to_have_text("path must not contain '..'")
        page.goto("/#/scripts/secrets-link%2Fadmin.token")
        expect(alert).to_have_text("secrets-link is a symlink: symlinks are not followed")
        assert page.get_by_label(re.compile("^Content of")).count() == 0
    finally:
        (root / "secrets-link").unlink()


def test_upload_rename_and_delete(page: Page, appliance: Appliance, tmp_path: Path) -> None:
    root = scripts_dir(appliance)
    (root / "tools").mkdir(exist_ok=True)
    (root / "tools" / "keep.sh").write_text("echo keep\n")
    open_scripts(page)
    page.get_by_role("navigation", name="Scripts folder").get_by_role(
        "link", name="tools/").click()
    expect(page.locator("[data-role='folder'] h2")).to_have_text("tools/")
    upload = tmp_path / "bot.py"
    upload.write_text("print('hi')\n")
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Upload").click()
    chooser.value.set_files(str(upload))
    expect(page).to_have_url(re.compile(r"#/scripts/tools%2Fbot\.py$"))
    expect(page.get_by_label("Content of tools/bot.py")).to_have_value("print('hi')\n")
    assert (root / "tools" / "bot.py").read_text() == "print('hi')\n"

    # uploading the same name again asks before replacing
    upload.write_text("print('again')\n")
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Upload").click()
    chooser.value.set_files(str(upload))
    page.get_by_role("dialog", name="Replace the file?").get_by_role(
        "button", name="Replace").click()
    expect(page.get_by_label("Content of tools/bot.py")).to_have_value("print('again')\n")

    page.get_by_role("button", name="Rename / move").click()
    dialog = page.get_by_role("dialog", name="Rename or move")
    dialog.get_by_label("Path in the scripts folder").fill("tools/keep.sh")
    dialog.get_by_role("button", name="Rename / move").click()
    expect(dialog.get_by_role("alert")).to_have_text("tools/keep.sh already exists")
    dialog.get_by_label("Path in the scripts folder").fill("bots/bot.py")
    dialog.get_by_role("button", name="Rename / move").click()
    expect(page).to_have_url(re.compile(r"#/scripts/bots%2Fbot\.py$"))
    assert not (root / "tools" / "bot.py").exists()
    assert (root / "bots" / "bot.py").read_text() == "print('again')\n"

    page.get_by_role("button", name="Delete").click()
    page.get_by_role("dialog", name="Delete?").get_by_role("button", name="Delete").click()
    expect(page).to_have_url(re.compile(r"#/scripts/bots$"))
    expect(page.locator("[data-role='folder']")).to_contain_text("This folder is empty.")
    assert not (root / "bots" / "bot.py").exists()


def test_run_saves_the_edits_then_shows_the_live_log_and_cancels(
        page: Page, appliance: Appliance) -> None:
    root = scripts_dir(appliance)
    (root / "debug.sh").write_text("echo old-content\n")
    open_scripts(page)
    page.get_by_role("navigation", name="Scripts folder").get_by_role(
        "link", name="debug.sh").click()
    editor = page.get_by_label("Content of debug.sh")
    expect(editor).to_have_value("echo old-content\n")
    new = "echo fresh-output\nsleep 300\n"
    editor.fill(new)
    expect(page.get_by_text("Unsaved changes")).to_be_visible()

    # Run saves what the editor shows first, then shows the live log beside the editor.
    page.get_by_role("button", name="Run", exact=True).click()
    debug = page.locator('[data-role="debug-run"]')
    expect(debug.locator("#log")).to_contain_text("fresh-output")
    expect(page).to_have_url(re.compile(r"#/scripts/debug\.sh$"))
    assert (root / "debug.sh").read_text() == new
    expect(debug.locator("#log")).not_to_contain_text("old-content")
    status = debug.locator('[data-role="debug-status"] .badge')
    expect(status).to_have_attribute("data-status", "running")
    run_id = debug.get_attribute("data-run-id")
    expect(debug.get_by_role("link", name="Open the run page")).to_have_attribute(
        "href", f"#/runs/{run_id}")

    debug.get_by_role("button", name="Cancel run").click()
    expect(status).to_have_attribute("data-status", "cancelled", timeout=60_000)
    run = appliance.api("GET", f"/runs/{run_id}").json()
    task = appliance.api("GET", f"/tasks/{run['task_id']}").json()
    assert (run["status"], task["command"], task["labels"], task["hidden"]) == (
        "cancelled", "task debug.sh now", ["debug"], True)
