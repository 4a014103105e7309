"""What a script's header says about how to run it: a schedule and a name (pure, no I/O).

The formats are QingLong's (`shell/update.sh`, `add_cron`), tried in its order; the
first candidate that is a valid cron expression wins (docs/scripts.md):

schedule
  1. a line with a cron expression followed by the script's file name, as
     QuantumultX / Surge / Loon configs write it:
     `10 7 * * * jd_bean.js, tag=京豆`, `cron "10 7 * * *" script-path=…/jd_bean.js`
  2. a `cron:` line: `// cron: 1 9 * * *`, `# cron: "0 0 9 * * *"`
  3. a `cron "…"` line without the file name: `# cron "1 9 * * *"`
name
  1. `new Env('…')` (the common JS helper), 2. a `name:` header line, 3. the file name.
"""

from __future__ import annotations

import re
import shlex

import msgspec

from .. import cron

MAX_SCAN = 256 * 1024  # headers are at the top; minified megabytes need no regex
MAX_LINE = 2000
MAX_NAME = 200
_FIELD = r"[\d*](?:[\d*,/-]{0,40}[\d*])?"
_EXPR = rf"(?P<expr>(?:{_FIELD}[ \t]+){{4,5}}{_FIELD})"
_LINE_EXPR = re.compile(rf"(?<![\w*/,.-]){_EXPR}(?=[ \t,\"'])")
_CRON_COLON = re.compile(r"cron\s*[:：]\s*[\"'`]?\s*" + _EXPR + r"(?![\w*/,-])")
_CRON_QUOTED = re.compile(r"cron\s+([\"'])\s*" + _EXPR + r"\s*\1")
_ENV = re.compile(r"new\s+Env\s*\(\s*([\"'`])(.*?)\1")
_NAME = re.compile(r"^\s*(?:(?://+|#+|/?\*+|;+|--)\s*)?name\s*[:：]\s*(.+?)\s*(?:\*/\s*)?$",
                   re.I)


class ScriptMeta(msgspec.Struct, frozen=True, kw_only=True):
    schedule: str | None
    schedule_from: str | None  # "quantumult" | "cron_comment" | "cron_quoted" | None
    name: str
    name_from: str  # "env" | "name_comment" | "file"
    command: str


def valid_cron(expr: str) -> str | None:
    """The expression with single spaces if it parses (5 fields, or 6 with seconds)."""
    try:
        return cron.validate(expr)
    except cron.CronError:
        return None


def _lines(text: str) -> list[str]:
    return [line for line in text[:MAX_SCAN].splitlines() if len(line) <= MAX_LINE]


def _named_line(line: str, file_name: str) -> str | None:
    at = line.find(file_name)
    while at >= 0:
        before = line[at - 1] if at else " "
        end = at + len(file_name)
        after = line[end] if end < len(line) else " "
        if (before.isspace() or before in "/=,\"'") and (after.isspace() or after in ",\"'?#"):
            for m in _LINE_EXPR.finditer(line[:at]):
                expr = m.group("expr")
                # QingLong drops a '*' glued to the first field (`*10 7 * * *` in a
                # /* … */ block); try it as written first.
                candidates = [expr]
                if expr[:1] == "*" and (expr[1:2].isdigit() or expr[1:2] == "*"):
                    candidates.append(expr[1:])
                for candidate in candidates:
                    found = valid_cron(candidate)
                    if found:
                        return found
        at = line.find(file_name, at + 1)
    return None


def schedule_of(text: str, file_name: str) -> tuple[str | None, str | None]:
    lines = _lines(text)
    for line in lines:
        if file_name in line:
            found = _named_line(line, file_name)
            if found:
                return found, "quantumult"
    for pattern, source in ((_CRON_COLON, "cron_comment"), (_CRON_QUOTED, "cron_quoted")):
        for line in lines:
            if "cron" not in line:
                continue
            for m in pattern.finditer(line):
                found = valid_cron(m.group("expr"))
                if found:
                    return found, source
    return None, None


def _clean(name: str) -> str:
    return name.strip().strip("\"'`").strip()[:MAX_NAME]


def name_of(text: str, file_name: str) -> tuple[str, str]:
    lines = _lines(text)
    for line in lines:
        if "Env" in line:
            m = _ENV.search(line)
            if m and _clean(m.group(2)):
                return _clean(m.group(2)), "env"
    for line in lines:
        m = _NAME.match(line)
        if m and _clean(m.group(1)):
            return _clean(m.group(1)), "name_comment"
    return file_name[:MAX_NAME], "file"


def task_command(path: str) -> str:
    return f"task {shlex.quote(path)}"


def parse(text: str, path: str) -> ScriptMeta:
    """The header facts of the script at `path` (relative to the scripts folder)."""
    file_name = path.rsplit("/", 1)[-1]
    schedule, schedule_from = schedule_of(text, file_name)
    name, name_from = name_of(text, file_name)
    return ScriptMeta(schedule=schedule, schedule_from=schedule_from, name=name,
                      name_from=name_from, command=task_command(path))
