"""Notification rules and messages (docs/notifications.md). Pure: no I/O here.

A run that becomes terminal is matched against the rules (the global set, then
the task's override); a match becomes one outbox row per enabled channel in
the transaction that made the run terminal (runtime/notifier.py).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from urllib.parse import urlsplit

import msgspec

from .. import ids
from ..model import FAILED_RUN, Run, RunStatus
from . import transitions, words

HHMM = re.compile(r"^([01][0-9]|2[0-3]):[0-5][0-9]$")
MAX_LOG_LINES = 50
MAX_STREAK = 100
# The rate limit per channel (docs/notifications.md, "Quiet by default").
MAX_RATE_LIMIT = 100
MIN_RATE_WINDOW_S, MAX_RATE_WINDOW_S = 1, 24 * 3600
# The statuses a rule may name; cancelled is the operator's own doing.
RULE_STATUSES = ("failed", "timed_out", "lost", "blocked", "succeeded")

# One line per reason code: what the operator reads in the message.
REASONS: dict[str, str] = {
    "EXITED": "the command exited on its own",
    "CANCEL_REQUESTED": "cancelled on request",
    "TIMEOUT": "ran past the task's timeout and was stopped",
    "CANCELLED_BEFORE_START": "cancelled before it started",
    "SPAWN_FAILED": "the command could not be started",
    "SPAWN_PREPARE_FAILED": "the run could not be prepared (a stored value is out of range)",
    "SPAWN_HANDLE_PERSIST_FAILED": "started, but its process identity could not be saved",
    "PROCESS_EXITED_WITHOUT_RECEIPT": "the launcher ended without writing a result",
    "RECOVERY_PROCESS_EXITED_WITHOUT_RECEIPT":
        "ended while the worker was down and left no result",
    "RECOVERY_SPAWN_UNCONFIRMED": "the worker stopped before the start was confirmed",
    "RECOVERY_SPAWN_BEFORE_REBOOT":
        "the machine went down while it was starting: it may have run",
    "RECOVERY_IDENTITY_MISMATCH": "its process was replaced by another one (pid reuse)",
    "RECOVERY_IDENTITY_MISSING": "its process identity was never recorded",
    "RECOVERY_BOOT_CHANGED": "the machine rebooted while it ran",
    "RECOVERY_IDENTITY_UNSUPPORTED": "its process could not be identified on this kernel",
    "RECOVERY_FOREIGN_OWNER": "it belonged to another node",
    "RECOVERY_RUN_ALREADY_ENDED":
        "its run had already ended while it was being started, and no result came",
    "TASK_ISOLATION_UNAVAILABLE": "task isolation is required but unavailable",
    "DISK_PRESSURE": "held: the disk is nearly full",
    "DISK_FREE_UNKNOWN": "held: the disk's free space is unknown",
}


class Rules(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The global rule set; every field has its default."""

    statuses: tuple[str, ...] = ("failed", "timed_out", "lost", "blocked")
    # "transitions": a task notifies when it starts failing and once when it
    # recovers; "every_run": every matching run (notifications/transitions.py).
    mode: str = "transitions"
    # A succeeded run whose result was recovered after a worker restart.
    recovered: bool = False
    # >0: a task whose runs fail N times in a row gets one message at the Nth,
    # none for the failures before or after it (a success starts over).
    streak: int = 0
    # "HH:MM" local time; messages due inside the window wait for its end.
    quiet_start: str | None = None
    quiet_end: str | None = None
    # The last N lines of the run's log in the message (logs can hold secrets).
    log_lines: int = 0
    disk_pressure: bool = True
    # At most `rate_limit` messages per channel in any `rate_window_s`; the rest
    # are held and go out as one digest per channel when the window allows (0: off).
    rate_limit: int = 5
    rate_window_s: int = 600


class RulesPatch(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True,
                 omit_defaults=True):
    """A task's override: only what it sets differs from the global rules."""

    statuses: tuple[str, ...] | None = None
    mode: str | None = None
    recovered: bool | None = None
    streak: int | None = None
    log_lines: int | None = None
    muted: bool | None = None


