from __future__ import annotations

import json
import string
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qledge.ids import uuid7
from qledge.receipts.codec import (
    MAX_JSON_DEPTH,
    MAX_RECEIPT_BYTES,
    Receipt,
    ReceiptReason,
    Rejected,
    decode,
    encode,
    new_token,
    token_hash,
    token_matches,
)

R = ReceiptReason
RUN_ID = "0190f3a2-7c41-7d2e-9b3a-5f1e2d3c4b5a"
ATTEMPT_ID = "0190f3a2-7c41-7f00-a1b2-c3d4e5f60718"
TOKEN = "Abc_def-0123456789xyzXYZ"
INT64_MAX = 2**63 - 1


def fields(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "schemaVersion": 1,
        "runId": RUN_ID,
        "attemptId": ATTEMPT_ID,
        "callbackSequence": 1,
        "token": TOKEN,
        "startedAtMs": 1_700_000_000_000,
        "finishedAtMs": 1_700_000_000_250,
        "exitCode": 0,
    }
    base.update(overrides)
    return base


def raw(**overrides: Any) -> bytes:
    return json.dumps(fields(**overrides), separators=(",", ":")).encode()


def without(key: str) -> bytes:
    data = fields()
    del data[key]
    return json.dumps(data, separators=(",", ":")).encode()


VALID = raw()

