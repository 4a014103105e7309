"""A task command that needs no shell (issue 40).

`parse` (pure) returns the argv of a command whose meaning under `/bin/sh -c
"<command>"` (Debian's dash) is "run this one program with these words" — and None for
everything else, which keeps the shell. Debian's dash forks for the last command of
`-c` instead of exec'ing it, so under the shell a plain `python3 bot.py` keeps a shell
(~200 KiB PSS) resident for the task's whole life; exec'd directly, the launcher's child
is the program itself.

What the shell still does for a direct argv, and where it is done instead:
* the PATH search and its failures (not found 127, not executable 126, a script
  without `#!` run by `sh`): the launcher execs the argv with `execvp`, and when that
  fails with `--sh-fallback` it hands the same words to `/bin/sh -c '"$@"'`, so dash
  itself says what it says under `sh -c` (image/launcher/README.md);
* the environment dash exports to its child: `exports` below.

Accepted words are built only of characters no shell treats specially, or quoted so
that nothing in them is special; anything else — an operator, a redirection, an
expansion, a glob, a comment, a tilde, a leading assignment, a builtin or reserved
word as the command name — returns None.
"""

from __future__ import annotations

import os
import re
import string
from collections.abc import Mapping

# Unquoted, these are literal in every position of a word in POSIX sh (a leading `=`
# word is refused separately: before the command name it would be an assignment).
_LITERAL = frozenset(string.ascii_letters + string.digits + "_-./,:@%+=")
# Inside double quotes these still expand or escape.
_DOUBLE_QUOTE_ACTIVE = frozenset("$`\\")
BLANKS = " \t"
# An argv of many one-character words costs a pointer per word on top of the
# command's bytes; past this the shell's single string is kept (E2BIG stays as rare
# as it was).
MAX_WORDS = 1024

# dash 0.5.12's builtins (`command -V` on Debian bookworm; builtins.def): dash runs
# these itself, and a builtin that also exists as a program (`echo`, `printf`, `kill`,
# `test`, `pwd`) does not always behave like it.
DASH_BUILTINS = frozenset({
    ".", ":", "[", "alias", "bg", "break", "cd", "chdir", "command", "continue", "echo",
    "eval", "exec", "exit", "export", "false", "fg", "getopts", "hash", "jobs", "kill",
    "local", "printf", "pwd", "read", "readonly", "return", "set", "shift", "test",
    "times", "trap", "true", "type", "ulimit", "umask", "unalias", "unset", "wait",
})
# dash's reserved words, and other shells' (a command written for bash keeps its shell
# rather than running a program of that name).
RESERVED = frozenset({
    "!", "{", "}", "case", "do", "done", "elif", "else", "esac", "fi", "for", "if", "in",
    "then", "until", "while", "[[", "]]", "function", "select", "time", "coproc",
})
NEEDS_SHELL = DASH_BUILTINS | RESERVED

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _plain(ch: str) -> bool:
    """A character that is literal unquoted: the safe ASCII set, or a printable
    non-ASCII one (dash gives bytes >= 0x80 no meaning; `python3 签到.py`)."""
    return ch in _LITERAL or (ord(ch) > 0x7F and ch.isprintable())


def _quotable(body: str) -> bool:
    """Quoted text the shell passes on byte for byte: printable or blanks only (a
    newline, CR, NUL or other control character keeps the shell)."""
    return all(ch in BLANKS or ch.isprintable() for ch in body)


def parse(command: str) -> list[str] | None:
    """The argv `sh -c command` would exec for a single simple command, or None."""
    # Line breaks before or after the command are empty lines to the shell (an editor's
    # final newline); one inside it, or one escaped by a `\`, is refused below.
    command = command.strip(BLANKS + "\n")
    words: list[str] = []
    i, n = 0, len(command)
    while True:
        while i < n and command[i] in BLANKS:
            i += 1
        if i == n:
            break
        parts: list[str] = []
        while i < n and command[i] not in BLANKS:
            ch = command[i]
            if ch in "'\"":
                end = command.find(ch, i + 1)
                if end < 0:
                    return None  # unterminated: the shell's syntax error, not ours
                body = command[i + 1:end]
                if not _quotable(body):
                    return None
                if ch == '"' and any(c in _DOUBLE_QUOTE_ACTIVE for c in body):
                    return None
                parts.append(body)
                i = end + 1
            elif _plain(ch):
                parts.append(ch)
                i += 1
            else:
                return None
        words.append("".join(parts))
        if len(words) > MAX_WORDS:
            return None
    if not words:
        return None
    name = words[0]
    # `=` anywhere in the first word: conservative (only `NAME=` before a quote is an
    # assignment, but nothing is lost by keeping the shell for the rest). A leading `-`
    # or `+`: `sh -c "-x …"` takes the string for options (exit 2, "Illegal option").
    if not name or "=" in name or name[0] in "-+" or name in NEEDS_SHELL:
        return None
    return words


# Variables dash sets itself at start-up, whatever the environment said: exported with
# its own value when the environment had them (dash's var.c INIT).
_DASH_RESETS = {"IFS": " \t\n", "OPTIND": "1"}


def exports(env: Mapping[str, str], cwd: str) -> dict[str, str] | None:
    """The environment dash would give its child when started with `env` in `cwd`,
    or None when it cannot be known before the launch (the shell is kept then).

    dash imports only variables with a shell name, resets IFS and OPTIND, exports PPID
    as its parent's pid (the launcher's, unknown here: None) and PWD as `cwd` unless
    the inherited PWD is an absolute path to the same directory. A PATH entry with `%`
    is an option to dash's search but a directory name to `execvp`: None. Reads the
    two directories' identities (not pure)."""
    if "PPID" in env or "PATH" not in env or "%" in env["PATH"]:
        return None
    out = {k: v for k, v in env.items() if _NAME.match(k)}
    for key, value in _DASH_RESETS.items():
        if key in out:
            out[key] = value
    pwd = out.get("PWD")
    if pwd is None or not pwd.startswith("/") or not _same_dir(pwd, cwd):
        out["PWD"] = cwd
    return out


def _same_dir(a: str, b: str) -> bool:
    try:
        sa, sb = os.stat(a), os.stat(b)
    except (OSError, ValueError):
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)