class Settings(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """What messages look like (stored in notify_settings). A PUT changes only the
    fields it names; `base_url` "" clears it."""

    # "en" | "zh-CN"; None until set (the panel sets its language on first use).
    language: str | None = None
    # The panel's public address for the run links (http(s)://host[:port][/path]);
    # None: QLEDGE_NOTIFY_BASE_URL's value.
    base_url: str | None = None


MAX_BASE_URL = 300


def check_settings(settings: Settings) -> None:
    if settings.language is not None and settings.language not in words.LANGUAGES:
        raise RuleError(f"language must be one of {', '.join(words.LANGUAGES)}", "language")
    url = settings.base_url
    if url:
        try:
            parts = urlsplit(url)
            _ = parts.port  # a port out of range or not a number: ValueError
        except ValueError:
            parts = urlsplit("")
        if (len(url) > MAX_BASE_URL or parts.scheme not in ("http", "https")
                or not parts.hostname or parts.query or parts.fragment or "@" in parts.netloc
                or any(c.isspace() for c in url)):
            raise RuleError("base_url must be http(s)://host[:port][/path], without user,"
                            f" query or fragment, at most {MAX_BASE_URL} characters",
                            "base_url")


class RuleError(ValueError):
    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def check(rules: Rules | RulesPatch) -> None:
    if rules.statuses is not None:
        for s in rules.statuses:
            if s not in RULE_STATUSES:
                raise RuleError(f"statuses: {s!r} is not one of {', '.join(RULE_STATUSES)}",
                                "statuses")
    if rules.mode is not None and rules.mode not in transitions.MODES:
        raise RuleError(f"mode must be one of {', '.join(transitions.MODES)}", "mode")
    if rules.streak is not None and not 0 <= rules.streak <= MAX_STREAK:
        raise RuleError(f"streak must be 0..{MAX_STREAK}", "streak")
    if rules.log_lines is not None and not 0 <= rules.log_lines <= MAX_LOG_LINES:
        raise RuleError(f"log_lines must be 0..{MAX_LOG_LINES}", "log_lines")
    if isinstance(rules, Rules):
        if not 0 <= rules.rate_limit <= MAX_RATE_LIMIT:
            raise RuleError(f"rate_limit must be 0..{MAX_RATE_LIMIT}", "rate_limit")
        if not MIN_RATE_WINDOW_S <= rules.rate_window_s <= MAX_RATE_WINDOW_S:
            raise RuleError(f"rate_window_s must be {MIN_RATE_WINDOW_S}..{MAX_RATE_WINDOW_S}",
                            "rate_window_s")
        if (rules.quiet_start is None) != (rules.quiet_end is None):
            raise RuleError("set quiet_start and quiet_end together", "quiet_start")
        for field in ("quiet_start", "quiet_end"):
            value = getattr(rules, field)
            if value is not None and not HHMM.match(value):
                raise RuleError(f"{field} must be HH:MM (24-hour)", field)


def effective(base: Rules, patch: RulesPatch | None) -> Rules | None:
    """The rules for one task; None when the task is muted."""
    if patch is None:
        return base
    if patch.muted:
        return None
    changes = {k: v for k, v in msgspec.structs.asdict(patch).items()
               if v is not None and k != "muted"}
    return msgspec.structs.replace(base, **changes) if changes else base


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    title: str
    body: str
    log_lines: int
    # apprise's notify type: "failure" for a failure, "success" for a success.
    level: str


def decide(rules: Rules | None, *, run: Run, task_name: str, task_num: int, recovered: bool,
           failures_before: int, base_url: str, language: str = "en") -> Decision | None:
    """The message for a run that just became terminal, or None.

    `failures_before`: how many of the task's previous runs failed in a row
    (counted up to `transitions.threshold(rules.streak)`; cancelled runs skipped)."""
    if rules is None:
        return None
    status = run.status.value
    failure = is_failure(run.status)
    change = transitions.change(rules.mode, failure=failure, failures_before=failures_before,
                                streak=rules.streak)
    if failure:
        if status not in rules.statuses or change is None:
            return None
    elif run.status is RunStatus.SUCCEEDED:
        opted_in = status in rules.statuses or (recovered and rules.recovered)
        if change is None and not opted_in:
            return None
    else:
        return None
    streak = rules.streak if failure and rules.streak > 0 else 0
    back = change is transitions.Change.RECOVERED
    return Decision(title=title(task_name, status, streak, language=language,
                                recovery=back),
                    body=body(run, task_name, task_num, recovered=recovered, streak=streak,
                              base_url=base_url, language=language, recovery=back),
                    log_lines=rules.log_lines, level="failure" if failure else "success")


def is_failure(status: RunStatus) -> bool:
    return status in FAILED_RUN


def title(task_name: str, status: str, streak: int = 0, *, language: str = "en",
          recovery: bool = False) -> str:
    word = words.status(language, status)
    if recovery:
        word = words.text(language, "recovered_title")
    elif streak:
        word = words.text(language, "title_streak", word, streak)
    sep = "：" if words.lang(language) == "zh-CN" else ": "
    return f"[qledge] {task_name}{sep}{word}"


def run_link(base_url: str, run_id: str) -> str:
    """The panel's page of the run, or its id when no public base URL is set."""
    return f"{base_url.rstrip('/')}/#/runs/{run_id}" if base_url else run_id


def body(run: Run, task_name: str, task_num: int, *, recovered: bool, streak: int,
         base_url: str, language: str = "en", recovery: bool = False) -> str:
    t = words.text
    lines = [t(language, "task", task_name, task_num),
             t(language, "status", words.status(language, run.status.value))]
    if run.reason_code:
        lines.append(t(language, "reason", words.reason(language, run.reason_code,
                                                         REASONS.get(run.reason_code))))
    lines.append(t(language, "exit", words.exit_code(language, run.exit_code)))
    if run.started_at_ms is not None and run.finished_at_ms is not None:
        lines.append(t(language, "duration", duration(run.finished_at_ms - run.started_at_ms)))
    if streak:
        lines.append(t(language, "streak", streak))
    if recovery:
        lines.append(t(language, "recovered"))
    if recovered:
        lines.append(t(language, "restart"))
    lines.append(t(language, "run", run_link(base_url, run.id)))
    return "\n".join(lines)


def duration(ms: int) -> str:
    s = max(ms, 0) / 1000
    if s < 60:
        return f"{s:.1f}s"
    m, sec = divmod(int(s), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s"


def quiet_until(rules: Rules, now_ms: int, localtime: time.struct_time | None = None
                ) -> int | None:
    """The end (epoch ms) of the quiet window `now_ms` falls in, or None."""
    if rules.quiet_start is None or rules.quiet_end is None:
        return None
    lt = localtime or time.localtime(now_ms / 1000)
    minute = lt.tm_hour * 60 + lt.tm_min
    start = _minutes(rules.quiet_start)
    end = _minutes(rules.quiet_end)
    inside = start <= minute < end if start <= end else (minute >= start or minute < end)
    if not inside or start == end:
        return None
    wait = (end - minute) % (24 * 60)
    return now_ms - (lt.tm_sec * 1000 + now_ms % 1000) + wait * 60_000


def _minutes(hhmm: str) -> int:
    h, m = hhmm.split(":")
    return int(h) * 60 + int(m)


def secrets_of(url: str) -> list[str]:
    """The parts of an apprise URL to keep out of any error text: the whole URL,
    its user/password, host and each path segment or query value of 4+ chars
    (tokens live in all of these, depending on the service)."""
    out = [url]
    try:
        parts = urlsplit(url)
    except ValueError:
        return out
    # The netloc whole and in pieces: some services put a token where a URL has
    # user, password, host or port (tgram://BOTID:TOKEN/...).
    out += [parts.netloc, *re.split(r"[:@]", parts.netloc)]
    out += [seg for seg in parts.path.split("/") if len(seg) >= 4]
    for pair in parts.query.split("&"):
        value = pair.partition("=")[2]
        if len(value) >= 4:
            out.append(value)
    return out


def redact(text: str, secrets: list[str], limit: int = 500) -> str:
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= 4 or secret == secrets[0]:
            text = text.replace(secret, "***")
    return text[:limit]


# -- the scripts' per-attempt credential (notify.py / sendNotify.js) ----------------

def script_key(admin_token: str) -> bytes:
    """The key of the per-attempt notify credentials (derived: nothing more to store)."""
    return hmac.new(admin_token.encode(), b"qledge notify credential v1",
                    hashlib.sha256).digest()


def script_token(key: bytes, attempt_id: str) -> str:
    mac = hmac.new(key, attempt_id.encode(), hashlib.sha256).digest()[:24]
    return f"{attempt_id}.{base64.urlsafe_b64encode(mac).decode().rstrip('=')}"


def script_attempt(key: bytes, token: str) -> str | None:
    attempt_id, _, _ = token.partition(".")
    if not ids.is_uuid7(attempt_id):
        return None
    return attempt_id if hmac.compare_digest(script_token(key, attempt_id), token) else None
