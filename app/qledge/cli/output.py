"""Where the CLI's messages go: the log's format and level, and the one-line error."""

from __future__ import annotations

import logging
import os
import sys


def setup_logging() -> None:
    logging.basicConfig(
        level=os.environ.get("QLEDGE_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # aiosqlite's DEBUG lines print every statement with its parameters: env values,
    # subscription credentials. They never reach the log, whatever QLEDGE_LOG_LEVEL says.
    logging.getLogger("aiosqlite").setLevel(logging.INFO)


def fail(message: str, code: int = 2) -> int:
    print(f"qledge: {message}", file=sys.stderr)
    return code