BAD: list[tuple[str, bytes, ReceiptReason]] = [
    (
        "too-large",
        VALID[:-1] + b" " * (MAX_RECEIPT_BYTES - len(VALID) + 1) + b"}",
        R.RECEIPT_TOO_LARGE,
    ),
    ("too-large-garbage", b"\xff" * 5000, R.RECEIPT_TOO_LARGE),
    ("empty", b"", R.RECEIPT_EMPTY),
    ("whitespace-only", b" \n\t", R.RECEIPT_EMPTY),
    ("not-utf8", VALID.replace(TOKEN.encode(), b"\xc3\x28" + TOKEN.encode()), R.RECEIPT_NOT_UTF8),
    ("utf8-surrogate-bytes", b'{"a":"\xed\xa0\x80"}', R.RECEIPT_NOT_UTF8),
    ("too-deep", b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1), R.RECEIPT_TOO_DEEP),
    ("too-deep-unclosed", b"[" * 4096, R.RECEIPT_TOO_DEEP),
    ("trailing-garbage", VALID + b"x", R.RECEIPT_MALFORMED_JSON),
    ("trailing-second-object", VALID + VALID, R.RECEIPT_MALFORMED_JSON),
    ("truncated", VALID[:-1], R.RECEIPT_MALFORMED_JSON),
    ("bom", b"\xef\xbb\xbf" + VALID, R.RECEIPT_MALFORMED_JSON),
    ("lone-surrogate-escape", raw(token="\ud800"), R.RECEIPT_MALFORMED_JSON),
    ("single-quotes", VALID.replace(b'"', b"'"), R.RECEIPT_MALFORMED_JSON),
    ("array", b"[" + VALID + b"]", R.RECEIPT_NOT_OBJECT),
    ("number", b"1", R.RECEIPT_NOT_OBJECT),
    ("null", b"null", R.RECEIPT_NOT_OBJECT),
    ("dup-top", VALID[:-1] + b',"exitCode":1}', R.RECEIPT_DUPLICATE_KEY),
    ("dup-top-escaped", VALID[:-1] + b',"exit\\u0043ode":1}', R.RECEIPT_DUPLICATE_KEY),
    ("dup-nested", VALID[:-1] + b',"x":{"a":1,"a":2}}', R.RECEIPT_DUPLICATE_KEY),
    ("dup-deep-in-array", VALID[:-1] + b',"x":[1,{"b":{"c":0,"c":0}}]}', R.RECEIPT_DUPLICATE_KEY),
    ("nan", VALID.replace(b'"exitCode":0', b'"exitCode":NaN'), R.RECEIPT_NON_FINITE_NUMBER),
    (
        "infinity",
        VALID.replace(b'"exitCode":0', b'"exitCode":Infinity'),
        R.RECEIPT_NON_FINITE_NUMBER,
    ),
    ("-infinity", raw()[:-1] + b',"x":-Infinity}', R.RECEIPT_NON_FINITE_NUMBER),
    ("unknown-field", raw()[:-1] + b',"stdout":"hi"}', R.RECEIPT_UNKNOWN_FIELD),
    ("snake-case-field", VALID.replace(b"exitCode", b"exit_code"), R.RECEIPT_UNKNOWN_FIELD),
    ("missing-field", without("token"), R.RECEIPT_MISSING_FIELD),
    ("empty-object", b"{}", R.RECEIPT_MISSING_FIELD),
    ("float-time", raw(startedAtMs=1.5), R.RECEIPT_WRONG_TYPE),
    ("integral-float-time", raw(finishedAtMs=1_700_000_000_250.0), R.RECEIPT_WRONG_TYPE),
    (
        "exponent-time",
        VALID.replace(b'"startedAtMs":1700000000000', b'"startedAtMs":17e11'),
        R.RECEIPT_WRONG_TYPE,
    ),
    ("huge-float", VALID.replace(b'"exitCode":0', b'"exitCode":1e400'), R.RECEIPT_WRONG_TYPE),
    ("bool-exit-code", raw(exitCode=False), R.RECEIPT_WRONG_TYPE),
    ("bool-schema", raw(schemaVersion=True), R.RECEIPT_WRONG_TYPE),
    ("string-exit-code", raw(exitCode="0"), R.RECEIPT_WRONG_TYPE),
    ("null-token", raw(token=None), R.RECEIPT_WRONG_TYPE),
    ("int-run-id", raw(runId=7), R.RECEIPT_WRONG_TYPE),
    ("object-time", raw(startedAtMs={}), R.RECEIPT_WRONG_TYPE),
    ("schema-2", raw(schemaVersion=2), R.RECEIPT_BAD_SCHEMA_VERSION),
    ("schema-0", raw(schemaVersion=0), R.RECEIPT_BAD_SCHEMA_VERSION),
    ("uppercase-uuid", raw(runId=RUN_ID.upper()), R.RECEIPT_BAD_ID),
    ("uuid-v4", raw(attemptId="9b2f3c1e-4a5d-4e6f-8a7b-1c2d3e4f5a6b"), R.RECEIPT_BAD_ID),
    ("uuid-no-dashes", raw(attemptId=ATTEMPT_ID.replace("-", "")), R.RECEIPT_BAD_ID),
    ("uuid-trailing-newline", raw(attemptId=ATTEMPT_ID + "\n"), R.RECEIPT_BAD_ID),
    ("uuid-braces", raw(runId="{" + RUN_ID + "}"), R.RECEIPT_BAD_ID),
    ("sequence-0", raw(callbackSequence=0), R.RECEIPT_BAD_SEQUENCE),
    ("sequence-negative", raw(callbackSequence=-3), R.RECEIPT_BAD_SEQUENCE),
    ("sequence-over-int64", raw(callbackSequence=INT64_MAX + 1), R.RECEIPT_BAD_SEQUENCE),
    ("token-short", raw(token="a" * 15), R.RECEIPT_BAD_TOKEN),
    ("token-long", raw(token="a" * 129), R.RECEIPT_BAD_TOKEN),
    ("token-charset", raw(token="abcdefghijklmnop+/="), R.RECEIPT_BAD_TOKEN),
    ("token-space", raw(token="abcdefgh ijklmnop"), R.RECEIPT_BAD_TOKEN),
    ("token-non-ascii", raw(token="abcdefghijklmnoé"), R.RECEIPT_BAD_TOKEN),
    ("token-newline", raw(token="abcdefghijklmnop\n"), R.RECEIPT_BAD_TOKEN),
    ("negative-start", raw(startedAtMs=-1), R.RECEIPT_BAD_TIME),
    ("negative-finish", raw(startedAtMs=0, finishedAtMs=-1), R.RECEIPT_BAD_TIME),
    ("time-over-int64", raw(finishedAtMs=INT64_MAX + 1), R.RECEIPT_BAD_TIME),
    ("finished-before-started", raw(startedAtMs=10, finishedAtMs=9), R.RECEIPT_TIME_ORDER),
    ("exit-256", raw(exitCode=256), R.RECEIPT_BAD_EXIT_CODE),
    ("exit-minus-1", raw(exitCode=-1), R.RECEIPT_BAD_EXIT_CODE),
    ("negative-log-bytes", raw(logBytes=-1), R.RECEIPT_BAD_LOG_BYTES),
    ("log-bytes-over-int64", raw(logBytes=INT64_MAX + 1), R.RECEIPT_BAD_LOG_BYTES),
    ("null-log-bytes", raw(logBytes=None), R.RECEIPT_WRONG_TYPE),
    ("string-log-bytes", raw(logBytes="12"), R.RECEIPT_WRONG_TYPE),
    ("dup-log-bytes", raw(logBytes=1)[:-1] + b',"logBytes":2}', R.RECEIPT_DUPLICATE_KEY),
    ("leftovers-0", raw(leftoverProcesses=0), R.RECEIPT_BAD_LEFTOVER_COUNT),
    ("leftovers-negative", raw(leftoverProcesses=-2), R.RECEIPT_BAD_LEFTOVER_COUNT),
    ("leftovers-over-int32", raw(leftoverProcesses=2**31), R.RECEIPT_BAD_LEFTOVER_COUNT),
    ("leftovers-null", raw(leftoverProcesses=None), R.RECEIPT_WRONG_TYPE),
    ("leftovers-string", raw(leftoverProcesses="3"), R.RECEIPT_WRONG_TYPE),
    ("leftovers-float", raw(leftoverProcesses=3.0), R.RECEIPT_WRONG_TYPE),
    ("leftovers-dup", raw(leftoverProcesses=1)[:-1] + b',"leftoverProcesses":2}',
     R.RECEIPT_DUPLICATE_KEY),
]


