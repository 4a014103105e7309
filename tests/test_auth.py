"""auth/: the password hash, TOTP against the RFCs' vectors, the back-off numbers."""
from __future__ import annotations

import base64
import hashlib

import pytest

from qledge.auth import password as pw
from qledge.auth import throttle, totp
from qledge.auth.account import agent_summary


def test_scrypt_parameters_fit_a_pi() -> None:
    # 128·N·r bytes of memory per check: 16 MiB — memory-hard, yet far from a Pi's RAM.
    assert (pw.N, pw.R, pw.P) == (1 << 14, 8, 1)
    assert 128 * pw.N * pw.R == 16 * 1024 * 1024
    stored = pw.hash_password("correct horse")
    kind, n, r, p, salt, digest = stored.split("$")
    assert (kind, int(n), int(r), int(p)) == ("scrypt", pw.N, pw.R, pw.P)
    assert len(base64.b64decode(salt)) == pw.SALT_BYTES
    # The stored digest is hashlib's scrypt of the password with that salt.
    assert base64.b64decode(digest) == hashlib.scrypt(
        b"correct horse", salt=base64.b64decode(salt), n=pw.N, r=pw.R, p=pw.P,
        dklen=pw.DKLEN, maxmem=64 * 1024 * 1024)


def test_a_password_matches_only_itself() -> None:
    stored = pw.hash_password("correct horse")
    assert pw.verify_password("correct horse", stored)
    assert not pw.verify_password("correct horsE", stored)
    assert not pw.verify_password("", stored)
    assert pw.hash_password("correct horse") != stored  # a new salt each time
    # Hashes made with other parameters still verify (they are stored with the hash).
    assert pw.verify_password("x" * 8, pw.hash_password("x" * 8, n=1 << 10, r=4))


@pytest.mark.parametrize("stored", ["", "plain", "bcrypt$1$2$3$a$b", "scrypt$x$8$1$a$b",
                                    "scrypt$1073741824$8$1$AAAA$AAAA"])
def test_a_malformed_or_oversized_hash_matches_nothing(stored: str) -> None:
    assert not pw.verify_password("anything", stored)


def test_new_password_rules() -> None:
    pw.check_new("12345678")
    with pytest.raises(pw.WeakPassword, match="at least 8"):
        pw.check_new("1234567")
    with pytest.raises(pw.WeakPassword, match="at most 256"):
        pw.check_new("x" * 257)


def test_hotp_rfc4226_vectors() -> None:
    key = b"12345678901234567890"
    expected = ["755224", "287082", "359152", "969429", "338314", "254676", "287922",
                "162583", "399871", "520489"]
    assert [totp.hotp(key, c) for c in range(10)] == expected


@pytest.mark.parametrize(("at", "sha1", "sha256", "sha512"), [
    (59, "94287082", "46119246", "90693936"),
    (1111111109, "07081804", "68084774", "25091201"),
    (1111111111, "14050471", "67062674", "99943326"),
    (1234567890, "89005924", "91819424", "93441116"),
    (2000000000, "69279037", "90698825", "38618901"),
    (20000000000, "65353130", "77737706", "47863826"),
])
def test_totp_rfc6238_vectors(at: int, sha1: str, sha256: str, sha512: str) -> None:
    seed = b"1234567890"
    assert totp.totp(seed * 2, at, digits=8) == sha1
    assert totp.totp(seed * 3 + b"12", at, digits=8, digest="sha256") == sha256
    assert totp.totp(seed * 6 + b"1234", at, digits=8, digest="sha512") == sha512


def test_a_code_is_valid_one_step_either_side_and_once() -> None:
    secret = totp.new_secret()
    assert len(secret) == 32 and base64.b32decode(secret) and "=" not in secret
    key = base64.b32decode(secret)
    now = 1_700_000_015.0
    step = int(now // 30)
    assert totp.matching_step(secret, totp.hotp(key, step), now) == step
    assert totp.matching_step(secret, totp.hotp(key, step - 1), now) == step - 1
    assert totp.matching_step(secret, totp.hotp(key, step + 1), now) == step + 1
    assert totp.matching_step(secret, totp.hotp(key, step - 2), now) is None
    # Used once: a step at or before the last one used no longer counts.
    assert totp.matching_step(secret, totp.hotp(key, step), now, after_step=step) is None
    assert totp.matching_step(secret, "12345", now) is None
    assert totp.matching_step(secret, "abcdef", now) is None


def test_otpauth_uri() -> None:
    uri = totp.uri("JBSWY3DPEHPK3PXP", account="admin")
    assert uri == ("otpauth://totp/qledge:admin?secret=JBSWY3DPEHPK3PXP&issuer=qledge"
                   "&algorithm=SHA1&digits=6&period=30")


def test_client_back_off_doubles_up_to_its_cap() -> None:
    t = throttle.Throttle()
    waits = [t.failed("10.0.0.9", 1000.0) for _ in range(14)]
    assert waits[:throttle.FREE] == [0.0] * throttle.FREE
    assert waits[throttle.FREE:throttle.FREE + 5] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert waits[-1] == throttle.CLIENT_CAP_S
    assert t.wait_s("10.0.0.9", 1000.0) == throttle.CLIENT_CAP_S
    assert t.wait_s("10.0.0.8", 1000.0) == 0.0  # another client is not held
    t.succeeded("10.0.0.9")
    assert t.wait_s("10.0.0.9", 1000.0) == 0.0


def test_global_back_off_holds_everyone_and_reset_clears_it() -> None:
    t = throttle.Throttle()
    for i in range(throttle.GLOBAL_FREE):
        t.failed(f"10.1.{i}.1", 50.0)  # one failure each: no client back-off
    assert t.wait_s("10.9.9.9", 50.0) == 0.0
    t.failed("10.2.0.1", 50.0)
    assert t.wait_s("10.9.9.9", 50.0) == throttle.GLOBAL_WAIT_S
    t.failed("10.2.0.2", 50.0)
    assert t.wait_s("10.9.9.9", 50.0) == 2 * throttle.GLOBAL_WAIT_S
    t.reset()
    assert t.wait_s("10.9.9.9", 50.0) == 0.0 and t.wait_s("10.2.0.1", 50.0) == 0.0


def test_agent_summary_names_browser_and_system_only() -> None:
    assert agent_summary("Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101"
                         " Firefox/120.0") == "Firefox on Linux"
    assert agent_summary("Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X)"
                         " AppleWebKit/605.1.15 Version/17.0 Mobile Safari/604.1") \
        == "Safari on iOS"
    assert agent_summary("curl/8.5.0") == "curl"
    assert agent_summary("") == "other"
