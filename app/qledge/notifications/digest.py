"""The per-channel rate limit and its digest (docs/notifications.md). Pure: no I/O.

A channel gets at most `rate_limit` messages (of a run, or a script's send())
in any `rate_window_s`; a message past that is *held* (kept pending, marked) and,
when the window has room again, every held message of that channel goes out as
ONE digest listing them. So a storm costs each channel at most `rate_limit`
messages plus one digest per window, and the delivery log keeps a row for every
message (held rows are marked digested, never dropped).
"""

from __future__ import annotations

import msgspec

from . import words
from .rules import run_link

# Lines of a digest: past this the digest says how many more there are.
MAX_ITEMS = 50


class Item(msgspec.Struct, frozen=True, kw_only=True):
    title: str
    run_id: str | None
    notify_type: str


class Digest(msgspec.Struct, frozen=True, kw_only=True):
    title: str
    body: str
    notify_type: str


def budget(limit: int, sent: int) -> int:
    """How many more a channel may send alone in the current window."""
    return max(limit - sent, 0)


def hold_until(now_ms: int, window_s: int, earliest_sent_ms: int | None) -> int:
    """When a held message's digest is due: as the window's first send leaves it."""
    start = now_ms if earliest_sent_ms is None else min(earliest_sent_ms, now_ms)
    return start + window_s * 1000


def compose(items: list[Item], *, language: str, limit: int, window_s: int,
            link: str) -> Digest:
    """The digest of `items` (oldest first). `link`: the run links' base URL ("" for
    none: the run id is shown)."""
    lines = [words.digest_head(language, limit, window_s)]
    for item in items[:MAX_ITEMS]:
        where = f" — {run_link(link, item.run_id)}" if item.run_id else ""
        lines.append(f"• {item.title.removeprefix('[qledge] ')}{where}")
    if len(items) > MAX_ITEMS:
        lines.append(words.text(language, "digest_more", len(items) - MAX_ITEMS))
    failed = any(i.notify_type == "failure" for i in items)
    return Digest(title=words.text(language, "digest_title", len(items)),
                  body="\n".join(lines), notify_type="failure" if failed else "info")