def test_valid_receipt_decodes() -> None:
    receipt = decode(VALID)
    assert receipt == Receipt(
        schema_version=1,
        run_id=RUN_ID,
        attempt_id=ATTEMPT_ID,
        callback_sequence=1,
        token=TOKEN,
        started_at_ms=1_700_000_000_000,
        finished_at_ms=1_700_000_000_250,
        exit_code=0,
    )


@pytest.mark.parametrize(
    ("data", "reason"), [(d, r) for _, d, r in BAD], ids=[n for n, _, _ in BAD]
)
def test_bad_receipt_is_rejected_with_stable_reason(data: bytes, reason: ReceiptReason) -> None:
    assert decode(data) == Rejected(reason)
    assert decode(data) == Rejected(reason)  # deterministic: same bytes, same answer


def test_every_decode_reason_is_covered_by_the_table() -> None:
    store_level = {R.RECEIPT_NOT_REGULAR}
    assert {r for _, _, r in BAD} == set(ReceiptReason) - store_level


@pytest.mark.parametrize(
    "data",
    [
        VALID.replace(b":", b" : "),  # insignificant whitespace is JSON, not a new meaning
        b"\n" + VALID + b"\n",
        json.dumps(dict(reversed(fields().items()))).encode(),
        raw(exitCode=255, startedAtMs=0, finishedAtMs=0, token="a" * 128),
        raw(token="-" * 16, callbackSequence=INT64_MAX, finishedAtMs=INT64_MAX),
    ],
)
def test_non_canonical_but_valid_json_is_accepted(data: bytes) -> None:
    assert isinstance(decode(data), Receipt)


