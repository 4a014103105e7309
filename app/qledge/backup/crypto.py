"""Optional encryption of a backup with a passphrase (docs/backup.md, "Encryption").

AES-256-GCM (OpenSSL's, through `backup/aead.py`), chunked so a stream of any size is sealed and
opened in bounded memory, each chunk authenticated on its own (the STREAM
construction, as in age or Tink's streaming AEAD):

    header  = MAGIC (12) | log2 N (1) | r (1) | p (1) | salt (16) | nonce prefix (7)
              | passphrase check (32)                                     = 70 bytes
    chunk i = AES-256-GCM(key, nonce = prefix | i as 4 bytes | last flag, plaintext
              of CHUNK bytes (the last: 0..CHUNK), aad = the header)  = len + 16 bytes

The key is scrypt(passphrase, salt, N, r, p) (hashlib, OpenSSL's), 64 bytes: the first
32 the AES key, the last 32 an HMAC key whose MAC of a fixed text is the passphrase
check, so a wrong passphrase is told apart from a damaged archive before any chunk
is read. The counter and the last flag in each nonce make a reordered, dropped,
duplicated or cut-off chunk fail its tag: a truncated archive is an error, never a
shorter plaintext. The header is authenticated as every chunk's associated data.

Every image has the cipher (OpenSSL's libcrypto, which hashlib is built on); a Python
whose hashlib is not linked to a shared libcrypto with AES-256-GCM raises
`EncryptionUnavailable` before any work.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import os
from typing import IO, Any

from . import aead
from .errors import BackupInvalid

MAGIC = b"qledge-enc1\n"
SALT, PREFIX, CHECK = 16, 7, 32
HEADER = len(MAGIC) + 3 + SALT + PREFIX + CHECK
CHUNK = 64 * 1024
TAG = 16
# scrypt at N=2^15, r=8: 32 MiB and ~0.1 s on a PC, ~1 s on a Pi 3; what a reader
# accepts is bounded so a hostile header cannot ask for gigabytes.
N_LOG2, R, P = 15, 8, 1
MAX_N_LOG2, MAX_R, MAX_P = 20, 16, 4
MIN_PASSPHRASE = 8
_CHECK_TEXT = b"qledge backup passphrase check v1"


class EncryptionUnavailable(BackupInvalid):
    def __init__(self) -> None:
        super().__init__("BACKUP_ENCRYPTION_UNAVAILABLE", "encrypted backups need OpenSSL's"
                         " AES-256-GCM, which this Python's libcrypto does not offer")


def require() -> None:
    """Raise EncryptionUnavailable before any work where the cipher is missing."""
    try:
        aead.load()
    except aead.CipherUnavailable:
        raise EncryptionUnavailable() from None


def _aead(key: bytes) -> aead.AESGCM:
    require()
    return aead.AESGCM(key)


def check_passphrase(passphrase: str) -> bytes:
    if len(passphrase) < MIN_PASSPHRASE:
        raise BackupInvalid("BACKUP_PASSPHRASE_SHORT", "a backup passphrase needs at least"
                            f" {MIN_PASSPHRASE} characters", min=MIN_PASSPHRASE)
    return passphrase.encode()


def _derive(passphrase: bytes, salt: bytes, n_log2: int, r: int, p: int) -> tuple[bytes, bytes]:
    key = hashlib.scrypt(passphrase, salt=salt, n=1 << n_log2, r=r, p=p, dklen=64,
                         maxmem=256 * r * (1 << n_log2) + 1024**2)
    return key[:32], hmac.new(key[32:], _CHECK_TEXT, hashlib.sha256).digest()


def _nonce(prefix: bytes, counter: int, last: bool) -> bytes:
    if counter >= 1 << 32:
        raise BackupInvalid("BACKUP_ENCRYPTED_TOO_LARGE", "over 2^32 chunks (256 TiB)")
    return prefix + counter.to_bytes(4, "big") + (b"\x01" if last else b"\x00")


def is_encrypted(head: bytes) -> bool:
    return head.startswith(MAGIC)


class EncryptingWriter:
    """A file to write the archive into; `finish()` seals the last chunk (then the
    underlying file is the caller's to flush and close)."""

    def __init__(self, out: IO[bytes], passphrase: bytes) -> None:
        salt, prefix = os.urandom(SALT), os.urandom(PREFIX)
        key, check = _derive(passphrase, salt, N_LOG2, R, P)
        self.aead = _aead(key)
        self.header = MAGIC + bytes((N_LOG2, R, P)) + salt + prefix + check
        self.prefix, self.out = prefix, out
        self.buf = bytearray()
        self.counter = 0
        out.write(self.header)

    def write(self, data: bytes) -> int:
        self.buf += data
        # Strictly more than a chunk: the last chunk (sealed by finish) is never empty
        # of meaning, and a full chunk is never mistaken for the last.
        while len(self.buf) > CHUNK:
            self._seal(bytes(self.buf[:CHUNK]), last=False)
            del self.buf[:CHUNK]
        return len(data)

    def flush(self) -> None:
        self.out.flush()

    def finish(self) -> None:
        self._seal(bytes(self.buf), last=True)
        self.buf.clear()

    def _seal(self, plain: bytes, *, last: bool) -> None:
        nonce = _nonce(self.prefix, self.counter, last)
        self.out.write(self.aead.encrypt(nonce, plain, self.header))
        self.counter += 1


def _read_exactly(src: IO[bytes], n: int) -> bytes:
    parts, left = [], n
    while left:
        data = src.read(left)
        if not data:
            break
        parts.append(data)
        left -= len(data)
    return b"".join(parts)


class DecryptingReader(io.RawIOBase):
    """The plaintext of an encrypted archive, read as a stream (one chunk ahead)."""

    def __init__(self, src: IO[bytes], passphrase: bytes) -> None:
        header = _read_exactly(src, HEADER)
        if len(header) < HEADER or not is_encrypted(header):
            raise BackupInvalid("BACKUP_NOT_ENCRYPTED", "not an encrypted qledge backup")
        n_log2, r, p = header[len(MAGIC):len(MAGIC) + 3]
        if not (10 <= n_log2 <= MAX_N_LOG2 and 1 <= r <= MAX_R and 1 <= p <= MAX_P):
            raise BackupInvalid("BACKUP_ENCRYPTED_DAMAGED", "the encryption header is"
                                " damaged (key parameters out of range)")
        at = len(MAGIC) + 3
        salt, prefix = header[at:at + SALT], header[at + SALT:at + SALT + PREFIX]
        key, check = _derive(passphrase, salt, n_log2, r, p)
        if not hmac.compare_digest(check, header[-CHECK:]):
            raise BackupInvalid("BACKUP_PASSPHRASE_WRONG", "wrong passphrase for this backup")
        self.aead, self.header, self.prefix, self.src = _aead(key), header, prefix, src
        self.counter = 0
        self.ahead = _read_exactly(src, CHUNK + TAG)
        self.plain = b""
        self.done = False

    def readable(self) -> bool:
        return True

    def _next(self) -> None:
        sealed = self.ahead
        following = _read_exactly(self.src, CHUNK + TAG) if len(sealed) == CHUNK + TAG else b""
        last = not following
        if len(sealed) < TAG:
            raise BackupInvalid("BACKUP_ENCRYPTED_TRUNCATED", "the encrypted backup is cut"
                                " short")
        try:
            self.plain = self.aead.decrypt(_nonce(self.prefix, self.counter, last), sealed,
                                           self.header)
        except aead.InvalidTag:
            raise BackupInvalid(
                "BACKUP_ENCRYPTED_TRUNCATED" if last else "BACKUP_ENCRYPTED_DAMAGED",
                f"encrypted chunk {self.counter} does not authenticate: the backup is"
                f" {'cut short' if last else 'damaged or altered'}",
                chunk=self.counter) from None
        self.counter += 1
        self.ahead = following
        self.done = last

    def readinto(self, b: Any) -> int:
        while not self.plain and not self.done:
            self._next()
        n = min(len(b), len(self.plain))
        b[:n] = self.plain[:n]
        self.plain = self.plain[n:]
        return n


def opened(src: IO[bytes], passphrase: bytes | None) -> IO[bytes]:
    """`src` as the archive's plaintext: decrypted if it is encrypted (which then needs
    the passphrase), else as it is (a passphrase given for a plain archive is an error:
    the person expected an encrypted one)."""
    head = src.peek(len(MAGIC))[:len(MAGIC)] if hasattr(src, "peek") else b""
    if is_encrypted(head):
        if passphrase is None:
            raise BackupInvalid("BACKUP_PASSPHRASE_NEEDED", "this backup is encrypted: give"
                                " its passphrase")
        return io.BufferedReader(DecryptingReader(src, passphrase), CHUNK)
    if passphrase is not None:
        raise BackupInvalid("BACKUP_NOT_ENCRYPTED", "a passphrase was given but this backup"
                            " is not encrypted")
    return src
