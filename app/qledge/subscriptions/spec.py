"""What a subscription pull needs to know, and which files it keeps (pure, no I/O).

The worker hands a `PullSpec` to the pull process (`qledge subscription pull`) in
its environment (docs/subscriptions.md, "Credentials"); the same `classify` decides
which files the pull copies into `scripts/<alias>/` and which of them get a task
when the worker keeps the tasks in step afterwards.

QingLong's rules (`shell/update.sh`, `gen_list_repo`): a *script* has one of the
extensions, matches the whitelist (when there is one) and not the blacklist; a
*dependence* file matches the dependence pattern. Patterns are extended regular
expressions searched anywhere in the path relative to the repository root
(`egrep`); `|` separates alternatives as in any regex. Unlike QingLong, a file that
matches the dependence pattern is a dependence even when it also looks like a script
(`sendNotify.js` with a `// cron:` header): it is a library the scripts load, copied
and never scheduled (docs/subscriptions.md). A path with a name the scripts tree hides
(`node_modules/…`, `.qledge-tmp-*`) is never a script either.

Only the pull process evaluates the patterns (they are the user's regular expressions,
and Python's `re` can take exponential time): it writes the scripts it kept into a
manifest (`MANIFEST_SUFFIX`) that the worker reads instead of matching (`script_shape`
holds the checks that need no pattern).
"""

from __future__ import annotations

import re

import msgspec

from ..scripts.folder import HIDDEN, TEMP_PREFIX

DEFAULT_EXTENSIONS = ("js", "mjs", "py", "sh")
# How the worker hands a pull its spec: not a QLEDGE_* name, which settings would
# take for a (refused) setting; the pull scrubs it at once.
ENV_NAME = "QL_PULL_SPEC"
# <work>/.subscriptions/<alias><MANIFEST_SUFFIX>: the scripts the last pull kept, one
# repository-relative path a line (a staging folder's name always holds ".pull-").
MANIFEST_SUFFIX = ".scripts"
MANIFEST_MAX_BYTES = 16 << 20


class PullError(Exception):
    """A pull is refused or failed: a stable code (`SUB_*`, docs/subscriptions.md) and
    the reason in English (never a secret)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


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
        if self.deps is not None and self.deps.search(path):
            return "dependence"
        if script_shape(path, self.extensions) and (
                self.white is None or self.white.search(path)) and not (
                self.black is not None and self.black.search(path)):
            return "script"
        return None


def script_shape(path: str, suffixes: tuple[str, ...]) -> bool:
    """What a script path needs besides the patterns: one of the extensions (as
    `.js`), and no name the scripts tree hides (docs/scripts.md)."""
    return path.endswith(suffixes) and not any(
        part in HIDDEN or part.startswith(TEMP_PREFIX) for part in path.split("/"))


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