def test_log_bytes_is_optional_and_round_trips() -> None:
    """The launcher adds logBytes (the log's length at exit) when stdout is a file;
    receipts without it (older launchers, stdout not a file) stay valid."""
    with_len = raw(logBytes=12345)
    receipt = decode(with_len)
    assert isinstance(receipt, Receipt) and receipt.log_bytes == 12345
    assert encode(receipt) == with_len
    plain = decode(VALID)
    assert isinstance(plain, Receipt) and plain.log_bytes is msgspec.UNSET
    assert encode(plain) == VALID
    assert isinstance(decode(raw(logBytes=0)), Receipt)


def test_size_boundary_is_4096_bytes() -> None:
    padded = VALID[:-1] + b" " * (MAX_RECEIPT_BYTES - len(VALID)) + b"}"
    assert len(padded) == MAX_RECEIPT_BYTES
    assert isinstance(decode(padded), Receipt)


def test_encode_is_the_canonical_launcher_format() -> None:
    receipt = decode(VALID)
    assert isinstance(receipt, Receipt)
    expected = (
        '{"schemaVersion":1,"runId":"' + RUN_ID + '","attemptId":"' + ATTEMPT_ID + '",'
        '"callbackSequence":1,"token":"' + TOKEN + '","startedAtMs":1700000000000,'
        '"finishedAtMs":1700000000250,"exitCode":0}'
    )
    assert encode(receipt) == expected.encode() == VALID


def test_leftover_processes_is_optional_and_last() -> None:
    receipt = decode(raw(leftoverProcesses=500))
    assert isinstance(receipt, Receipt)
    assert receipt.leftover_processes == 500
    assert encode(receipt) == VALID[:-1] + b',"leftoverProcesses":500}'
    plain = decode(VALID)
    assert isinstance(plain, Receipt) and plain.leftover_processes is msgspec.UNSET
    assert b"leftoverProcesses" not in encode(plain)


def test_both_optional_fields_in_the_launchers_order() -> None:
    """ql-launch writes logBytes, then leftoverProcesses, before the closing brace."""
    both = VALID[:-1] + b',"logBytes":77,"leftoverProcesses":3}'
    receipt = decode(both)
    assert isinstance(receipt, Receipt)
    assert (receipt.log_bytes, receipt.leftover_processes) == (77, 3)
    assert encode(receipt) == both
    # Either order decodes (JSON objects are unordered); a bad one still names its field.
    assert decode(VALID[:-1] + b',"leftoverProcesses":3,"logBytes":77}') == receipt
    bad = decode(VALID[:-1] + b',"logBytes":77,"leftoverProcesses":0}')
    assert bad == Rejected(R.RECEIPT_BAD_LEFTOVER_COUNT)
    bad = decode(VALID[:-1] + b',"logBytes":-1,"leftoverProcesses":3}')
    assert bad == Rejected(R.RECEIPT_BAD_LOG_BYTES)


def test_encode_refuses_an_invalid_receipt() -> None:
    receipt = decode(VALID)
    assert isinstance(receipt, Receipt)
    with pytest.raises(ValueError, match="RECEIPT_BAD_EXIT_CODE"):
        encode(Receipt(**{**_kwargs(receipt), "exit_code": 300}))


def _kwargs(receipt: Receipt) -> dict[str, Any]:
    return {f: getattr(receipt, f) for f in receipt.__struct_fields__}


# -- hypothesis ---------------------------------------------------------------

TOKEN_ALPHABET = string.ascii_letters + string.digits + "_-"


@st.composite
def uuid7_text(draw: st.DrawFn) -> str:
    ms = draw(st.integers(0, 2**48 - 1))
    rand_a = draw(st.integers(0, 2**12 - 1))
    rand_b = draw(st.integers(0, 2**62 - 1))
    value = ms << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    h = f"{value:032x}"
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


