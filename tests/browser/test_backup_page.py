"""System → Backup & restore (panel/backup.js, docs/backup.md): the download starts at once
with its size shown first, a damaged archive's refusal is shown in the panel's words (中文
here), and a good restore reports what it staged, after which the worker restarts with the
backup in place (issue 39)."""

from __future__ import annotations

import time
from pathlib import Path

from playwright.sync_api import Page, expect

from qledge import backup
from qledge.backup import crypto

from .conftest import api_task, shoot, sign_in
from _appliance import Appliance


def _archive(appliance: Appliance, target: Path) -> Path:
    with appliance.http.stream("GET", "/api/v1/backup") as resp:
        assert resp.status_code == 200
        with target.open("wb") as out:
            for chunk in resp.iter_bytes():
                out.write(chunk)
    return target


def test_the_download_starts_with_its_size_shown(page: Page, appliance: Appliance,
                                                 tmp_path: Path) -> None:
    sign_in(page)
    page.goto("/#/system")
    card = page.locator("#sys-backup")
    expect(card.get_by_role("heading", name="Backup & restore")).to_be_visible()
    expect(card.locator("#bk-size")).to_contain_text("before compression")
    expect(card.locator("#bk-size")).to_contain_text("database")
    card.get_by_label("with the run history").check()
    link = card.locator("#bk-download")
    expect(link).to_have_attribute("href", "/api/v1/backup?history=1")
    shoot(page, "backup-restore", full_page=False, at=card)  # and no sideways scroll on a phone
    with page.expect_download() as got:
        link.click()
    saved = tmp_path / "panel.tar.gz"
    got.value.save_as(saved)
    with saved.open("rb") as f:
        manifest = backup.verify(f)
    assert manifest.with_history is True


def test_a_passphrase_makes_the_download_an_encrypted_one(page: Page, appliance: Appliance,
                                                         tmp_path: Path) -> None:
    """With a passphrase the download is the form's POST (never the URL): too short is
    said in the page before anything is sent; a good one streams an archive that opens
    with it (中文, and a passphrase that is not ASCII)."""
    api_task(appliance, name="sealed", command="true", schedule=None)
    sign_in(page)
    page.goto("/#/system")
    page.get_by_role("button", name="中文").click()
    card = page.locator("#sys-backup")
    expect(card.locator("#bk-enc-help")).to_contain_text("Cookie")
    card.get_by_label("包含运行历史").check()
    card.get_by_label("加密用的密码短语（可选）").fill("短口令 abc")
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    card.locator("#bk-download").click()
    expect(card.locator("#bk-enc-error")).to_have_text("备份密码短语至少需要 8 个字符。")
    assert card.locator("#bk-enc-pass").get_attribute("aria-invalid") == "true"
    assert posts == []
    card.locator("#bk-enc-pass").fill("口令 correct horse")
    expect(card.locator("#bk-enc-error")).to_be_hidden()
    shoot(page, "backup-encrypted-zh", full_page=False, at=card)
    with page.expect_download() as got:
        card.locator("#bk-download").click()
    assert got.value.suggested_filename.endswith(".tar.gz.enc")
    base = str(appliance.http.base_url).rstrip("/")
    assert [u for u in posts if "/api/v1/backup" in u] == [base + "/api/v1/backup"]
    saved = tmp_path / "panel.tar.gz.enc"
    got.value.save_as(saved)
    assert page.url.endswith("/#/system")  # the download left the page where it was
    with saved.open("rb") as f:
        manifest = backup.verify(crypto.opened(f, "口令 correct horse".encode()))
    assert manifest.encrypted and manifest.with_history and not manifest.with_logs
    assert "correct horse" not in appliance.log_tail(400)  # nor in an access log's URL


