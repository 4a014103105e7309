"""TOTP (RFC 6238) over HOTP (RFC 4226): 6 digits, 30 s steps, HMAC-SHA1 — what every
authenticator app reads from an `otpauth://` URI."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import struct
from urllib.parse import quote

STEP_S = 30
DIGITS = 6
WINDOW = 1  # steps either side of now accepted (clock drift)


def new_secret() -> str:
    """160 random bits in base32 without padding (32 characters)."""
    return base64.b32encode(secrets.token_bytes(20)).decode("ascii").rstrip("=")


def _key(secret_b32: str) -> bytes:
    clean = secret_b32.replace(" ", "").upper()
    return base64.b32decode(clean + "=" * (-len(clean) % 8))


def hotp(key: bytes, counter: int, *, digits: int = DIGITS,
         digest: str = "sha1") -> str:
    mac = hmac.new(key, struct.pack(">Q", counter), getattr(hashlib, digest)).digest()
    offset = mac[-1] & 0x0F
    value = struct.unpack(">I", mac[offset:offset + 4])[0] & 0x7FFFFFFF
    return str(value % 10 ** digits).zfill(digits)


def totp(key: bytes, at_s: float, *, digits: int = DIGITS, digest: str = "sha1") -> str:
    return hotp(key, int(at_s // STEP_S), digits=digits, digest=digest)


def matching_step(secret_b32: str, code: str, at_s: float, *, after_step: int = -1
                  ) -> int | None:
    """The time step `code` is valid for within the window around `at_s`, if any and
    later than `after_step` (a code is used once: the caller stores the step)."""
    code = code.strip().replace(" ", "")
    if len(code) != DIGITS or not code.isdigit():
        return None
    key = _key(secret_b32)
    now = int(at_s // STEP_S)
    for step in range(now - WINDOW, now + WINDOW + 1):
        if step > after_step and hmac.compare_digest(hotp(key, step), code):
            return step
    return None


def uri(secret_b32: str, *, account: str, issuer: str = "qledge") -> str:
    label = quote(f"{issuer}:{account}", safe=":@")
    return (f"otpauth://totp/{label}?secret={secret_b32}&issuer={quote(issuer)}"
            f"&algorithm=SHA1&digits={DIGITS}&period={STEP_S}")