@st.composite
def receipts(draw: st.DrawFn) -> Receipt:
    started = draw(st.integers(0, INT64_MAX))
    leftovers = draw(st.one_of(st.just(msgspec.UNSET), st.integers(1, 2**31 - 1)))
    log_bytes = draw(st.one_of(st.just(msgspec.UNSET), st.integers(0, INT64_MAX)))
    return Receipt(
        schema_version=1,
        run_id=draw(uuid7_text()),
        attempt_id=draw(uuid7_text()),
        callback_sequence=draw(st.integers(1, INT64_MAX)),
        token=draw(st.text(TOKEN_ALPHABET, min_size=16, max_size=128)),
        started_at_ms=started,
        finished_at_ms=draw(st.integers(started, INT64_MAX)),
        exit_code=draw(st.integers(0, 255)),
        log_bytes=log_bytes,
        leftover_processes=leftovers,
    )


@given(receipts())
def test_round_trip_and_canonical_bytes(receipt: Receipt) -> None:
    data = encode(receipt)
    assert decode(data) == receipt
    assert len(data) <= MAX_RECEIPT_BYTES
    by_hand = (
        f'{{"schemaVersion":1,"runId":"{receipt.run_id}","attemptId":"{receipt.attempt_id}",'
        f'"callbackSequence":{receipt.callback_sequence},"token":"{receipt.token}",'
        f'"startedAtMs":{receipt.started_at_ms},"finishedAtMs":{receipt.finished_at_ms},'
        f'"exitCode":{receipt.exit_code}'
        + ("" if receipt.log_bytes is msgspec.UNSET else f',"logBytes":{receipt.log_bytes}')
        + ("" if receipt.leftover_processes is msgspec.UNSET
           else f',"leftoverProcesses":{receipt.leftover_processes}')
        + "}"
    )
    assert data == by_hand.encode()


def assert_total(data: bytes) -> None:
    result = decode(data)
    assert isinstance(result, Receipt | Rejected)
    if isinstance(result, Rejected):
        assert result.reason in set(ReceiptReason)
        assert result.reason is not R.RECEIPT_NOT_REGULAR
    else:
        assert decode(encode(result)) == result  # anything accepted is re-encodable
    assert decode(data) == result


@settings(max_examples=500)
@given(st.binary(max_size=MAX_RECEIPT_BYTES + 16))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    assert_total(data)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = fields()
    keys = list(data)
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            data[draw(st.sampled_from(keys))] = draw(json_values)
        elif action == "delete":
            data.pop(draw(st.sampled_from(keys)), None)
        else:
            data[draw(st.text(max_size=16))] = draw(json_values)
    text = json.dumps(data, separators=(",", ":"))  # allow_nan: emits NaN/Infinity
    if draw(st.booleans()) and text.startswith("{") and len(text) > 2:
        text = text[:-1] + "," + text[1:]  # duplicates every key
    blob = text.encode("utf-8", "surrogatepass")
    if draw(st.booleans()):
        at = draw(st.integers(0, len(blob)))
        blob = blob[:at] + draw(st.binary(max_size=8)) + blob[at + draw(st.integers(0, 4)) :]
    return blob


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_receipts_never_raise(data: bytes) -> None:
    assert_total(data)


def test_token_hash_and_match() -> None:
    token = new_token()
    assert len(token) == 43
    assert decode(raw(token=token)) != Rejected(R.RECEIPT_BAD_TOKEN)
    digest = token_hash(token)
    assert len(digest) == 32
    assert token_matches(token, digest)
    assert not token_matches(token + "x", digest)
    assert not token_matches(token, b"\x00" * 32)
    assert not token_matches(token, digest[:16])
    assert token_hash("abc").hex() == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )
    assert new_token() != token


def test_fresh_ids_validate() -> None:
    assert isinstance(decode(raw(runId=uuid7(), attemptId=uuid7())), Receipt)
