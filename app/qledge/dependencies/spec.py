"""Dependencies, the pure part (docs/dependencies.md): what a package spec may say,
the job one install run gets, the status a package shows, and mirror URLs without
their credentials. No I/O here.

A spec is one argument to pip or npm, never run by a shell — and still refused when it
is anything but a registry package with an optional version: no options (`--index-url`
smuggled in a spec), URLs, paths, git or `file:` specs, environment markers or shell
metacharacters. That keeps every install traceable to the configured mirror.
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import unquote, urlsplit, urlunsplit

import msgspec

Ecosystem = Literal["python", "node"]
Action = Literal["install", "remove", "rebuild"]
ECOSYSTEMS: tuple[Ecosystem, ...] = ("python", "node")
ENV_NAME = "QL_DEPS_JOB"  # the job, in the environment of its one launch
MAX_SPEC = 200
MAX_SPECS = 100  # per request

# PEP 508 names, extras and version clauses; nothing else of PEP 508 (no URL, no marker).
_PY_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_PY_CLAUSE = r"(?:===|==|!=|~=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+"
_PY_SPEC = re.compile(
    rf"(?P<name>{_PY_NAME})\s*(?:\[\s*(?P<extras>{_PY_NAME}(?:\s*,\s*{_PY_NAME})*)\s*\])?"
    rf"\s*(?P<version>{_PY_CLAUSE}(?:\s*,\s*{_PY_CLAUSE})*)?")
# npm: a (scoped) name, then `@` and a version, range or dist-tag. A range may hold
# spaces and `||`; a `:` or `/` (git, file:, http:, github:user/repo) never.
_NODE_NAME = re.compile(r"(?:@[a-z0-9][a-z0-9._~-]*/)?[A-Za-z0-9][A-Za-z0-9._~-]*")
_NODE_VERSION = re.compile(r"[A-Za-z0-9.*^~<>=|+_][A-Za-z0-9.*^~<>=|+_ -]*")

# What pip takes for a local archive whatever else the line says (pip's
# `is_archive_file`: a `.whl` or `.tar.gz` name is read from the working directory, the
# tasks' work dir) and what npm takes for a tarball file (npm-package-arg's
# `isFileType`). Such a spec never reaches the mirror: refused.
_PIP_ARCHIVES = (".whl", ".zip", ".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tbz", ".tar.xz",
                 ".txz", ".tlz", ".tar.lz", ".tar.lzma")
_NPM_FILES = (".tgz", ".tar.gz", ".tar")

# QingLong's statuses, in its numbering (back/data/dependence.ts).
QINGLONG_STATUS = {"installing": 0, "installed": 1, "failed": 2, "removing": 3,
                   "removed": 4, "queued": 6, "cancelled": 7}
QINGLONG_TYPES: dict[int, str] = {0: "node", 1: "python", 2: "linux"}


class SpecError(ValueError):
    """A spec refused; the message says why and what is accepted."""


class Package(msgspec.Struct, frozen=True, kw_only=True):
    name: str  # normalized: the row's key (PEP 503 for Python, as written for npm)
    spec: str  # what pip/npm get, spaces tidied


class Job(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What one run of an ecosystem's task does (`qledge deps apply <ecosystem>`)."""

    run_id: str
    ecosystem: Ecosystem
    action: Action
    specs: tuple[str, ...]  # install/rebuild: specs; remove: names
    declared: tuple[str, ...] = ()  # what is installed: a repair rebuilds from it
    deps_dir: str
    pip_index_url: str = ""
    pip_extra_index_urls: tuple[str, ...] = ()
    npm_registry: str = ""


def python_package(raw: str) -> Package:
    text = _common(raw)
    m = _PY_SPEC.fullmatch(text)
    if m is None:
        raise SpecError(f"{_shown(text)} is not a Python requirement: a name with optional"
                        " extras and version (requests, requests==2.32.3, rich>=13,<14,"
                        " httpx[http2]); URLs, paths, options and markers are not accepted")
    name = normalize_python(m["name"])
    spec = m["name"]
    if m["extras"]:
        spec += "[" + ",".join(e.strip() for e in m["extras"].split(",")) + "]"
    if m["version"]:
        spec += ",".join(re.sub(r"\s+", "", c) for c in m["version"].split(","))
    if text.lower().endswith(_PIP_ARCHIVES) or spec.lower().endswith(_PIP_ARCHIVES):
        raise SpecError(f"{_shown(text)} names a file (pip reads a .whl, .zip or .tar.*"
                        " spec from the disk): give a package name, every package comes"
                        " from the configured mirror")
    return Package(name=name, spec=spec)


