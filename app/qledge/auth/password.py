"""The panel password: scrypt from hashlib (memory-hard, standard library).

Stored as `scrypt$<n>$<r>$<p>$<salt b64>$<hash b64>`, so the parameters can grow
later without breaking old hashes. N=2**14, r=8, p=1 uses 16 MiB of memory per check
(128·N·r bytes); docs/security.md gives the measured time here and on a Raspberry Pi.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

N = 1 << 14
R = 8
P = 1
DKLEN = 32
SALT_BYTES = 16
MIN_LENGTH = 8
MAX_LENGTH = 256
# hashlib refuses a check above its maxmem default (32 MiB); give it room for N·r.
_MAXMEM = 128 * N * R * 2


class WeakPassword(ValueError):
    """A new password the rules refuse (too short or too long)."""


def check_new(password: str) -> None:
    if len(password) < MIN_LENGTH:
        raise WeakPassword(f"a password needs at least {MIN_LENGTH} characters")
    if len(password) > MAX_LENGTH:
        raise WeakPassword(f"a password has at most {MAX_LENGTH} characters")


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def hash_password(password: str, *, n: int = N, r: int = R, p: int = P) -> str:
    salt = secrets.token_bytes(SALT_BYTES)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, dklen=DKLEN,
                            maxmem=128 * n * r * 2)
    return f"scrypt${n}${r}${p}${_b64(salt)}${_b64(digest)}"


def verify_password(password: str, stored: str) -> bool:
    """True when `password` matches `stored` (constant-time comparison); a malformed
    stored value matches nothing."""
    try:
        kind, n_s, r_s, p_s, salt_s, digest_s = stored.split("$")
        n, r, p = int(n_s), int(r_s), int(p_s)
        salt, digest = base64.b64decode(salt_s), base64.b64decode(digest_s)
    except ValueError:
        return False
    if kind != "scrypt" or not (1 < n <= 1 << 20 and 0 < r <= 32 and 0 < p <= 16):
        return False
    if len(password) > MAX_LENGTH:
        return False
    got = hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, dklen=len(digest),
                         maxmem=128 * n * r * 2)
    return hmac.compare_digest(got, digest)
