"""The panel's sign-in in a real browser against the supervised appliance (issue 39):
password, TOTP, a new tab and a link staying signed in, sign out everywhere, CSRF.
Screenshots (desktop + phone, English + 中文): sign-in, password setup, TOTP enrolment,
login log."""
from __future__ import annotations

import base64
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from qledge.auth import totp

from .conftest import DESKTOP, SHOTS, TIMEOUT_MS, shoot, signed_in
from _appliance import ADMIN, Appliance

pytestmark = pytest.mark.slow

PASSWORD = "river-lamp-stone-42"
ZBARIMG = shutil.which("zbarimg")


def _context(browser: Browser, app: Appliance, locale: str = "en-US") -> BrowserContext:
    ctx = browser.new_context(viewport=DESKTOP, locale=locale, timezone_id="UTC",
                              base_url=f"http://127.0.0.1:{app.port}")
    ctx.set_default_timeout(TIMEOUT_MS)
    return ctx


@pytest.fixture
def fresh(browser: Browser, appliance: Appliance) -> Iterator[Page]:
    """A second browser of its own (other cookies): another device."""
    ctx = _context(browser, appliance)
    try:
        yield ctx.new_page()
    finally:
        ctx.close()


def ensure_password(app: Appliance) -> None:
    r = app.api("POST", "/auth/password", json={"new": PASSWORD, "current": ADMIN})
    assert r.status_code == 204, r.text


def password_sign_in(page: Page, where: str = "/") -> None:
    page.goto(where)
    page.locator("#login-password").fill(PASSWORD)
    page.locator("form.login button[type=submit]").click()


def zh(page: Page) -> None:
    page.get_by_role("button", name="Switch language").click()
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")


def test_first_sign_in_with_the_token_then_set_a_password(page: Page,
                                                          appliance: Appliance) -> None:
    page.goto("/")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    expect(page.get_by_label("Admin token")).to_be_focused()
    shoot(page, "signin-token")
    page.get_by_label("Admin token").fill(ADMIN)
    page.get_by_role("button", name="Sign in").click()
    signed_in(page)
    # The offer: the header's Account link reads "Set a password" until one is set.
    page.get_by_role("link", name="Set a password").click()
    expect(page.get_by_role("heading", name="Set a password")).to_be_visible()
    shoot(page, "signin-password-setup")
    zh(page)
    expect(page.get_by_role("heading", name="设置密码", level=2)).to_be_visible()
    shoot(page, "signin-password-setup-zh")
    page.locator("[data-action=lang]").click()
    expect(page.locator("html")).to_have_attribute("lang", "en")
    page.get_by_label("New password", exact=True).fill(PASSWORD)
    page.get_by_label("Repeat the new password").fill(PASSWORD + "x")
    page.get_by_role("button", name="Set password").click()
    expect(page.locator("#acc-again-err")).to_have_text("The two passwords differ.")
    page.get_by_label("Repeat the new password").fill(PASSWORD)
    page.get_by_role("button", name="Set password").click()
    expect(page.get_by_role("heading", name="Password", level=2, exact=True)).to_be_visible()
    expect(page.locator("#toast")).to_have_text("Password saved.")
    expect(page.get_by_role("link", name="Account", exact=True)).to_be_visible()
    assert appliance.api("GET", "/auth/state").json()["password_set"] is True


def test_password_sign_in_a_link_and_a_new_tab(page: Page, appliance: Appliance) -> None:
    ensure_password(appliance)
    # A run link from a notification, opened signed out: sign in, land on that page.
    page.goto("/#/system")
    expect(page.locator("#login-password")).to_be_focused()
    shoot(page, "signin-password")
    page.locator("#login-password").fill("not the password")
    page.locator("form.login button[type=submit]").click()
    expect(page.locator("#login-password-err")).to_have_text("Wrong password.")
    page.locator("#login-password").fill(PASSWORD)
    page.locator("form.login button[type=submit]").click()
    expect(page.get_by_role("heading", name="System", level=1)).to_be_visible()
    # The login log, on the System page: the refusal and the sign-in, never the password.
    log = page.locator("#sys-logins")
    expect(log.locator("tr[data-outcome=ok]").first).to_be_visible()
    expect(log.locator("tr[data-outcome=refused]").first).to_be_visible()
    assert PASSWORD not in page.content()
    page.locator("#sys-login-log").scroll_into_view_if_needed()
    shoot(page, "signin-login-log")
    # A new tab of the same browser, straight to a link: signed in already.
    tab = page.context.new_page()
    tab.goto("/#/runs")
    expect(tab.get_by_role("heading", name="Runs", level=1)).to_be_visible()
    expect(tab.get_by_role("navigation")).to_be_visible()
    tab.close()
    zh(page)
    expect(page.get_by_role("heading", name="登录日志")).to_be_visible()
    shoot(page, "signin-login-log-zh")
    page.get_by_role("button", name="退出登录").click()
    expect(page.locator("#login-password")).to_be_visible()
    shoot(page, "signin-password-zh")


