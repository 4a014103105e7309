"""What a subscription pull needs to know, which files it keeps, and what a client may
set (pure, no I/O).

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
from typing import Any
from urllib.parse import urlsplit

import msgspec

from .. import cron, fields
from ..fields import FieldError
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


# -- the fields a client sends (both APIs and the QingLong importer) ---------------------

ALIAS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
BRANCH = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._/-]{0,199}$")
EXTENSION = re.compile(r"^[A-Za-z0-9]{1,10}$")
CAP_BOUNDS = {"repo_bytes": (1 << 10, 1 << 30), "files": (1, 20_000),
              "file_bytes": (1, 64 << 20), "timeout_s": (10, 3600)}
TYPES = {"git": "git", "file": "file", "public-repo": "git", "private-repo": "git"}
MAX_NAME, MAX_URL, MAX_PATTERN, MAX_HOOK, MAX_USERNAME, MAX_SECRET = \
    200, 2000, 1000, 4000, 200, 4096
MAX_EXTENSIONS = 20


def validate(values: dict[str, Any]) -> dict[str, Any]:
    """Checks beyond types; each error names its field and never echoes a secret."""
    out = dict(values)
    if "name" in out:
        out["name"] = fields.text(out["name"].strip(), "name", MAX_NAME)
        if not out["name"]:
            raise FieldError("EMPTY", "name", "name must not be empty")
    if "type" in out:
        if out["type"] not in TYPES:
            raise FieldError("NOT_ONE_OF", "type", "type must be git or file")
        out["type"] = TYPES[out["type"]]
    if "url" in out:
        out["url"] = _url(out["url"])
    if "alias" in out and not ALIAS.match(out["alias"]):
        raise FieldError("BAD_ALIAS", "alias", "alias must be one folder name: letters,"
                         " digits, '.', '_', '-' (at most 100, not starting with '.')")
    if out.get("branch") is not None and (
            not BRANCH.match(out["branch"]) or ".." in out["branch"]):
        raise FieldError("BAD_BRANCH", "branch", "branch is not a valid branch name")
    for key in ("schedule", "default_schedule"):
        if out.get(key) is not None:
            try:
                out[key] = cron.validate(out[key])
            except cron.CronError as exc:
                raise FieldError("BAD_SCHEDULE", key, f"{key}: {exc}") from None
    for key in ("whitelist", "blacklist", "dependences"):
        if key in out:
            fields.text(out[key], key, MAX_PATTERN)
            why = pattern_error(out[key])
            if why is not None:
                raise FieldError("BAD_PATTERN", key,
                                 f"{key} is not a valid regular expression: {why}")
    if "extensions" in out:
        exts = [e.lstrip(".") for e in out["extensions"]]
        if not exts or len(exts) > MAX_EXTENSIONS or not all(EXTENSION.match(e)
                                                             for e in exts):
            raise FieldError("BAD_EXTENSIONS", "extensions",
                             f"extensions must be 1-{MAX_EXTENSIONS} names like js or py")
        out["extensions"] = exts
    if "vanished" in out and out["vanished"] not in ("delete", "disable"):
        raise FieldError("NOT_ONE_OF", "vanished", "vanished must be delete or disable")
    for key in ("sub_before", "sub_after"):
        if key in out:
            fields.text(out[key], key, MAX_HOOK, lines=True)
    if out.get("username") is not None:
        fields.text(out["username"], "username", MAX_USERNAME)
        if ":" in out["username"]:
            raise FieldError("BAD_USERNAME", "username", "username must not contain ':'")
    secret = out.get("secret")
    if secret is not None and (len(secret) > MAX_SECRET or
                               fields.without_controls(secret) != secret):
        raise FieldError("BAD_SECRET", "secret", f"secret must be at most {MAX_SECRET}"
                         " characters without control characters")
    if "caps" in out:
        for key, (lo, hi) in CAP_BOUNDS.items():
            fields.bounded(getattr(out["caps"], key), f"caps.{key}", lo, hi)
    return out


# scp-like git URLs: git@github.com:owner/repo.git
SCP_URL = re.compile(r"^[\w.-]+@([\w.-]+):(?!//)/?(.+)$")


def _https_for(url: str) -> str | None:
    """The https:// URL an SSH URL most likely has (GitHub, Gitea, GitLab alike)."""
    scp = SCP_URL.match(url)
    if scp:
        return f"https://{scp[1]}/{scp[2]}"
    parts = urlsplit(url)
    if parts.scheme in ("ssh", "git+ssh") and parts.hostname:
        return f"https://{parts.hostname}{parts.path}"
    return None


def _url(raw: str) -> str:
    url = fields.text(raw.strip(), "url", MAX_URL)
    parts = urlsplit(url)
    https = _https_for(url)
    if https is not None:
        # No SSH: the image has no ssh client, and dulwich would need paramiko and
        # cryptography (docs/subscriptions.md, "SSH").
        raise FieldError("SSH_URL", "url", f"SSH URLs are not supported: use the HTTPS URL"
                         f" ({https}) with a token in secret")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FieldError("BAD_URL", "url", "url must be an http:// or https:// URL (SSH"
                         " URLs are not supported: use a token over HTTPS)")
    if parts.username is not None or parts.password is not None:
        raise FieldError("URL_CREDENTIALS", "url", "url must not carry credentials: put"
                         " them in username and secret")
    return url
