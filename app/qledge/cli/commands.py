"""The `qledge` command line: its parser, and one function per subcommand
(`set_defaults(func=…)`), each importing what it runs only when it runs."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from .. import __version__
from .import_qinglong import import_cmd
from .migrate import migrate_cmd
from .output import fail, setup_logging
from .serve import serve


def embedded_only(what: str, words: list[str]) -> int | None:
    """A command that reads the embedded SQLite file: in fleet mode (and without an
    explicit --db file) it says so and stops, instead of reading a stale or absent
    file next to a node whose data is in PostgreSQL."""
    from .. import settings

    if any(w == "--db" or w.startswith("--db=") for w in words):
        return None
    try:
        fleet = settings.load().fleet
    except settings.SettingsError:
        return None  # the command itself reports the settings' problem
    if not fleet:
        return None
    return fail(f"`qledge {what}` is for the embedded SQLite database; this node is in"
                " fleet mode (QLEDGE_DATABASE_URL set) and its data is in PostgreSQL."
                " Pass --db <file> to audit an embedded database file")


# The pull and the install set up no logging of their own here: they are tasks, and
# their output is the task's log.
def _subscription_pull(args: argparse.Namespace) -> int:
    from ..subscriptions import pull as subscription_pull

    return subscription_pull.main(args.id)


def _deps_apply(args: argparse.Namespace) -> int:
    from ..dependencies import install as dependency_install

    return dependency_install.main(args.ecosystem)


def _import_qinglong(args: argparse.Namespace) -> int:
    setup_logging()
    return import_cmd(args)


def _serve(args: argparse.Namespace) -> int:
    setup_logging()
    return serve()


def _migrate(args: argparse.Namespace) -> int:
    setup_logging()
    return migrate_cmd()


def _task(args: argparse.Namespace) -> int:
    setup_logging()
    from . import task as task_cli

    return task_cli.main(args.rest)


def _version(args: argparse.Namespace) -> int:
    setup_logging()
    print(f"qledge {__version__}")
    return 0


def _audit_receipts(args: argparse.Namespace) -> int:
    setup_logging()
    refused = embedded_only("audit receipts", args.rest)
    if refused is not None:
        return refused
    from ..audit import receipts as audit_mod

    return audit_mod.main(args.rest)


def _passwd(args: argparse.Namespace) -> int:
    setup_logging()
    from .passwd import passwd_cmd

    return passwd_cmd(reset_totp=args.reset_totp, from_stdin=args.stdin,
                      end_sessions=args.sign_out_everywhere)


def _backup(args: argparse.Namespace) -> int:
    setup_logging()
    from . import backup as backup_cli

    if args.what == "verify":
        return backup_cli.verify_cmd(args)
    if args.what == "scheduled":
        return backup_cli.scheduled_cmd(args)
    return backup_cli.backup_cmd(args)


def _restore(args: argparse.Namespace) -> int:
    setup_logging()
    from .restore import restore_cmd

    return restore_cmd(args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="qledge")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("serve", help="run the HTTP worker and the runtime").set_defaults(
        func=_serve)
    sub.add_parser("migrate", help="apply database migrations and exit").set_defaults(
        func=_migrate)
    sub.add_parser("version", help="print the version").set_defaults(func=_version)
    audit = sub.add_parser("audit", help="operator audits")
    audit_sub = audit.add_subparsers(dest="what", required=True)
    # prefix_chars="+": every -/-- option (and -h) passes through to audit.main.
    receipts = audit_sub.add_parser("receipts", help="bounded audit of orphan receipt files",
                                    prefix_chars="+", add_help=False)
    receipts.add_argument("rest", nargs=argparse.REMAINDER)
    receipts.set_defaults(func=_audit_receipts)
    # QingLong's command for operators (cli/task.py): every word passes through.
    task = sub.add_parser("task", help="run a script as a tracked run: task <path> [now] ...",
                          prefix_chars="+", add_help=False)
    task.add_argument("rest", nargs=argparse.REMAINDER)
    task.set_defaults(func=_task)
    subscription = sub.add_parser("subscription", help="subscriptions (docs/subscriptions.md)")
    subscription_sub = subscription.add_subparsers(dest="what", required=True)
    pull = subscription_sub.add_parser("pull", help="one pull; run by the subscription's task")
    pull.add_argument("id")
    pull.set_defaults(func=_subscription_pull)
    deps = sub.add_parser("deps", help="dependencies (docs/dependencies.md)")
    deps_sub = deps.add_subparsers(dest="what", required=True)
    apply = deps_sub.add_parser("apply", help="one job; run by the dependencies task")
    apply.add_argument("ecosystem", choices=["python", "node"])
    apply.set_defaults(func=_deps_apply)
    importer = sub.add_parser("import", help="bring another panel's data in")
    import_sub = importer.add_subparsers(dest="what", required=True)
    qinglong = import_sub.add_parser(
        "qinglong", help="a QingLong data directory or backup .tgz (docs/"
        "migrating-from-qinglong.md); prints what would change unless --apply")
    qinglong.add_argument("path", help="QingLong's /ql/data (mounted read-only) or its .tgz")
    qinglong.add_argument("--apply", action="store_true", help="import (default: dry run)")
    qinglong.add_argument("--on-conflict", choices=("rename", "replace", "skip"),
                          default="skip", help="what to do with each conflict, as the"
                          " panel's global choice (default: list and skip it)")
    qinglong.add_argument("--with-logs", type=int, default=0, metavar="N",
                          help="also copy the last N logs of each cron, read-only")
    qinglong.add_argument("--json", action="store_true", help="the report as JSON")
    qinglong.set_defaults(func=_import_qinglong)
    passwd = sub.add_parser("passwd", help="set the panel's password (docs/security.md)")
    passwd.add_argument("--reset-totp", action="store_true",
                        help="turn the second factor off instead (recovery codes too)")
    passwd.add_argument("--stdin", action="store_true",
                        help="read the new password from the first line of stdin")
    passwd.add_argument("--sign-out-everywhere", action="store_true",
                        help="also end every panel session")
    passwd.set_defaults(func=_passwd)
    bk = sub.add_parser("backup", help="an archive of this appliance (docs/backup.md)")
    bk.add_argument("what", nargs="?", choices=["write", "verify", "scheduled"],
                    default="write")
    bk.add_argument("archive", nargs="?", default="",
                    help="verify: the archive to check")
    bk.add_argument("-o", "--output", default="-", help="the archive (default: stdout)")
    bk.add_argument("--estimate", action="store_true", help="print the sizes, write nothing")
    bk.add_argument("--with-logs", action="store_true", help="also the runs' logs")
    bk.add_argument("--with-history", action="store_true", help="also the run history")
    bk.add_argument("--no-gzip", action="store_true", help="a plain tar")
    bk.add_argument("--to-dir", default="", help="a new archive in this directory, rotated")
    bk.add_argument("--keep", type=int, default=7, help="--to-dir: archives kept (1-1000)")
    bk.add_argument("--passphrase-file", default="",
                    help="encrypt (verify: decrypt) with the passphrase in this file's first"
                    " line (or QLEDGE_BACKUP_PASSPHRASE)")
    bk.set_defaults(func=_backup)
    rs = sub.add_parser("restore", help="restore a backup archive (docs/backup.md)")
    rs.add_argument("archive", nargs="?", default="", help="the archive (- for stdin)")
    rs.add_argument("--replace", action="store_true", help="replace this appliance's data")
    rs.add_argument("--force", action="store_true", help="even while runs are executing")
    rs.add_argument("--cancel", action="store_true",
                    help="drop a restore staged and not yet applied")
    rs.add_argument("--passphrase-file", default="",
                    help="an encrypted archive's passphrase, this file's first line (or"
                    " QLEDGE_BACKUP_PASSPHRASE)")
    rs.set_defaults(func=_restore)
    args = parser.parse_args(argv)
    if args.cmd == "backup" and args.what == "verify" and not args.archive:
        parser.error("backup verify takes the archive's path")
    if args.cmd == "import" and not 0 <= args.with_logs <= 100:
        parser.error("--with-logs takes 0 to 100")
    func: Callable[[argparse.Namespace], int] = args.func
    return func(args)
