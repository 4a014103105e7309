"""What a subscription pull needs to know, and which files it keeps (pure, no I/O).

The worker hands a `PullSpec` to the pull process (`qledge subscription pull`) in
its environment (docs/subscriptions.md, "Credentials"); the same `classify` decides
which files the pull copies into `scripts/<alias>/` and which of them get a task
when the worker keeps the tasks in step afterwards.

QingLong's rules (`shell/update.sh`, `gen_list_repo`): a *script* has one of the
extensions, matches the whitelist (when there is one) and not the blacklist; a
*dependence* file matches the dependence pattern. Patterns are extended regular
expressions searched anywhere in the path relative to the repository root
(`egrep`); `|` separates alternatives as in any regex. A file that is both is a
script. Everything else stays out of the scripts folder.
"""

from __future__ import annotations

import re

import msgspec

DEFAULT_EXTENSIONS = ("js", "mjs", "py", "sh")
# How the worker hands a pull its spec: not a QLEDGE_* name, which settings would
# take for a (refused) setting; the pull scrubs it at once.
ENV_NAME = "QL_PULL_SPEC"


class PullError(Exception):
    """A pull is refused or failed; the message is the reason (never a secret)."""


class Caps(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    repo_bytes: int = 50 << 20  # the fetched pack, or the raw file
    files: int = 2000  # files kept in scripts/<alias>/
    file_bytes: int = 4 << 20  # each kept file
    timeout_s: int = 300  # the whole pull (also the pull task's timeout)


class PullSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    id: str
    type: str  # "git" | "file"
    url: str
    branch: str | None
    alias: str
    whitelist: str = ""
    blacklist: str = ""
    dependences: str = ""
    extensions: tuple[str, ...] = DEFAULT_EXTENSIONS
    sub_before: str = ""
    sub_after: str = ""
    username: str | None = None
    secret: str | None = None
    scripts_dir: str  # absolute: <work>/scripts
    staging_dir: str  # absolute: <work>/.subscriptions (same file system)
    caps: Caps = Caps()

    def __repr__(self) -> str:  # never print the secret by accident
        return f"PullSpec(id={self.id!r}, alias={self.alias!r})"


class Rules:
    """The compiled filters of one subscription."""

    __slots__ = ("black", "deps", "extensions", "white")

    def __init__(self, *, whitelist: str, blacklist: str, dependences: str,
                 extensions: tuple[str, ...]) -> None:
        self.white = re.compile(whitelist) if whitelist else None
        self.black = re.compile(blacklist) if blacklist else None
        self.deps = re.compile(dependences) if dependences else None
        self.extensions = tuple(f".{e}" for e in extensions)

    @classmethod
    def of(cls, spec: PullSpec) -> Rules:
        return cls(whitelist=spec.whitelist, blacklist=spec.blacklist,
                   dependences=spec.dependences, extensions=spec.extensions)

    def classify(self, path: str) -> str | None:
        """"script", "dependence" or None (not kept) for a repository-relative path."""
        if path.endswith(self.extensions) and (
                self.white is None or self.white.search(path)) and not (
                self.black is not None and self.black.search(path)):
            return "script"
        if self.deps is not None and self.deps.search(path):
            return "dependence"
        return None


def pattern_error(pattern: str) -> str | None:
    """Why this pattern does not compile (None: it does)."""
    try:
        re.compile(pattern)
    except re.error as exc:
        return str(exc)
    return None


def decode(raw: str | bytes) -> PullSpec:
    return msgspec.json.decode(raw, type=PullSpec)


def encode(spec: PullSpec) -> str:
    return msgspec.json.encode(spec).decode()
