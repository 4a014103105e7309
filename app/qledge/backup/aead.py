"""AES-256-GCM from the OpenSSL library the interpreter already links (docs/backup.md).

Backup encryption needs an authenticated cipher and the standard library has none.
pyca `cryptography` would add 14 MB to every image (its Rust extension; the images'
size budget is 120 MB and they sit at 105–117) and has no 32-bit ARM build, while
every qledge image already carries OpenSSL's libcrypto: `hashlib` and `ssl` are built
on it. So the cipher is OpenSSL's own EVP AES-256-GCM, reached through ctypes; only
the calls are ours, the cryptography is OpenSSL's. `tests/test_backup_aead.py` checks
it against NIST's GCM vectors and, in the developer venv, against pyca's AESGCM.

The library is found where `_hashlib` loaded it (/proc/self/maps), so it is the
same copy hashlib uses, whatever its file name.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

KEY, TAG = 32, 16
_SET_IVLEN, _GET_TAG, _SET_TAG = 0x9, 0x10, 0x11  # EVP_CTRL_GCM_* (openssl/evp.h)


class InvalidTag(Exception):
    """The data, its associated data, the nonce or the key is not what was sealed."""


class CipherUnavailable(Exception):
    """No libcrypto with AES-256-GCM could be found in this process."""


def _libcrypto_path() -> str:
    import _hashlib  # noqa: F401  (loads libcrypto into the process)

    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
        if "/libcrypto.so" in path:
            return path
    raise CipherUnavailable("hashlib is not linked against a shared libcrypto")


def load() -> None:
    """Raise CipherUnavailable when this process has no usable AES-256-GCM."""
    _lib()


@functools.cache
def _lib() -> ctypes.CDLL:
    lib = ctypes.CDLL(_libcrypto_path())
    vp, cp, ip, i = ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int
    signatures: dict[str, tuple[list[type], type | None]] = {
        "EVP_CIPHER_CTX_new": ([], vp),
        "EVP_CIPHER_CTX_free": ([vp], None),
        "EVP_aes_256_gcm": ([], vp),
        "EVP_CIPHER_CTX_ctrl": ([vp, i, i, vp], i),
        "EVP_EncryptInit_ex": ([vp, vp, vp, cp, cp], i),
        "EVP_DecryptInit_ex": ([vp, vp, vp, cp, cp], i),
        "EVP_EncryptUpdate": ([vp, vp, ip, cp, i], i),
        "EVP_DecryptUpdate": ([vp, vp, ip, cp, i], i),
        "EVP_EncryptFinal_ex": ([vp, vp, ip], i),
        "EVP_DecryptFinal_ex": ([vp, vp, ip], i),
    }
    for name, (args, res) in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res
    if not lib.EVP_aes_256_gcm():
        raise CipherUnavailable("this libcrypto has no AES-256-GCM")
    return lib


def _check(ok: int, what: str) -> None:
    if ok != 1:
        raise CipherUnavailable(f"libcrypto refused {what}")


class AESGCM:
    """`encrypt` returns ciphertext + 16-byte tag; `decrypt` takes them back or raises
    InvalidTag. The same calling convention as pyca's AESGCM, for a 32-byte key."""

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY:
            raise ValueError("AES-256-GCM takes a 32-byte key")
        self._key = key
        self._lib = _lib()

    def encrypt(self, nonce: bytes, data: bytes, aad: bytes) -> bytes:
        return self._run(nonce, data, aad, None)

    def decrypt(self, nonce: bytes, data: bytes, aad: bytes) -> bytes:
        if len(data) < TAG:
            raise InvalidTag()
        return self._run(nonce, data[:-TAG], aad, data[-TAG:])

    def _run(self, nonce: bytes, data: bytes, aad: bytes, tag: bytes | None) -> bytes:
        lib, sealing = self._lib, tag is None
        init = lib.EVP_EncryptInit_ex if sealing else lib.EVP_DecryptInit_ex
        update = lib.EVP_EncryptUpdate if sealing else lib.EVP_DecryptUpdate
        final = lib.EVP_EncryptFinal_ex if sealing else lib.EVP_DecryptFinal_ex
        ctx = lib.EVP_CIPHER_CTX_new()
        if not ctx:
            raise MemoryError("EVP_CIPHER_CTX_new")
        try:
            n = ctypes.c_int(0)
            _check(init(ctx, lib.EVP_aes_256_gcm(), None, None, None), "the cipher")
            _check(lib.EVP_CIPHER_CTX_ctrl(ctx, _SET_IVLEN, len(nonce), None), "the nonce size")
            _check(init(ctx, None, None, self._key, nonce), "the key")
            if aad:
                _check(update(ctx, None, ctypes.byref(n), aad, len(aad)), "the aad")
            out = ctypes.create_string_buffer(len(data) + TAG)
            _check(update(ctx, out, ctypes.byref(n), data, len(data)), "the data")
            done = n.value
            if tag is not None:
                tag_buf = ctypes.create_string_buffer(tag, TAG)
                _check(lib.EVP_CIPHER_CTX_ctrl(ctx, _SET_TAG, TAG, tag_buf), "the tag")
            tail = ctypes.c_void_p(ctypes.addressof(out) + done)
            if final(ctx, tail, ctypes.byref(n)) != 1:
                if sealing:
                    raise CipherUnavailable("libcrypto refused to finish")
                raise InvalidTag()
            done += n.value
            if tag is not None:
                return out.raw[:done]
            got = ctypes.create_string_buffer(TAG)
            _check(lib.EVP_CIPHER_CTX_ctrl(ctx, _GET_TAG, TAG, got), "the tag")
            return out.raw[:done] + got.raw
        finally:
            lib.EVP_CIPHER_CTX_free(ctx)