def node_package(raw: str) -> Package:
    text = _common(raw)
    at = text.find("@", 1)  # a scope's leading @ is part of the name
    name, version = (text, "") if at < 0 else (text[:at], text[at + 1:].strip())
    if not _NODE_NAME.fullmatch(name) or len(name) > 214 or (
            at >= 0 and not _NODE_VERSION.fullmatch(version)):
        raise SpecError(f"{_shown(text)} is not an npm package: a name (axios, @scope/pkg)"
                        " with an optional version, range or tag after @ (axios@1.7.2,"
                        " axios@^1, axios@latest); URLs, paths, git and file: specs are"
                        " not accepted")
    if name.lower().endswith(_NPM_FILES) or version.lower().endswith(_NPM_FILES):
        raise SpecError(f"{_shown(text)} names a tarball file (npm reads a .tgz, .tar.gz or"
                        " .tar spec from the disk): give a package name, every package"
                        " comes from the configured registry")
    return Package(name=name, spec=f"{name}@{version}" if version else name)


def package(ecosystem: str, raw: str) -> Package:
    if ecosystem == "python":
        return python_package(raw)
    if ecosystem == "node":
        return node_package(raw)
    raise SpecError(f"unknown type {ecosystem[:20]!r}")


def _common(raw: str) -> str:
    text = raw.strip()
    if not text:
        raise SpecError("a package spec must not be empty")
    if len(text) > MAX_SPEC:
        raise SpecError(f"a package spec is at most {MAX_SPEC} characters")
    if text.startswith("-"):
        raise SpecError(f"{_shown(text)} looks like an option: give package names only"
                        " (mirrors are settings, docs/dependencies.md)")
    return text


def _shown(text: str) -> str:
    """The spec in an error message: printable and short."""
    clean = "".join(c if c.isprintable() else "?" for c in text)
    return repr(clean[:60] + ("…" if len(clean) > 60 else ""))


def normalize_python(name: str) -> str:
    """PEP 503: `Foo_Bar.baz` and `foo-bar-baz` are one project."""
    return re.sub(r"[-_.]+", "-", name).lower()


def status(action: str, run_status: str | None) -> str:
    """A package's status, derived from the status of its last run and what that run
    was asked to do: queued, installing, installed, removing, removed, failed,
    cancelled (`unknown` when the run and its memo are both gone)."""
    if run_status is None:
        return "unknown"
    removing = action == "remove"
    if run_status == "queued":
        return "queued"
    if run_status == "running":
        return "removing" if removing else "installing"
    if run_status == "succeeded":
        return "removed" if removing else "installed"
    if run_status == "cancelled":
        return "cancelled"
    return "failed"


def qinglong_status(action: str, derived: str) -> int:
    """QingLong's number; its failures say which way (installFailed 2, removeFailed 5)."""
    if derived == "failed":
        return 5 if action == "remove" else 2
    if derived == "unknown":
        return 2 if action == "install" else 5
    return QINGLONG_STATUS[derived]


# -- mirrors -------------------------------------------------------------------------

def mirror_error(url: str) -> str | None:
    """Why a mirror URL is unusable (None: fine)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "is not a URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL"
    if any(c.isspace() or not c.isprintable() for c in url):
        return "must not contain spaces or control characters"
    return None


def redact_url(url: str) -> str:
    """The URL with its user:password replaced by `***` (safe to show or log)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "***"
    if parts.username is None and parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, parts.fragment))


def secrets_of(urls: list[str]) -> list[str]:
    """The credential strings inside these URLs, as they may show up in a tool's output
    (user:password and the password, raw and percent-decoded), longest first."""
    found: set[str] = set()
    for url in urls:
        try:
            parts = urlsplit(url)
        except ValueError:
            continue
        userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
        if not userinfo:
            continue
        password = userinfo.partition(":")[2]  # a user name alone is no secret
        for item in (userinfo, unquote(userinfo), password, unquote(password)):
            if len(item) >= 3:
                found.add(item)
    return sorted(found, key=len, reverse=True)


_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]+@")


def redact(text: str, secrets: list[str]) -> str:
    """The credentials out of a line of pip's or npm's output: every URL's userinfo
    (pip prints `user:****@`), and the known secrets wherever they appear."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return _USERINFO.sub(r"\1***@", text)
