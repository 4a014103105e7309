"""Completion receipts: the evidence ql-launch leaves behind (SPEC §4-§5).

A receipt is never a fact by itself; it becomes one when the CompletionService
consumes it in a transaction. This package only decodes it strictly and moves
files around safely inside the receipts root.
"""

from __future__ import annotations

from qledge.receipts.codec import (
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
from qledge.receipts.store import ReceiptStore, UnsafeStore, UnsupportedVolume, probe

__all__ = [
    "MAX_RECEIPT_BYTES",
    "Receipt",
    "ReceiptReason",
    "ReceiptStore",
    "Rejected",
    "UnsafeStore",
    "UnsupportedVolume",
    "decode",
    "encode",
    "new_token",
    "probe",
    "token_hash",
    "token_matches",
]
