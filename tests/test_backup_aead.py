"""backup/aead.py: OpenSSL's AES-256-GCM through ctypes, checked against NIST's GCM
test vectors and, on random inputs, against pyca's AESGCM (a dev dependency only)."""

from __future__ import annotations

import os

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM as PycaAESGCM

from qledge.backup import aead

# The GCM specification's (McGrew & Viega) AES-256 test cases 13, 14 and 16.
VECTORS = [
    ("00" * 32, "00" * 12, "", "", "", "530f8afbc74536b9a963b4f1c4cb738b"),
    ("00" * 32, "00" * 12, "00" * 16, "", "cea7403d4d606b6e074ec5d3baf39d18",
     "d0d1c8a799996bf0265b98b5d48ab919"),
    ("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308",
     "cafebabefacedbaddecaf888",
     "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
     "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
     "feedfacedeadbeeffeedfacedeadbeefabaddad2",
     "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
     "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662",
     "76fc6ece0f4e1768cddf8853bb2d551b"),
]


@pytest.mark.parametrize(("key", "iv", "plain", "aad", "sealed", "tag"), VECTORS)
def test_nist_vectors(key: str, iv: str, plain: str, aad: str, sealed: str, tag: str) -> None:
    cipher = aead.AESGCM(bytes.fromhex(key))
    out = cipher.encrypt(bytes.fromhex(iv), bytes.fromhex(plain), bytes.fromhex(aad))
    assert out.hex() == sealed + tag
    assert cipher.decrypt(bytes.fromhex(iv), out, bytes.fromhex(aad)).hex() == plain


def test_any_change_fails_the_tag() -> None:
    key, iv, aad = os.urandom(32), os.urandom(12), b"header"
    sealed = aead.AESGCM(key).encrypt(iv, b"a cookie worth keeping", aad)
    flipped = bytes([sealed[0] ^ 1]) + sealed[1:]
    other_key = bytes([key[0] ^ 1]) + key[1:]
    for cipher, nonce, data, extra in (
            (aead.AESGCM(key), iv, flipped, aad),
            (aead.AESGCM(key), iv, sealed[:-1] + bytes([sealed[-1] ^ 1]), aad),
            (aead.AESGCM(key), iv, sealed, b"other header"),
            (aead.AESGCM(key), os.urandom(12), sealed, aad),
            (aead.AESGCM(other_key), iv, sealed, aad),
            (aead.AESGCM(key), iv, sealed[:10], aad)):
        with pytest.raises(aead.InvalidTag):
            cipher.decrypt(nonce, data, extra)


@pytest.mark.parametrize("size", [0, 1, 15, 16, 17, 4095, 65536, 65537])
def test_same_bytes_as_pyca(size: int) -> None:
    key, iv, aad, data = os.urandom(32), os.urandom(12), os.urandom(size % 71), os.urandom(size)
    ours, theirs = aead.AESGCM(key), PycaAESGCM(key)
    assert ours.encrypt(iv, data, aad) == theirs.encrypt(iv, data, aad)
    assert ours.decrypt(iv, theirs.encrypt(iv, data, aad), aad) == data


def test_a_wrong_key_size_is_refused() -> None:
    with pytest.raises(ValueError):
        aead.AESGCM(os.urandom(16))
