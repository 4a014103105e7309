"""The documented limits of what a client may send (docs/api.md, "Limits").

One home for the numbers the field rules (tasks/spec.py, envs/spec.py, apps/spec.py,
subscriptions/spec.py) and the HTTP edge (http/inputs.py) check against, so an API
and the QingLong importer can never disagree. Strings count characters unless
"bytes".
"""

from __future__ import annotations

from typing import NamedTuple

INT64_MAX = 2**63 - 1  # SQLite INTEGER, off_t
MAX_NAME = 200  # task / cron name
MAX_LABELS = 50  # labels per task
MAX_LABEL = 100
MAX_COMMAND_BYTES = 65536  # UTF-8; one argv string (the kernel allows 128 KiB)
MAX_SCHEDULE = 256
MAX_EXTRA_SCHEDULES = 20
MAX_TZ = 64  # an IANA zone name
MAX_TIMEOUT_S = 366 * 86400
MAX_KEEP_RUNS = 1_000_000
MAX_KEEP_DAYS = 36_500
MAX_RETRIES = 10
MAX_RETRY_DELAY_S = 86400
MAX_TASK_ENV = 256  # entries in a task's own env
MAX_ENV_NAME = 256
MAX_ENV_VALUE_BYTES = 65536  # UTF-8
MAX_REMARKS = 4096
MAX_APP_NAME = 100
MAX_IDS = 1000  # ids in one /open request, envs created by one request
MAX_QUERY_TEXT = 256  # search values, client ids, other free-text query parameters



class Page(NamedTuple):
    """How many items a list endpoint answers: `default` when `limit` is not given,
    at most `most` (1 … most is accepted)."""

    default: int
    most: int


TASKS_PAGE = Page(100, 500)
RUNS_PAGE = Page(50, 200)
MESSAGES_PAGE = Page(50, 500)
# /open/crons page and size: accepted up to this, at most QL_MAX_LIST crons answered.
QL_MAX_PAGE = 1_000_000
QL_MAX_LIST = 5000

# Batches of the runtime's own work (not a client's input).
# A cancel sweep or deadline check in passing (after a cancel, a replace, a timer):
# small enough to stay a short transaction; what is left waits for the next round.
SWEEP_BATCH = 64
# "All of them": start-up, shutdown and recovery passes that must not leave a row
# behind (the receipt journal's backfill, expired deadlines, every active attempt).
UNBOUNDED = 1_000_000
