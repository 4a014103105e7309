"""A task's spawn environment against the kernel's execve(2) size limits.

Linux refuses an execve with E2BIG — the spawn fails and the run ends
`SPAWN_FAILED`, for every run of every task when the culprit is a global env —
when

* one `NAME=value` string (or one argument) is longer than MAX_ARG_STRLEN:
  32 pages, 131072 bytes with 4 KiB pages, counting its NUL;
* all argument and environment strings plus their pointers exceed ARG_MAX, a
  quarter of the stack limit (2 MiB with the usual 8 MiB stack).

So an env or a task whose save would produce such an environment is refused
(422 naming the variable and the limit) instead. The environment checked is the
executor's: the base (`executor.base_env`), the enabled envs with same names
joined by '&', then the task's own env.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..db import envs, tasks
from ..db.interface import Tx
from ..model import Task
from .executor import base_env

MAX_ARG_STRLEN = 32 * 4096
# All environment strings with their pointers. Half the usual ARG_MAX: the rest is
# for argv (the command is at most 64 KiB) and stays safe with a smaller stack.
ENV_BUDGET = 1 << 20
ARGV_RESERVE = 256 * 1024
_POINTER = 8


class EnvironmentTooLarge(Exception):
    def __init__(self, message: str, variable: str | None) -> None:
        super().__init__(message)
        self.variable = variable


def budget() -> int:
    """ENV_BUDGET, or less when this process's ARG_MAX is smaller (a small stack)."""
    try:
        arg_max = os.sysconf("SC_ARG_MAX")
    except (ValueError, OSError):
        arg_max = MAX_ARG_STRLEN
    return max(0, min(ENV_BUDGET, arg_max - ARGV_RESERVE))


def string_size(name: str, value: str) -> int:
    """Bytes execve copies for `NAME=value`, its NUL included."""
    return len(name.encode("utf-8", "surrogateescape")) + 1 \
        + len(value.encode("utf-8", "surrogateescape")) + 1


def check(env: dict[str, str], whose: str) -> None:
    limit = budget()
    total = 0
    for name, value in env.items():
        size = string_size(name, value)
        if size > MAX_ARG_STRLEN:
            raise EnvironmentTooLarge(
                f"{whose}: variable {name} would be {size} bytes (NAME=value and its NUL);"
                f" the kernel refuses one longer than {MAX_ARG_STRLEN} bytes, and every run"
                " would fail to start", name)
        total += size + _POINTER
    if total > limit:
        raise EnvironmentTooLarge(
            f"{whose}: the environment would be {total} bytes; at most {limit} bytes leave"
            " room for the command within the kernel's ARG_MAX", None)


async def verify(tx: Tx, work_dir: Path, task: Task | None = None) -> None:
    """Inside the saving transaction, after the change: the environment `task` would
    get, or (envs changed) the one every task would get. Raises EnvironmentTooLarge."""
    base = {**base_env(work_dir), **await envs.global_env(tx)}
    if task is not None:
        check({**base, **task.env}, f"task {task.num} ({task.name})")
        return
    check(base, "with the enabled envs")
    for num, name, env in await tasks.task_envs(tx):
        check({**base, **env}, f"with the enabled envs, task {num} ({name})")
