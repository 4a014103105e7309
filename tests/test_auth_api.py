"""/api/v1/auth/*: sign-in by password, TOTP and admin token; the session cookie, its
CSRF check and expiry; the back-off; the login log (docs/api.md, "Signing in")."""
from __future__ import annotations

import base64
import time
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from qledge import settings
from qledge.auth import throttle, totp
from qledge.http.app import create_app

from support import ADMIN, make_settings, migrate_for

pytestmark = pytest.mark.pg
SAME = {"Origin": "http://testserver"}
PASSWORD = "correct horse battery"


@pytest.fixture
def anon(tmp_path) -> Iterator[TestClient]:  # type: ignore[no-untyped-def]
    """A client with no bearer token: what a browser is."""
    conf: settings.Settings = make_settings(tmp_path / "state")
    migrate_for(conf)
    with TestClient(create_app(conf, ADMIN)) as c:
        yield c


def _admin() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN}"}


def _set_password(c: TestClient) -> None:
    r = c.post("/api/v1/auth/password", json={"new": PASSWORD}, headers=_admin())
    assert r.status_code == 204, r.text


def test_without_a_password_only_the_admin_token_signs_in(anon: TestClient) -> None:
    assert anon.get("/api/v1/auth/state").json() == {
        "password_set": False, "totp_enabled": False, "signed_in": False, "method": None}
    r = anon.post("/api/v1/auth/login", json={"password": "whatever1"}, headers=SAME)
    assert r.status_code == 409 and r.json()["error"] == "PASSWORD_NOT_SET"
    r = anon.post("/api/v1/auth/login", json={"token": ADMIN}, headers=SAME)
    assert r.status_code == 200 and r.json()["method"] == "token"
    cookie = r.headers["set-cookie"]
    assert "qledge_session=" in cookie and "HttpOnly" in cookie
    assert "SameSite=strict" in cookie and "Secure" not in cookie  # plain http here
    assert anon.get("/api/v1/auth/state").json()["signed_in"] is True
    # The cookie is enough for the API now (no bearer), and a first password needs
    # nothing more than the session.
    assert anon.get("/api/v1/system").status_code == 200
    r = anon.post("/api/v1/auth/password", json={"new": PASSWORD}, headers=SAME)
    assert r.status_code == 204


def test_password_sign_in_and_sign_out(anon: TestClient) -> None:
    _set_password(anon)
    assert anon.get("/api/v1/system").status_code == 401
    r = anon.post("/api/v1/auth/login", json={"password": "wrong password"}, headers=SAME)
    assert r.status_code == 401 and r.json()["error"] == "SIGNIN_REFUSED"
    r = anon.post("/api/v1/auth/login", json={"password": PASSWORD}, headers=SAME)
    assert r.status_code == 200 and r.json()["method"] == "password"
    assert anon.get("/api/v1/system").status_code == 200
    assert anon.post("/api/v1/auth/logout", headers=SAME).status_code == 204
    assert anon.get("/api/v1/system").status_code == 401
    log = anon.get("/api/v1/auth/logins", headers=_admin()).json()["items"]
    assert [(e["method"], e["outcome"]) for e in log] == [("password", "ok"),
                                                          ("password", "refused")]
    assert all(set(e) == {"id", "at_ms", "client", "agent", "method", "outcome"} for e in log)
    assert PASSWORD not in anon.get("/api/v1/auth/logins", headers=_admin()).text


def test_a_cross_origin_change_with_the_cookie_is_refused(anon: TestClient) -> None:
    _set_password(anon)
    assert anon.post("/api/v1/auth/login", json={"password": PASSWORD},
                     headers=SAME).status_code == 200
    body = {"name": "FORGED", "value": "1"}
    for headers in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
                    {"Sec-Fetch-Site": "same-site", "Origin": "http://testserver"}, {}):
        r = anon.post("/api/v1/envs", json=body, headers=headers)
        assert r.status_code == 403, headers
        assert r.json()["error"] == "CSRF_REFUSED"
    assert anon.get("/api/v1/envs", headers=_admin()).json()["items"] == []
    # The same request from the panel's own origin goes through; reads need no check.
    assert anon.post("/api/v1/envs", json=body, headers=SAME).status_code == 201
    assert anon.get("/api/v1/envs").status_code == 200
    # A login from a foreign page (login CSRF) is refused too.
    r = anon.post("/api/v1/auth/login", json={"password": PASSWORD},
                  headers={"Origin": "http://evil.example"})
    assert r.status_code == 403 and r.json()["error"] == "CSRF_REFUSED"


