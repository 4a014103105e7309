from __future__ import annotations

import uuid
from collections import Counter

from qledge import ids


def test_uuid7_is_canonical_and_time_ordered() -> None:
    a, b = ids.uuid7(1000), ids.uuid7(2000)
    assert ids.is_uuid7(a) and uuid.UUID(a).version == 7
    assert a < b
    assert not ids.is_uuid7(a.upper())
    assert not ids.is_uuid7(str(uuid.uuid4()))


def test_shard_key_is_uniform_within_one_millisecond() -> None:
    # all ids share the timestamp prefix; the shard must still spread
    counts = Counter(ids.shard_key(ids.uuid7(1_700_000_000_000)) for _ in range(25_600))
    assert len(counts) == 256
    assert max(counts.values()) < 3 * 100
