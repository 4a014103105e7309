"""The cluster credential: an HMAC over the request, within ±60 s, never the secret."""

from __future__ import annotations

import pytest

from qledge import cluster_auth
from qledge.cluster_auth import NODE, SIGNATURE, TIME, Refused, sign, verify

SECRET = "s3cret-shared-by-the-fleet"
PATH = "/internal/v1/attempts/0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/log"
NOW = 1_700_000_000_000


def _signed(**over: object) -> dict[str, str]:
    args: dict[str, object] = {"secret": SECRET, "node": "garage-pi", "method": "GET",
                               "path": PATH, "query": "offset=0&limit=10", "now_ms": NOW}
    args.update(over)
    return sign(**args)  # type: ignore[arg-type]


def test_a_signed_request_verifies_as_its_node() -> None:
    headers = _signed()
    assert set(headers) == {NODE, TIME, SIGNATURE}
    assert SECRET not in "".join(headers.values())  # the secret is never sent
    assert verify(SECRET, headers, "GET", PATH, "offset=0&limit=10", NOW) == "garage-pi"
    # Clock skew inside the window either way.
    assert verify(SECRET, headers, "GET", PATH, "offset=0&limit=10", NOW + 59_000)
    assert verify(SECRET, headers, "GET", PATH, "offset=0&limit=10", NOW - 59_000)


@pytest.mark.parametrize("method,path,query", [
    ("POST", PATH, "offset=0&limit=10"),
    ("GET", PATH + "/stream", "offset=0&limit=10"),
    ("GET", PATH, "offset=5&limit=10"),
    ("GET", PATH, "offset=0&limit=10&x=1"),
])
def test_any_change_to_the_request_is_refused(method: str, path: str, query: str) -> None:
    with pytest.raises(Refused, match="bad signature"):
        verify(SECRET, _signed(), method, path, query, NOW)


def test_a_tampered_header_is_refused() -> None:
    for name, value in ((NODE, "office"), (TIME, str(NOW + 1)),
                        (SIGNATURE, "0" * 64), (SIGNATURE, "")):
        headers = {**_signed(), name: value}
        with pytest.raises(Refused):
            verify(SECRET, headers, "GET", PATH, "offset=0&limit=10", NOW)


def test_the_wrong_secret_is_refused() -> None:
    with pytest.raises(Refused, match="bad signature"):
        verify(SECRET, _signed(secret="another-fleet"), "GET", PATH, "offset=0&limit=10", NOW)
    with pytest.raises(Refused, match="no cluster secret"):
        verify("", _signed(), "GET", PATH, "offset=0&limit=10", NOW)
    with pytest.raises(Refused):
        sign("", "garage-pi", "GET", PATH, "", NOW)


def test_a_replay_outside_the_window_is_refused() -> None:
    headers = _signed()
    for later in (NOW + 60_001, NOW - 60_001, NOW + 3_600_000):
        with pytest.raises(Refused, match="outside"):
            verify(SECRET, headers, "GET", PATH, "offset=0&limit=10", later)
    assert cluster_auth.WINDOW_MS == 60_000


def test_missing_or_malformed_headers_are_refused() -> None:
    with pytest.raises(Refused, match="missing"):
        verify(SECRET, {}, "GET", PATH, "", NOW)
    with pytest.raises(Refused, match="milliseconds"):
        verify(SECRET, {**_signed(), TIME: "-5"}, "GET", PATH, "offset=0&limit=10", NOW)


@pytest.mark.parametrize("raw", ["\u00b2", "1\u00b3", "\u0661\u0662\u0663", "\uff11\uff12"])
def test_a_time_of_non_ascii_digits_is_refused_not_a_crash(raw: str) -> None:
    # "²" passed isdigit() and then made int() raise: an unauthenticated 500 on the
    # internal routes instead of a 401 (issue 35, finding 12).
    with pytest.raises(Refused, match="milliseconds"):
        verify(SECRET, {**_signed(), TIME: raw}, "GET", PATH, "offset=0&limit=10", NOW)