def test_totp_enrolment_and_sign_in(page: Page, fresh: Page, appliance: Appliance) -> None:
    ensure_password(appliance)
    password_sign_in(page, "/#/account")
    expect(page.get_by_role("heading", name="Two-step verification")).to_be_visible()
    page.get_by_role("button", name="Turn on").click()
    qr = page.locator("#acc-totp canvas")
    expect(qr).to_be_visible()
    secret = page.locator("#acc-secret").inner_text().replace(" ", "")
    shoot(page, "signin-totp-enrol")
    if ZBARIMG:  # the QR code as the browser drew it, read by a real decoder
        png = Path(SHOTS) / "qr-read-back.png"
        qr.screenshot(path=str(png))
        out = subprocess.run([ZBARIMG, "-q", "--raw", str(png)], capture_output=True,
                             text=True, timeout=30, check=False).stdout.strip()
        png.unlink()
        assert out == totp.uri(secret, account="admin")
    key = base64.b32decode(secret)
    page.get_by_label("Authenticator code").fill(totp.totp(key, time.time()))
    page.get_by_role("button", name="Confirm").click()
    codes = page.locator("#acc-codes li")
    expect(codes).to_have_count(10)
    shoot(page, "signin-totp-codes")
    page.get_by_role("button", name="I have saved them").click()
    expect(page.locator("#acc-totp")).to_contain_text("On: signing in asks for a code")
    # Another device: the password, then the code (the next step's: one is used once).
    password_sign_in(fresh)
    expect(fresh.locator("#login-code")).to_be_focused()
    expect(fresh.locator("#login-code-err")).to_have_text(
        "Enter the code from your authenticator app.")
    shoot(fresh, "signin-totp")
    fresh.locator("#login-code").fill(totp.hotp(key, int(time.time() // 30) + 1))
    fresh.locator("form.login button[type=submit]").click()
    signed_in(fresh)
    zh(fresh)
    fresh.goto("/#/account")
    expect(fresh.locator("#acc-totp")).to_contain_text("已开启")
    # The phone is lost: the admin token turns TOTP off.
    assert appliance.api("DELETE", "/auth/totp").status_code == 204


def test_totp_enrolment_in_chinese(page: Page, appliance: Appliance) -> None:
    ensure_password(appliance)
    password_sign_in(page, "/#/account")
    zh(page)
    page.get_by_role("button", name="开启").click()
    expect(page.locator("#acc-totp canvas")).to_be_visible()
    shoot(page, "signin-totp-enrol-zh")
    page.goto("/")  # leave the enrolment pending: it counts only once confirmed
    assert appliance.api("GET", "/auth/state").json()["totp_enabled"] is False


def test_sign_out_everywhere_ends_another_browsers_session(page: Page, fresh: Page,
                                                           appliance: Appliance) -> None:
    ensure_password(appliance)
    password_sign_in(fresh, "/#/runs")
    expect(fresh.get_by_role("heading", name="Runs", level=1)).to_be_visible()
    password_sign_in(page, "/#/account")
    expect(page.locator("#acc-list tbody tr")).not_to_have_count(0)
    expect(page.locator("#acc-list tr[data-current=yes]")).to_have_count(1)
    page.get_by_role("button", name="Sign out everywhere").click()
    page.locator("dialog [data-action=confirm]").click()
    expect(page.locator("#login-password")).to_be_visible()
    # The other browser's next request finds its session gone: back to the sign-in page.
    fresh.goto("/#/tasks")
    expect(fresh.locator("#login-password")).to_be_visible()
    r = fresh.context.request.get("/api/v1/system")
    assert r.status == 401


def test_a_cross_origin_request_with_the_cookie_is_refused(page: Page,
                                                           appliance: Appliance) -> None:
    ensure_password(appliance)
    # With a password set, the admin token still signs in: one click away.
    page.goto("/")
    page.get_by_role("button", name="Use the admin token").click()
    page.get_by_label("Admin token").fill(ADMIN)
    page.locator("form.login button[type=submit]").click()
    signed_in(page)
    # The cookie goes along (same cookie jar), the Origin is another site's: 403.
    r = page.context.request.post("/api/v1/envs", data={"name": "FORGED", "value": "1"},
                                  headers={"Origin": "http://evil.example"})
    assert r.status == 403 and r.json()["error"] == "CSRF_REFUSED"
    # A real page on another origin trying it: nothing is created.
    evil = "http://evil.example/"
    page.route(evil, lambda route: route.fulfill(
        content_type="text/html", body="<!doctype html><title>evil</title>"))
    page.goto(evil)
    page.evaluate("""(url) => fetch(url, {method: 'POST', credentials: 'include',
        mode: 'no-cors', headers: {'Content-Type': 'text/plain'},
        body: JSON.stringify({name: 'FORGED', value: '1'})}).catch(() => null)""",
                  f"http://127.0.0.1:{appliance.port}/api/v1/envs")
    names = [e["name"] for e in appliance.api("GET", "/envs").json()["items"]]
    assert "FORGED" not in names
    # The panel's own requests still go through.
    page.goto("/#/envs")
    r = page.context.request.post("/api/v1/envs", data={"name": "OWN", "value": "1"},
                                  headers={"Origin": f"http://127.0.0.1:{appliance.port}"})
    assert r.status == 201, r.text()
