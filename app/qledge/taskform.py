"""QingLong's `task` command form, parsed and expanded (docs/tasks.md).

`task [-m DUR] <path> [now | desi ENV [SEL...] | conc ENV [SEL...] | ARG...] [-- ARG...]`

`parse` is pure: the words of the command, the timeout, the mode. `expand`
looks at the scripts folder once, at spawn time, and gives the launcher an
interpreter argv, a working directory and the environment — no shell, no
resident wrapper. Every refusal is a `TaskFormError` with a stable reason code
and a fixed message: neither ever carries the command, a path, an argument or
an env value (they end up in the run's events).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path
from typing import Literal

import msgspec

from .model import Reason

PREFIX = "task"
# QingLong's own container paths for the scripts folder: its crons may name them.
QINGLONG_ROOTS = ("/ql/data/scripts/", "/ql/scripts/")
HOOK_BEFORE = "task_before.sh"
HOOK_AFTER = "task_after.sh"
_INTERPRETERS = {
    ".py": "python3", ".pyc": "python3",
    ".js": "node", ".mjs": "node", ".cjs": "node", ".ts": "node",
    ".sh": "bash", ".bash": "bash",
}
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhd]?)")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_RANGE = re.compile(r"([0-9]+|max)[-~_]([0-9]+|max)")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPERATORS = set(";&|<>()`$\n")
MAX_SELECTED = 1000
# The longest `-m`: a task's own timeout_s has the same bound (http/tasks.py). A
# longer one overflowed the attempt's deadline and broke every spawn round.
MAX_TIMEOUT_S = 366 * 86400
_NUMBER = re.compile(r"[0-9]{1,9}")  # a selection's number: ASCII, int() takes it
MAX_CONC = 100  # child runs of one `conc` run

MESSAGES: dict[Reason, str] = {
    Reason.TASK_BAD_SYNTAX: "the task form is one command: unbalanced quotes, or a shell"
                            " operator or expansion ($, `, ;, &, |, <, >) outside quotes",
    Reason.TASK_BAD_OPTION: "unknown or incomplete task option (known: -m DUR up to"
                            " 366d, now, desi ENV SEL, conc ENV SEL, -- ARGS), or no"
                            " script path",
    Reason.TASK_BAD_SELECTION: "a desi/conc selection must be numbers from 1 and ranges"
                               " (1-3, 2~4, 1_2, 3-max) separated by spaces, a range"
                               " of at most 1000; conc starts at most 100 processes",
    Reason.TASK_PATH_OUTSIDE: "the script path leaves the scripts folder",
    Reason.TASK_SCRIPT_NOT_FOUND: "no such script (a regular file) in the scripts folder",
    Reason.TASK_SCRIPT_NOT_EXECUTABLE: "the script has no known extension (.py .js .mjs .cjs"
                                       " .ts .sh .bash) and is not executable",
    Reason.TASK_INTERPRETER_MISSING: "the script's interpreter is not on PATH (JavaScript"
                                     " needs the image's -node variant)",
    Reason.TASK_ENV_EMPTY: "desi/conc: the variable is unset or the selection picks no value",
}


class TaskFormError(Exception):
    def __init__(self, reason: Reason) -> None:
        super().__init__(reason.value)
        self.reason = reason
        self.message = MESSAGES[reason]


class TaskForm(msgspec.Struct, frozen=True, kw_only=True):
    path: str                      # relative to the scripts root, '/'-separated
    mode: Literal["run", "desi", "conc"] = "run"
    now: bool = False
    timeout_s: float | None = None
    env_name: str | None = None
    selection: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    # QingLong delays only the plain `task <path>` (no now, desi, conc or words).
    delayable: bool = False


class Spawn(msgspec.Struct, frozen=True, kw_only=True):
    argv: list[str]
    cwd: str
    env: dict[str, str]


def is_task_form(command: str) -> bool:
    words = command.strip().split(None, 1)
    return bool(words) and words[0] == PREFIX


def _words(command: str) -> list[str]:
    """POSIX-shell word splitting with quotes and backslashes, and nothing else:
    an operator or expansion outside quotes is refused, never run by a shell."""
    words: list[str] = []
    cur: list[str] = []
    have = False
    quote = ""
    i = 0
    while i < len(command):
        c = command[i]
        if quote == "'":
            if c == "'":
                quote = ""
            else:
                cur.append(c)
        elif quote == '"':
            if c == '"':
                quote = ""
            elif c == "\\" and i + 1 < len(command) and command[i + 1] in '"\\$`':
                i += 1
                cur.append(command[i])
            elif c in "$`":
                raise TaskFormError(Reason.TASK_BAD_SYNTAX)
            else:
                cur.append(c)
        elif c in "'\"":
            quote, have = c, True
        elif c == "\\":
            if i + 1 >= len(command):
                raise TaskFormError(Reason.TASK_BAD_SYNTAX)
            i += 1
            cur.append(command[i])
            have = True
        elif c in " \t":
            if have:
                words.append("".join(cur))
                cur, have = [], False
        elif c in _OPERATORS:
            raise TaskFormError(Reason.TASK_BAD_SYNTAX)
        else:
            cur.append(c)
            have = True
        i += 1
    if quote:
        raise TaskFormError(Reason.TASK_BAD_SYNTAX)
    if have:
        words.append("".join(cur))
    return words


def parse_duration(text: str) -> float:
    """`timeout(1)`'s spelling: a number with an optional unit s/m/h/d; above zero,
    at most MAX_TIMEOUT_S."""
    m = _DURATION.fullmatch(text)
    if m is None or float(m.group(1)) <= 0:
        raise TaskFormError(Reason.TASK_BAD_OPTION)
    seconds = float(m.group(1)) * _UNIT_S[m.group(2)]
    if seconds > MAX_TIMEOUT_S:  # also inf, from a number of hundreds of digits
        raise TaskFormError(Reason.TASK_BAD_OPTION)
    return seconds


def _relative(path: str) -> str:
    for root in QINGLONG_ROOTS:
        if path.startswith(root):
            path = path[len(root):]
            break
    if path.startswith("/") or "\x00" in path:
        raise TaskFormError(Reason.TASK_PATH_OUTSIDE)
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts:
        raise TaskFormError(Reason.TASK_SCRIPT_NOT_FOUND)
    if ".." in parts:
        raise TaskFormError(Reason.TASK_PATH_OUTSIDE)
    return "/".join(parts)


def parse(command: str, scripts_root: Path | None = None) -> TaskForm:
    """The words of a `task` command. An absolute path under `scripts_root` (or
    QingLong's /ql/data/scripts) is taken relative to it."""
    words = _words(command)
    if not words or words[0] != PREFIX:
        raise TaskFormError(Reason.TASK_BAD_OPTION)
    words = words[1:]
    extra: tuple[str, ...] = ()
    if "--" in words:
        cut = words.index("--")
        words, extra = words[:cut], tuple(words[cut + 1:])
    timeout: float | None = None
    rest: list[str] = []
    i = 0
    while i < len(words):  # -m may stand anywhere before `--` (QingLong: first)
        if words[i] == "-m":
            if timeout is not None or i + 1 >= len(words):
                raise TaskFormError(Reason.TASK_BAD_OPTION)
            timeout = parse_duration(words[i + 1])
            i += 2
            continue
        rest.append(words[i])
        i += 1
    if not rest or rest[0].startswith("-"):
        raise TaskFormError(Reason.TASK_BAD_OPTION)
    raw = rest[0]
    if scripts_root is not None:
        root = str(scripts_root).rstrip("/") + "/"
        if raw.startswith(root):
            raw = raw[len(root):]
    path = _relative(raw)
    tail = rest[1:]
    if not tail:
        return TaskForm(path=path, timeout_s=timeout, args=extra, delayable=True)
    if tail[0] == "now":
        if len(tail) > 1:
            raise TaskFormError(Reason.TASK_BAD_OPTION)
        return TaskForm(path=path, now=True, timeout_s=timeout, args=extra)
    if tail[0] in ("desi", "conc"):
        if len(tail) < 2 or not _ENV_NAME.fullmatch(tail[1]):
            raise TaskFormError(Reason.TASK_BAD_OPTION)
        selection = tuple(tail[2:])
        indexes(selection, 1)  # refuse a malformed selection now, whatever the env holds
        mode: Literal["desi", "conc"] = "desi" if tail[0] == "desi" else "conc"
        return TaskForm(path=path, mode=mode, timeout_s=timeout, env_name=tail[1],
                        selection=selection, args=extra)
    if tail[0].startswith("-"):
        raise TaskFormError(Reason.TASK_BAD_OPTION)
    # QingLong's run_else: further words are the script's arguments.
    return TaskForm(path=path, timeout_s=timeout, args=(*tail, *extra))


def indexes(selection: tuple[str, ...], count: int) -> list[int]:
    """QingLong's selection: 1-based numbers and ranges (`-`, `~`, `_`; `max` is the
    count; a range may run downwards), first occurrence kept; none given = all.
    Numbers past the count select nothing (QingLong would pass an empty value)."""
    words = selection or ("1-max",)
    out: list[int] = []
    seen: set[int] = set()

    def number(word: str) -> int:
        if word == "max":
            return count
        # isdigit() would take "²", which int() refuses; a huge number made len(range)
        # overflow. Nine digits select past any real env's values anyway.
        if not _NUMBER.fullmatch(word) or int(word) < 1:
            raise TaskFormError(Reason.TASK_BAD_SELECTION)
        return int(word)

    for word in words:
        m = _RANGE.fullmatch(word)
        if m:
            a, b = number(m.group(1)), number(m.group(2))
            if abs(b - a) + 1 > MAX_SELECTED:  # before building the range
                raise TaskFormError(Reason.TASK_BAD_SELECTION)
            span = range(a, b + 1) if a <= b else range(a, b - 1, -1)
        else:
            span = range(number(word), number(word) + 1)
        for n in span:
            if n >= 1 and n not in seen:  # `max` of an empty env is 0
                seen.add(n)
                out.append(n)
    return out


def split_values(value: str) -> list[str]:
    """An `&`-joined env as QingLong's `IFS=& read -ra` splits it (a trailing `&`
    adds no empty value)."""
    parts = value.split("&")
    if parts and parts[-1] == "":
        parts.pop()
    return parts


def conc_indexes(value: str | None, selection: tuple[str, ...]) -> list[int]:
    """The 1-based positions of the values one `conc` run starts a child for."""
    count = len(split_values(value or ""))
    picked = [n for n in indexes(selection, count) if n <= count]
    if not picked:
        raise TaskFormError(Reason.TASK_ENV_EMPTY)
    if len(picked) > MAX_CONC:
        raise TaskFormError(Reason.TASK_BAD_SELECTION)
    return picked


def selected(value: str | None, selection: tuple[str, ...]) -> list[str]:
    values = split_values(value or "")
    picked = [values[n - 1] for n in indexes(selection, len(values)) if n <= len(values)]
    if not picked:
        raise TaskFormError(Reason.TASK_ENV_EMPTY)
    return picked


def _script(root: Path, rel: str) -> Path:
    """The script under the real scripts root; symlinks may point anywhere inside it."""
    base = root.resolve()
    try:
        full = (base / rel).resolve()
    except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
        raise TaskFormError(Reason.TASK_SCRIPT_NOT_FOUND) from None
    if base not in full.parents:
        raise TaskFormError(Reason.TASK_PATH_OUTSIDE)
    try:
        st = os.stat(full)
    except OSError:
        raise TaskFormError(Reason.TASK_SCRIPT_NOT_FOUND) from None
    if not stat.S_ISREG(st.st_mode):
        raise TaskFormError(Reason.TASK_SCRIPT_NOT_FOUND)
    return full


def _hook(root: Path, name: str) -> str:
    path = root / name
    return str(path) if path.is_file() and not path.is_symlink() else ""


# Sources task_before.sh as QingLong does (its exports reach the script; an `exit`
# in it ends the run there), then execs the script — or, with an after hook, runs
# it, sources task_after.sh in a subshell (its status and `exit` are only logged)
# and exits with the script's status. A constant: the user's words only ever
# arrive as positional parameters, never as code.
HOOK_RUNNER = (
    'b=$1 a=$2 p=$3; shift 3\n'
    'if [ -n "$b" ]; then . "$b" "$p" || echo "qledge: task_before.sh returned $?;'
    ' running the task anyway" >&2; fi\n'
    'if [ -z "$a" ]; then exec "$@"; fi\n'
    '"$@"; rc=$?\n'
    '(. "$a" "$p") || echo "qledge: task_after.sh returned $?" >&2\n'
    'exit $rc\n'
)


def expand(form: TaskForm, scripts_root: Path, env: dict[str, str],
           conc_index: int | None = None) -> Spawn:
    """The argv, working directory (the script's folder, as QingLong's) and env.

    A `conc` form expands only for one of its child runs (`conc_index`: the
    position of that child's single value); the parent run starts no process.
    """
    full = _script(scripts_root, form.path)
    env = dict(env)
    if form.mode == "desi":
        assert form.env_name is not None
        env[form.env_name] = "&".join(selected(env.get(form.env_name), form.selection))
    elif form.mode == "conc":
        assert form.env_name is not None and conc_index is not None
        values = split_values(env.get(form.env_name, ""))
        if conc_index > len(values):  # the env changed since the parent fanned out
            raise TaskFormError(Reason.TASK_ENV_EMPTY)
        env[form.env_name] = values[conc_index - 1]
    interpreter = _INTERPRETERS.get(full.suffix.lower(), "")
    name = full.name
    if name.startswith("-"):
        # The interpreter would read `-c…` as an option, not as the script's path.
        name = f"./{name}"
    if interpreter:
        if shutil.which(interpreter, path=env.get("PATH", "")) is None:
            raise TaskFormError(Reason.TASK_INTERPRETER_MISSING)
        argv = [interpreter, name, *form.args]
    else:
        if not os.access(full, os.X_OK):
            raise TaskFormError(Reason.TASK_SCRIPT_NOT_EXECUTABLE)
        argv = [name if name.startswith("./") else f"./{name}", *form.args]
    root = scripts_root.resolve()
    before, after = _hook(root, HOOK_BEFORE), _hook(root, HOOK_AFTER)
    if before or after:
        if shutil.which("bash", path=env.get("PATH", "")) is None:
            raise TaskFormError(Reason.TASK_INTERPRETER_MISSING)
        argv = ["bash", "-c", HOOK_RUNNER, "task", before, after, form.path, *argv]
    return Spawn(argv=argv, cwd=str(full.parent), env=env)
