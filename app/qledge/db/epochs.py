"""SQL of a node's lease epoch as the completion side reads it (docs/fleet.md, "Fencing").

Only a fleet (PostgreSQL) has a `nodes` table; an attempt carries `node_epoch` there
alone, so SQLite never reaches this module.
"""

from __future__ import annotations

from . import dialect
from .interface import Tx

# FOR SHARE on PostgreSQL: a takeover's `UPDATE nodes SET epoch = epoch + 1` waits for
# the completion that read the row, or the completion waits and sees the new epoch —
# never a receipt applied under an epoch a committed takeover already ended.
# A node id renamed keeps its rows by name: the latest registration speaks for it.
_SELECT = ("SELECT epoch FROM nodes WHERE node_id = ?"
           " ORDER BY registered_at_ms DESC LIMIT 1")
_CURRENT = {dialect.SQLITE: _SELECT, dialect.POSTGRESQL: _SELECT + " FOR SHARE"}


async def current_epoch(tx: Tx, node_id: str) -> int | None:
    """The owner's epoch now (None: no row — the node is unknown to the fleet). Inside a
    write transaction on PostgreSQL (a read-only one refuses FOR SHARE)."""
    row = await tx.one(_CURRENT[tx.dialect], (node_id,))
    return int(row["epoch"]) if row else None
