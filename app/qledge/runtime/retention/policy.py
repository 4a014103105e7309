"""Retention's maths, pure: which terminal runs a policy deletes, which logs go."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ...settings import Profile

DAY_MS = 86_400_000
NO_LIMIT = 1 << 62
CAP_TARGET = 0.9  # once over the cap, evict down to 90% of it (no eviction every round)
# Why a log was evicted (the log API answers 410 with it).
SIZE_CAP = "SIZE_CAP"
DISK_PRESSURE = "DISK_PRESSURE"
DISK_CRITICAL = "DISK_CRITICAL"  # a task's newest finished log, only below the critical mark


class Policy(msgspec.Struct, frozen=True, kw_only=True):
    keep_runs: int  # 0 = no count limit
    keep_days: int  # 0 = no age limit


def policy_for(keep_runs: int | None, keep_days: int | None, profile: Profile) -> Policy:
    """A task's own value wins over the settings'/profile's (None = not set)."""
    return Policy(keep_runs=profile.keep_runs_per_task if keep_runs is None else keep_runs,
                  keep_days=profile.keep_days if keep_days is None else keep_days)


def bounds(policy: Policy, now: int) -> tuple[int, int]:
    """(rank above which runs go, finish time before which runs go): the SQL pre-filter."""
    keep_n = policy.keep_runs if policy.keep_runs > 0 else NO_LIMIT
    cutoff = now - policy.keep_days * DAY_MS if policy.keep_days > 0 else -1
    return keep_n, cutoff


def verdict(rank: int, finished_at_ms: int, policy: Policy, now: int) -> str | None:
    """Why a terminal run of this rank (1 = its task's newest terminal run) goes, or None."""
    if rank <= 1:
        return None
    if policy.keep_runs > 0 and rank > policy.keep_runs:
        return "KEEP_RUNS"
    if policy.keep_days > 0 and finished_at_ms < now - policy.keep_days * DAY_MS:
        return "KEEP_DAYS"
    return None


class LogFacts(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    size_bytes: int
    active: bool = False


def cap_excess(total_bytes: int, cap_bytes: int) -> int:
    """Bytes to evict for the size cap: 0 under it, else down to CAP_TARGET of it."""
    if cap_bytes <= 0 or total_bytes <= cap_bytes:
        return 0
    return total_bytes - int(cap_bytes * CAP_TARGET)


def evict_oldest(logs_oldest_first: Sequence[LogFacts], excess_bytes: int) -> list[LogFacts]:
    """The oldest logs whose sizes cover `excess_bytes`; active attempts' logs never."""
    out: list[LogFacts] = []
    left = excess_bytes
    for item in logs_oldest_first:
        if left <= 0:
            break
        if item.active:
            continue
        out.append(item)
        left -= item.size_bytes
    return out