def test_totp_enrolment_sign_in_and_recovery_codes(anon: TestClient) -> None:
    _set_password(anon)
    begun = anon.post("/api/v1/auth/totp", headers=_admin()).json()
    secret = begun["secret"]
    assert begun["uri"].startswith("otpauth://totp/qledge:admin?secret=" + secret)
    key = base64.b32decode(secret)
    r = anon.post("/api/v1/auth/totp/confirm", json={"code": "000000"}, headers=_admin())
    assert r.status_code == 401 or totp.totp(key, time.time()) == "000000"
    r = anon.post("/api/v1/auth/totp/confirm", json={"code": totp.totp(key, time.time())},
                  headers=_admin())
    codes = r.json()["recovery_codes"]
    assert len(codes) == 10 and len(set(codes)) == 10
    r = anon.post("/api/v1/auth/login", json={"password": PASSWORD}, headers=SAME)
    assert r.status_code == 401 and r.json()["error"] == "TOTP_REQUIRED"
    # The code used to confirm cannot be used again; the next step's can.
    step_code = totp.hotp(key, int(time.time() // 30) + 1)
    r = anon.post("/api/v1/auth/login", json={"password": PASSWORD, "code": step_code},
                  headers=SAME)
    assert r.status_code == 200 and r.json()["method"] == "totp"
    r = anon.post("/api/v1/auth/login", json={"password": PASSWORD, "code": step_code},
                  headers=SAME)
    assert r.status_code == 401 and r.json()["error"] == "SIGNIN_REFUSED"
    # A recovery code works once.
    r = anon.post("/api/v1/auth/login", json={"password": PASSWORD, "code": codes[0]},
                  headers=SAME)
    assert r.status_code == 200 and r.json()["method"] == "recovery"
    r = anon.post("/api/v1/auth/login", json={"password": PASSWORD, "code": codes[0]},
                  headers=SAME)
    assert r.status_code == 401
    # Turning TOTP off needs the admin token itself, not a session.
    r = anon.delete("/api/v1/auth/totp", headers=SAME)
    assert r.status_code == 403 and r.json()["error"] == "ADMIN_TOKEN_REQUIRED"
    assert anon.delete("/api/v1/auth/totp", headers=_admin()).status_code == 204
    assert anon.get("/api/v1/auth/state").json()["totp_enabled"] is False


def test_back_off_grows_and_the_admin_token_still_works(anon: TestClient) -> None:
    _set_password(anon)
    accounts = anon.app.state.accounts  # type: ignore[attr-defined]
    clock = [1000.0]
    accounts.monotonic = lambda: clock[0]
    waits = []
    for _ in range(throttle.FREE + 4):
        r = anon.post("/api/v1/auth/login", json={"password": "not it at all"}, headers=SAME)
        assert r.status_code == 401 and r.json()["error"] == "SIGNIN_REFUSED"
        waits.append(r.json().get("retry_after_s", 0))
        if waits[-1]:
            # While held, even the right password gets 429 with Retry-After.
            held = anon.post("/api/v1/auth/login", json={"password": PASSWORD},
                             headers=SAME)
            assert held.status_code == 429 and held.json()["error"] == "SIGNIN_THROTTLED"
            assert int(held.headers["Retry-After"]) == waits[-1]
            clock[0] += waits[-1]  # wait it out, then fail again
    assert waits == [0] * throttle.FREE + [1, 2, 4, 8]
    # Held again — and the admin token signs in anyway and clears the back-off.
    anon.post("/api/v1/auth/login", json={"password": "not it at all"}, headers=SAME)
    assert anon.post("/api/v1/auth/login", json={"password": PASSWORD},
                     headers=SAME).status_code == 429
    assert anon.post("/api/v1/auth/login", json={"token": ADMIN},
                     headers=SAME).status_code == 200
    assert anon.post("/api/v1/auth/login", json={"password": PASSWORD},
                     headers=SAME).status_code == 200


def _session(c: TestClient) -> dict[str, str]:
    """A new session's cookie, as a header: a second browser on the same client."""
    r = c.post("/api/v1/auth/login", json={"password": PASSWORD}, headers=SAME)
    assert r.status_code == 200
    value = r.cookies["qledge_session"]
    c.cookies.clear()
    return {"Cookie": f"qledge_session={value}", **SAME}


def test_sign_out_everywhere_and_expiry(anon: TestClient) -> None:
    _set_password(anon)
    mine, other = _session(anon), _session(anon)
    listed = anon.get("/api/v1/auth/sessions", headers=mine).json()["items"]
    assert len(listed) == 2 and sum(s["current"] for s in listed) == 1
    assert anon.get("/api/v1/system", headers=other).status_code == 200
    r = anon.post("/api/v1/auth/logout-everywhere", headers=mine)
    assert r.json() == {"ended": 2}
    anon.cookies.clear()
    assert anon.get("/api/v1/system", headers=other).status_code == 401
    assert anon.get("/api/v1/system", headers=mine).status_code == 401
    # Idle expiry: a session unused for longer than session_idle_s is gone.
    later = _session(anon)
    assert anon.get("/api/v1/system", headers=later).status_code == 200
    accounts = anon.app.state.accounts  # type: ignore[attr-defined]
    accounts.idle_ms = 0
    time.sleep(0.01)  # the idle bound is 0 ms: any time at all passes it
    assert anon.get("/api/v1/system", headers=later).status_code == 401


def test_password_change_needs_the_current_one_or_the_admin_token(anon: TestClient) -> None:
    _set_password(anon)
    elsewhere = _session(anon)
    assert anon.post("/api/v1/auth/login", json={"password": PASSWORD},
                     headers=SAME).status_code == 200
    r = anon.post("/api/v1/auth/password", json={"new": "another one!"}, headers=SAME)
    assert r.status_code == 403 and r.json()["error"] == "CURRENT_PASSWORD_REQUIRED"
    r = anon.post("/api/v1/auth/password", json={"new": "short", "current": PASSWORD},
                  headers=SAME)
    assert r.status_code == 422 and r.json()["field"] == "new"
    r = anon.post("/api/v1/auth/password", json={"new": "another one!", "current": PASSWORD},
                  headers=SAME)
    assert r.status_code == 204
    # The change ends every other session; the one that made it stays.
    assert anon.get("/api/v1/system").status_code == 200
    anon.cookies, jar = type(anon.cookies)(), anon.cookies
    assert anon.get("/api/v1/system", headers=elsewhere).status_code == 401
    anon.cookies = jar
    r = anon.post("/api/v1/auth/password", json={"new": "a third one!", "current": ADMIN},
                  headers=SAME)
    assert r.status_code == 204
    assert anon.post("/api/v1/auth/login", json={"password": "a third one!"},
                     headers=SAME).status_code == 200


def test_bearer_api_is_unchanged_and_unknown_fields_are_refused(anon: TestClient) -> None:
    assert anon.get("/api/v1/system", headers=_admin()).status_code == 200
    r = anon.get("/api/v1/system", headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401
    r = anon.post("/api/v1/auth/login", json={"token": ADMIN, "user": "x"}, headers=SAME)
    assert r.status_code == 422 and r.json()["field"] == "user"


def test_a_new_browser_sign_in_queues_a_notification(anon: TestClient) -> None:
    r = anon.post("/api/v1/notifications/channels", headers=_admin(),
                  json={"name": "hook", "url": "json://127.0.0.1:9/x"})
    assert r.status_code == 201, r.text
    ua = {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0", **SAME}
    assert anon.post("/api/v1/auth/login", json={"token": ADMIN}, headers=ua).status_code == 200
    assert anon.post("/api/v1/auth/login", json={"token": ADMIN}, headers=ua).status_code == 200
    outbox = anon.get("/api/v1/notifications/messages", headers=_admin())
    assert outbox.status_code == 200, outbox.text
    signins = [m for m in outbox.json()["items"] if m["kind"] == "signin"]
    assert len(signins) == 1  # the second sign-in came from a browser seen before
    assert signins[0]["title"] == "[qledge] new sign-in to the panel"
    db = anon.app.state.runtime.db  # type: ignore[attr-defined]

    async def stored_body() -> str:
        async with db.read() as tx:
            row = await tx.one("SELECT body FROM notify_outbox WHERE kind = 'signin'")
        return str(row["body"])

    body = anon.portal.call(stored_body)  # type: ignore[union-attr]
    assert "Browser: Firefox on Linux" in body and "Method: token" in body
    assert ADMIN not in body
    # In the notifications' language (a setting): a 中文 reader gets a 中文 message.
    r = anon.put("/api/v1/notifications/settings", headers=_admin(),
                 json={"language": "zh-CN"})
    assert r.status_code == 200, r.text
    other = {"User-Agent": "Mozilla/5.0 (Macintosh; Mac OS X 14_0) Safari/605.1", **SAME}
    assert anon.post("/api/v1/auth/login", json={"token": ADMIN},
                     headers=other).status_code == 200
    outbox = anon.get("/api/v1/notifications/messages", headers=_admin()).json()["items"]
    titles = sorted(m["title"] for m in outbox if m["kind"] == "signin")
    assert titles == ["[qledge] new sign-in to the panel", "[qledge] 面板有新的登录"], titles


def test_the_cookie_is_secure_over_tls_and_behind_a_trusted_proxy_only(tmp_path) -> None:  # type: ignore[no-untyped-def]
    def cookie(trust: str, base: str, headers: dict[str, str]) -> str:
        conf = make_settings(tmp_path / f"s-{trust}", trust_forwarded_proto=trust)
        migrate_for(conf)
        with TestClient(create_app(conf, ADMIN), base_url=base) as c:
            r = c.post("/api/v1/auth/login", json={"token": ADMIN}, headers=headers)
            assert r.status_code == 200, r.text
            return r.headers["set-cookie"]

    https = {"Origin": "https://testserver"}
    assert "Secure" in cookie("false", "https://testserver", https)
    proxied = {"X-Forwarded-Proto": "https", **SAME}
    assert "Secure" not in cookie("false", "http://testserver", proxied)  # anyone can say it
    assert "Secure" in cookie("true", "http://testserver", proxied)
