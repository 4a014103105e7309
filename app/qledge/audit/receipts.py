"""`qledge audit receipts`: bounded audit of receipt files the journal does not know.

The rules are docs/contract.md §9.

Recovery never lists the receipts volume (it pages the journal), so files it
will never look at — receipts of attempts whose journal row aged out, of
unknown attempts, launcher temp leftovers, anything else — are found here, by
a separate command with a read-only database connection and no runtime.

Each call walks a window of shards from an explicit cursor (`nextShard` feeds
the next cron call) and at most a fixed number of entries per shard, with
lstat only, never reading a file. Only 2-hex-digit shard directories are
walked, so `.quarantine/` and `.orphan-quarantine/` are never audited.

Decisions (documented in `--help`):
* `--shards` (default 8, cap 32) and `--per-shard` (default 32, cap 64) above
  their cap are clamped with a note, so an over-eager cron line still makes
  bounded progress; values below 1 are refused.
* `--min-age` defaults to 3600 s and is refused below 60 s: the age guards
  the publish/consume window (publish grace ≤ 100 ms, consumer rounds ≤ 30 s)
  with a wide margin.
* Journaled and active win over every class but `unsafe` (a symlink, FIFO or
  directory posing as a receipt is reported as what it is; it never moves).

Exit codes: 0 only journaled/active entries, 1 findings, 2 error.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path

import msgspec

from ..db import errors
from ..db.audit_queries import lookup, open_readonly
from . import _walk as walk

__all__ = ["Report", "ShardReport", "main", "open_readonly", "run"]

DEFAULT_SHARDS, MAX_SHARDS = 8, 32
DEFAULT_PER_SHARD, MAX_PER_SHARD = 32, 64
DEFAULT_MIN_AGE_S, MIN_MIN_AGE_S = 3600, 60
MAX_LISTED = 20  # paths listed per class; the rest is only counted
_MAX_NAME_CHARS = 160


class ShardReport(msgspec.Struct, frozen=True, kw_only=True):
    shard: str
    entries: int
    overflow: bool


class NotMoved(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    reason: str


class Report(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    root: str
    shard_cursor: str
    next_shard: str
    per_shard: int
    min_age_seconds: int
    shards: list[ShardReport]
    counts: dict[str, int]
    paths: dict[str, list[str]]
    omitted: dict[str, int]  # per class, paths counted but not listed
    quarantine: bool
    moved: int
    moved_paths: list[str]
    not_moved: list[NotMoved]
    notes: list[str]

    @property
    def clean(self) -> bool:
        findings = any(n for kind, n in self.counts.items() if kind not in walk.CLEAN)
        return not findings and not any(s.overflow for s in self.shards)


def display(rel: str) -> str:
    """A file name safe to print: names come from tasks, so no control bytes reach a terminal."""
    text = os.fsencode(rel).decode("utf-8", "backslashreplace")
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)
    return text if len(text) <= _MAX_NAME_CHARS else text[:_MAX_NAME_CHARS] + "…"


def run(root: Path, db: Path, *, cursor: str = "00", shards: int = DEFAULT_SHARDS,
        per_shard: int = DEFAULT_PER_SHARD, min_age: int = DEFAULT_MIN_AGE_S,
        quarantine: bool = False, now: float | None = None,
        notes: list[str] | None = None) -> Report:
    """Audit one window of shards. Raises walk.AuditError or a db.errors.StorageError (exit 2)."""
    clock = time.time() if now is None else now
    window, next_shard = walk.shard_window(cursor, shards)
    counts: Counter[str] = Counter({kind: 0 for kind in walk.CLASSES})
    paths: dict[str, list[str]] = {kind: [] for kind in walk.CLASSES}
    shard_reports: list[ShardReport] = []
    moves = walk.Moves()
    try:
        conn = open_readonly(db)
    except FileNotFoundError as exc:
        # Never create one: an empty database would make every receipt "unknown".
        raise walk.AuditError(f"no database file at {str(db)!r} (run `qledge migrate`)") from exc
    try:
        with walk.open_root(str(root)) as (real_root, root_fd):
            walk.preflight(real_root, window, quarantine)
            for shard in window:
                scan = walk.scan_shard(root_fd, shard, per_shard)
                ids = {walk.attempt_id_of(name) for name, _ in scan.found} - {None}
                known = lookup(conn, [i for i in ids if i is not None])
                entries = [
                    walk.Entry(shard=shard, name=name, st=st,
                               kind=walk.classify(shard, name, st, known, clock, min_age))
                    for name, st in scan.found
                ]
                shard_reports.append(ShardReport(shard=shard, entries=len(entries),
                                                 overflow=scan.overflow))
                for entry in entries:
                    counts[entry.kind] += 1
                    if len(paths[entry.kind]) < MAX_LISTED:
                        paths[entry.kind].append(display(entry.rel))
                # Overflow: a partial listing cannot prove what the rest is; move nothing.
                if quarantine and not scan.overflow:
                    done = walk.quarantine_shard(
                        root_fd, shard, [e for e in entries if e.kind in walk.ELIGIBLE])
                    moves.moved += done.moved
                    moves.failed += done.failed
    finally:
        conn.close()
    return Report(
        root=display(real_root), shard_cursor=cursor, next_shard=next_shard,
        per_shard=per_shard, min_age_seconds=min_age, shards=shard_reports,
        counts=dict(counts), paths=paths,
        omitted={kind: counts[kind] - len(paths[kind]) for kind in walk.CLASSES},
        quarantine=quarantine, moved=len(moves.moved),
        moved_paths=[display(p) for p in moves.moved[:MAX_LISTED]],
        not_moved=[NotMoved(path=display(p), reason=r) for p, r in moves.failed[:MAX_LISTED]],
        notes=list(notes or []),
    )


# -- CLI ------------------------------------------------------------------------


def _cursor(text: str) -> str:
    if re.fullmatch(r"[0-9a-f]{2}", text) is None:
        raise argparse.ArgumentTypeError("must be two lower-case hex digits, 00..ff")
    return text


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _min_age(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be an integer number of seconds") from None
    if value < MIN_MIN_AGE_S:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_MIN_AGE_S} seconds")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="qledge audit receipts",
        description="Bounded audit of receipt files unknown to the journal. Reports by default; "
        "--quarantine moves eligible old files into .orphan-quarantine/ (nothing is deleted). "
        "Exit 0 clean, 1 findings, 2 error.")
    p.add_argument("--shard-cursor", type=_cursor, default="00", metavar="XX",
                   help="first shard to walk (default 00); feed back nextShard")
    p.add_argument("--shards", type=_positive, default=DEFAULT_SHARDS, metavar="N",
                   help=f"shards per call (default {DEFAULT_SHARDS}, clamped to {MAX_SHARDS})")
    p.add_argument("--per-shard", type=_positive, default=DEFAULT_PER_SHARD, metavar="M",
                   help=f"entries per shard (default {DEFAULT_PER_SHARD}, clamped to "
                   f"{MAX_PER_SHARD}); a shard with more is overflow and nothing in it moves")
    p.add_argument("--min-age", type=_min_age, default=DEFAULT_MIN_AGE_S, metavar="SECONDS",
                   help=f"eligible files must be older (default {DEFAULT_MIN_AGE_S}, "
                   f"at least {MIN_MIN_AGE_S})")
    p.add_argument("--quarantine", action="store_true",
                   help="move eligible files (hard link + unlink) into .orphan-quarantine/")
    p.add_argument("--json", action="store_true", help="machine-readable report on stdout")
    p.add_argument("--receipts-dir", type=Path, help="override the configured receipts root")
    p.add_argument("--db", type=Path, help="override the configured database file")
    return p


def _paths(args: argparse.Namespace) -> tuple[Path, Path]:
    if args.receipts_dir is not None and args.db is not None:
        return args.receipts_dir, args.db  # no settings needed (tests, operators)
    from .. import settings

    conf = settings.load()
    return (args.receipts_dir or conf.receipts_path), (args.db or conf.db_path)


def _human(report: Report) -> str:
    mode = "quarantine" if report.quarantine else "report only"
    last = report.shards[-1].shard if report.shards else report.shard_cursor
    lines = [f"receipts audit of {report.root} ({mode}, min age {report.min_age_seconds}s)",
             f"shards {report.shard_cursor}..{last}, at most {report.per_shard} entries each; "
             f"nextShard {report.next_shard}"]
    overflow = [s.shard for s in report.shards if s.overflow]
    if overflow:
        lines.append(f"overflow (nothing moved): {' '.join(overflow)}")
    found = {kind: n for kind, n in report.counts.items() if n}
    lines.append(f"{'class':<22}{'count':>7}" if found else "no entries")
    for kind, n in found.items():
        lines.append(f"{kind:<22}{n:>7}")
        lines += [f"    {p}" for p in report.paths[kind]]
        if report.omitted[kind]:
            lines.append(f"    … {report.omitted[kind]} more not listed")
    if report.quarantine:
        lines.append(f"moved {report.moved} into .orphan-quarantine/")
        lines += [f"    not moved {m.path}: {m.reason}" for m in report.not_moved]
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)


def _error(message: str, as_json: bool) -> int:
    print(f"qledge audit receipts: {message}", file=sys.stderr)
    if as_json:
        print(msgspec.json.encode({"error": message}).decode())
    return 2


def main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2); the caller wants an int
        return exc.code if isinstance(exc.code, int) else 2
    notes: list[str] = []
    if args.shards > MAX_SHARDS:
        notes.append(f"--shards {args.shards} clamped to {MAX_SHARDS}")
    if args.per_shard > MAX_PER_SHARD:
        notes.append(f"--per-shard {args.per_shard} clamped to {MAX_PER_SHARD}")
    try:
        receipts_dir, db = _paths(args)
        report = run(receipts_dir, db, cursor=args.shard_cursor,
                     shards=min(args.shards, MAX_SHARDS),
                     per_shard=min(args.per_shard, MAX_PER_SHARD), min_age=args.min_age,
                     quarantine=args.quarantine, notes=notes)
    except walk.AuditError as exc:
        return _error(str(exc), args.json)
    except errors.StorageError as exc:
        return _error(f"database error: {exc}", args.json)
    except Exception as exc:  # SettingsError, OSError: stop with the message, no traceback
        return _error(f"{type(exc).__name__}: {exc}", args.json)
    print(msgspec.json.encode(report).decode() if args.json else _human(report))
    return 0 if report.clean else 1
