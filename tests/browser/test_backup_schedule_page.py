"""System → Scheduled backups (backup_schedule.js, docs/backup.md "Scheduled backups"):
the settings saved through PUT /api/v1/backup/schedule, the API's refusals shown under
their field in English and 中文, a passphrase set but never shown back."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from .conftest import shoot, sign_in
from _appliance import Appliance


def test_set_up_a_scheduled_backup_with_a_passphrase(page: Page, appliance: Appliance,
                                                     tmp_path: Path) -> None:
    sign_in(page)
    page.goto("/#/system")
    card = page.locator("#sys-backup-schedule")
    expect(card.get_by_role("heading", name="Scheduled backups")).to_be_visible()
    expect(card.locator("#bs-state")).to_have_text("Not set up.")
    card.get_by_label("Enabled").check()
    card.get_by_label("Directory").fill("backups")
    card.get_by_role("button", name="Save").click()
    error = card.locator("[data-field=directory] .field-error")
    expect(error).to_have_text("An absolute path is needed.")
    expect(card.get_by_label("Directory")).to_have_attribute("aria-invalid", "true")
    card.get_by_label("Directory").fill(str(tmp_path))
    card.get_by_label("Archives kept").fill("3")
    card.get_by_label("Passphrase").fill("short")
    card.get_by_role("button", name="Save").click()
    expect(card.locator("[data-field=passphrase] .field-error")).to_have_text(
        "The passphrase needs 8 characters or more.")
    card.get_by_label("Passphrase").fill("correct horse battery")
    card.get_by_label("Include the logs").check()
    card.get_by_role("button", name="Save").click()
    expect(page.locator("#toast")).to_contain_text("Saved.")
    expect(card.locator("#bs-state")).to_contain_text("Encrypted with a passphrase.")
    expect(card.locator("#bs-pass")).to_have_value("")  # never shown back
    saved = appliance.api("GET", "/backup/schedule").json()
    assert (saved["enabled"], saved["directory"], saved["keep"], saved["with_logs"],
            saved["encrypted"]) == (True, str(tmp_path), 3, True, True)
    runs = card.get_by_role("link", name="Runs")
    expect(runs).to_have_attribute("href", f"#/runs?task_id={saved['task_id']}")
    shoot(page, "backup-schedule-en")
    # Remove the passphrase: plain archives from then on.
    card.get_by_label("Remove the passphrase").check()
    card.get_by_role("button", name="Save").click()
    expect(card.locator("#bs-state")).to_contain_text("Not encrypted.")
    assert appliance.api("GET", "/backup/schedule").json()["encrypted"] is False


def test_refusals_in_chinese(page: Page, appliance: Appliance, tmp_path: Path) -> None:
    sign_in(page)
    page.goto("/#/system")
    page.get_by_role("button", name="中文").click()
    card = page.locator("#sys-backup-schedule")
    expect(card.get_by_role("heading", name="定时备份")).to_be_visible()
    card.get_by_label("目录").fill(str(tmp_path))
    card.get_by_label("保留份数").fill("0")
    card.get_by_role("button", name="保存").click()
    expect(card.locator("[data-field=keep] .field-error")).to_have_text(
        "保留份数须为 1 到 1000。")
    inside = appliance.state / "work" / "scripts" / "bk"
    card.get_by_label("保留份数").fill("7")
    card.get_by_label("目录").fill(str(inside))
    card.get_by_role("button", name="保存").click()
    expect(card.locator("[data-field=directory] .field-error")).to_have_text(
        f"{inside} 位于本机自身的 work 目录内。")
    card.get_by_label("目录").fill(str(tmp_path))
    card.get_by_label("计划（cron）").fill("61 * * * *")
    card.get_by_role("button", name="保存").click()
    expect(card.locator("[data-field=schedule] .field-error")).to_contain_text("计划无效")
    shoot(page, "backup-schedule-zh")
