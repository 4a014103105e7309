"""QingLong's config/ folder, read without running anything: config.sh's plain
assignments (later ones win; `$`/backquote values are marked, never expanded) and
which hook files hold more than comments. Bounded (1 MiB a file), no link followed.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import msgspec

_ASSIGN = re.compile(r"^\s*(export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


class ConfigUnreadable(Exception):
    """A config file that exists cannot be read (or is too large)."""


class QlConfig(msgspec.Struct, frozen=True, kw_only=True):
    """config/: config.sh's plain assignments (later ones win) and the hook files."""

    values: dict[str, str]
    exported: list[str]  # names assigned with `export` (every task saw them)
    computed: list[str]  # names whose value uses $ or ` (not evaluated here)
    hooks: dict[str, str]  # file name → content, for hook files with more than comments
    extra_sh: bool  # config/extra.sh has more than comments


def _value(raw: str) -> tuple[str, bool]:
    """A shell word's value (no expansion) and whether it would expand something."""
    raw = raw.strip()
    if raw[:1] == "'":
        end = raw.find("'", 1)
        return (raw[1:end] if end > 0 else raw[1:]), False
    if raw[:1] == '"':
        out, i = [], 1
        while i < len(raw) and raw[i] != '"':
            if raw[i] == "\\" and i + 1 < len(raw) and raw[i + 1] in '"\\$`':
                i += 1
            out.append(raw[i])
            i += 1
        text = "".join(out)
        return text, "$" in raw[1:i] or "`" in raw[1:i]
    word = raw.split("#", 1)[0].split(None, 1)[0] if raw.split("#", 1)[0].strip() else ""
    return word, "$" in word or "`" in word


def _meaningful(text: str) -> bool:
    return any(line.strip() and not line.strip().startswith(("#", "//"))
               for line in text.splitlines())


def _small_text(path: Path, limit: int = 1 << 20) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigUnreadable(f"{path} cannot be read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ConfigUnreadable(f"{path} is larger than {limit} bytes")
    return data.decode("utf-8", "replace")


def read_config(folder: Path) -> QlConfig | None:
    if not folder.is_dir():
        return None
    values: dict[str, str] = {}
    computed: set[str] = set()
    exported: set[str] = set()
    for line in (_small_text(folder / "config.sh") or "").splitlines():
        m = _ASSIGN.match(line)
        if m:
            value, expands = _value(m.group(3))
            values[m.group(2)] = value
            (computed.add if expands else computed.discard)(m.group(2))
            if m.group(1):
                exported.add(m.group(2))
    hooks = {}
    for name in ("task_before.sh", "task_after.sh", "task_before.js", "task_before.py"):
        text = _small_text(folder / name)
        if text is not None and _meaningful(text):
            hooks[name] = text
    return QlConfig(values=values, exported=sorted(exported), computed=sorted(computed),
                    hooks=hooks,
                    extra_sh=_meaningful(_small_text(folder / "extra.sh") or ""))