def test_a_damaged_archive_is_refused_in_chinese(page: Page, appliance: Appliance,
                                                 tmp_path: Path) -> None:
    task = api_task(appliance, name="kept", command="true", schedule=None)
    good = _archive(appliance, tmp_path / "good.tar.gz").read_bytes()
    sign_in(page)
    page.goto("/#/system")
    page.get_by_role("button", name="中文").click()
    card = page.locator("#sys-backup")
    start = card.get_by_role("button", name="恢复备份")
    expect(start).to_be_disabled()
    card.locator("#bk-file").set_input_files(files=[{
        "name": "cut.tar.gz", "mimeType": "application/gzip", "buffer": good[: len(good) // 2]}])
    start.click()
    dialog = page.locator("dialog")
    expect(dialog).to_contain_text("cut.tar.gz")
    dialog.locator("[data-action=confirm]").click()
    error = card.locator("#bk-error")
    expect(error).to_contain_text("未做任何改动")
    assert error.get_attribute("data-code") in ("BACKUP_DAMAGED", "BACKUP_NO_MANIFEST")
    assert appliance.api("GET", f"/tasks/{task['id']}").status_code == 200


def test_a_good_restore_reports_success_and_restarts(page: Page, appliance: Appliance,
                                                     tmp_path: Path) -> None:
    task = api_task(appliance, name="in the backup", command="true", schedule=None)
    archive = _archive(appliance, tmp_path / "b.tar.gz")
    assert appliance.api("DELETE", f"/tasks/{task['id']}").status_code in (200, 204)
    old_pid = appliance.worker_pid()
    sign_in(page)
    page.goto("/#/system")
    card = page.locator("#sys-backup")
    card.locator("#bk-file").set_input_files(str(archive))
    card.get_by_role("button", name="Restore a backup").click()
    page.locator("dialog [data-action=confirm]").click()
    expect(card.locator("#bk-result")).to_contain_text("Backup checked and staged")
    expect(card.locator("#bk-result")).to_contain_text("the worker restarts", ignore_case=True)
    expect(card.locator("#bk-result")).to_contain_text("holds no logs: the current ones stay")
    deadline = time.monotonic() + 60
    while not (appliance.worker_pid() != old_pid and appliance.ready()):
        assert time.monotonic() < deadline, appliance.log_tail()
        time.sleep(0.2)
    assert appliance.api("GET", f"/tasks/{task['id']}").status_code == 200  # back again
    # The page reloads once the worker answers again; the sessions are the backup's, taken
    # before this browser signed in: it signs in again (docs/backup.md).
    expect(page.get_by_role("heading", name="Sign in", level=1)).to_be_visible()


def test_an_encrypted_backup_needs_its_passphrase(page: Page, appliance: Appliance,
                                                  tmp_path: Path) -> None:
    api_task(appliance, name="sealed", command="true", schedule=None)
    sealed = tmp_path / "b.tar.gz.enc"
    with appliance.http.stream("POST", "/api/v1/backup",
                               json={"passphrase": "口令 correct horse"}) as resp:
        assert resp.status_code == 200
        with sealed.open("wb") as out:
            for chunk in resp.iter_bytes():
                out.write(chunk)
    old_pid = appliance.worker_pid()
    sign_in(page)
    page.goto("/#/system")
    page.get_by_role("button", name="中文").click()
    card = page.locator("#sys-backup")
    card.locator("#bk-file").set_input_files(str(sealed))
    for given, code, words in (("", "BACKUP_PASSPHRASE_NEEDED", "请输入其密码短语"),
                               ("wrong horse", "BACKUP_PASSPHRASE_WRONG", "密码短语不正确")):
        card.locator("#bk-pass").fill(given)
        card.get_by_role("button", name="恢复备份").click()
        page.locator("dialog [data-action=confirm]").click()
        error = card.locator("#bk-error")
        expect(error).to_contain_text(words)
        assert error.get_attribute("data-code") == code
    card.locator("#bk-pass").fill("口令 correct horse")  # not latin-1: sent percent-encoded
    card.get_by_role("button", name="恢复备份").click()
    page.locator("dialog [data-action=confirm]").click()
    expect(card.locator("#bk-result")).to_be_visible()
    deadline = time.monotonic() + 60
    while not (appliance.worker_pid() != old_pid and appliance.ready()):
        assert time.monotonic() < deadline, appliance.log_tail()
        time.sleep(0.2)
