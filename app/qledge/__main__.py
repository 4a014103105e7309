"""CLI: serve | migrate | audit receipts | task ... | import qinglong ... | version."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable

from . import __version__

log = logging.getLogger("qledge")


def _setup_logging() -> None:
    logging.basicConfig(
        level=os.environ.get("QLEDGE_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # aiosqlite's DEBUG lines print every statement with its parameters: env values,
    # subscription credentials. They never reach the log, whatever QLEDGE_LOG_LEVEL says.
    logging.getLogger("aiosqlite").setLevel(logging.INFO)


def _fail(message: str, code: int = 2) -> int:
    print(f"qledge: {message}", file=sys.stderr)
    return code


def serve(*, boot_id: str | None = None) -> int:
    """Run the HTTP worker in ONE process (no forking supervisor of its own).

    `boot_id` exists for the power-cut drills, whose runner simulates a reboot
    (tests/drills/_reboot_worker.py); the CLI never passes it, so the product
    always reads /proc/sys/kernel/random/boot_id.
    """
    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config, Sockets

    from . import paths, process, settings
    from .db import backend, migrate
    from .http.app import create_app
    from .launch import isolation
    from .launch.identity import pidfd_unavailable
    from .receipts.store import UnsupportedVolume, probe

    # Tasks run as this uid: keep /proc/<pid>/environ, mem, fd and ptrace closed to
    # them, then take the admin token out of the environment (docs/security.md).
    process.make_nondumpable()
    try:
        conf = settings.load()
        process.scrub_environ("QLEDGE_ADMIN_TOKEN")
        paths.prepare_roots(conf)
        isolation.check_layout(conf)
        lock_fd = paths.acquire_runtime_lock(conf)
        if conf.fleet:
            log.info("fleet mode: database %s, node %s", settings.redact_dsn(conf.database_url),
                     conf.node_name or "(host name)")
        backend.migrate_now(conf)
        probe(conf.receipts_path)
        token, generated = paths.admin_token(conf)
    except paths.AlreadyRunning as exc:
        return _fail(str(exc), 3)
    except (settings.SettingsError, migrate.MigrationError, paths.RootError,
            UnsupportedVolume, OSError) as exc:
        return _fail(str(exc))
    why = pidfd_unavailable()
    if why is not None:
        log.warning("no pidfds (%s): launcher exits are found by checking pid + start time + "
                    "boot id in /proc every 0.2 s, and signals go by pid after a fresh "
                    "identity check", why)
    if generated:
        # Shown once, at generation; afterwards only the file holds it.
        log.warning("generated admin token (shown once, also stored in %s): %s",
                    conf.data_path / "secrets" / "admin.token", token)

    class _Config(Config):
        # Hypercorn marks listening sockets inheritable (for its forking mode). A
        # launcher must never hold the port: a restarted worker could not bind.
        def create_sockets(self) -> Sockets:
            sockets = super().create_sockets()
            for sock in (*sockets.secure_sockets, *sockets.insecure_sockets,
                         *sockets.quic_sockets):
                sock.set_inheritable(False)
            return sockets

    config = _Config()
    config.bind = [f"{conf.host}:{conf.port}"]
    config.accesslog = None
    config.startup_timeout = 120.0
    config.shutdown_timeout = conf.shutdown_drain_s + 5.0
    config.graceful_timeout = 5.0
    app = create_app(conf, token, boot_id=boot_id)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await hypercorn_serve(app, config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]

    factory = _loop_factory()
    log.info("qledge %s serving on %s (pid %d, %s loop)", __version__, config.bind[0],
             os.getpid(), "asyncio" if factory is None else "uvloop")
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())
    os.close(lock_fd)
    return 0


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:  # no wheel (32-bit ARM, non-Linux): asyncio's own loop
        return None
    return uvloop.new_event_loop


def migrate_cmd() -> int:
    from . import paths, settings
    from .db import backend, migrate

    try:
        conf = settings.load()
        paths.prepare_roots(conf)
        done = backend.migrate_now(conf)
    except (settings.SettingsError, migrate.MigrationError, paths.RootError, OSError) as exc:
        return _fail(str(exc))
    where = settings.redact_dsn(conf.database_url) if conf.fleet else str(conf.db_path)
    print(f"migrations applied to {where}: {done or 'none (up to date)'}")
    return 0


def embedded_only(what: str, words: list[str]) -> int | None:
    """A command that reads the embedded SQLite file: in fleet mode (and without an
    explicit --db file) it says so and stops, instead of reading a stale or absent
    file next to a node whose data is in PostgreSQL."""
    from . import settings

    if any(w == "--db" or w.startswith("--db=") for w in words):
        return None
    try:
        fleet = settings.load().fleet
    except settings.SettingsError:
        return None  # the command itself reports the settings' problem
    if not fleet:
        return None
    return _fail(f"`qledge {what}` is for the embedded SQLite database; this node is in"
                 " fleet mode (QLEDGE_DATABASE_URL set) and its data is in PostgreSQL."
                 " Pass --db <file> to audit an embedded database file")


def import_cmd(args: argparse.Namespace) -> int:
    """`qledge import qinglong <path>`: a dry run unless --apply (runtime/imports.py)."""
    import json
    from pathlib import Path

    from . import paths, settings
    from .db import backend, migrate
    from .importer import ImportFailed, SourceError
    from .importer import report as qinglong_report
    from .runtime import imports

    async def go(conf: settings.Settings) -> int:
        db = backend.database(conf, readers=1)
        await db.open()
        try:
            plan = await imports.run(db, conf, Path(args.path), apply=args.apply,
                                     on_conflict=args.on_conflict, with_logs=args.with_logs)
        finally:
            await db.close()
        if args.json:
            print(json.dumps(qinglong_report.as_json(plan), ensure_ascii=False, indent=1))
        else:
            print(qinglong_report.text(plan), end="")
        return 0

    try:
        conf = settings.load()
        paths.prepare_roots(conf)
        backend.migrate_now(conf)
        return asyncio.run(go(conf))
    except (SourceError, ImportFailed) as exc:
        return _fail(str(exc), 1)
    except (settings.SettingsError, migrate.MigrationError, paths.RootError, OSError) as exc:
        return _fail(str(exc))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="qledge")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("serve", help="run the HTTP worker and the runtime")
    sub.add_parser("migrate", help="apply database migrations and exit")
    sub.add_parser("version", help="print the version")
    audit = sub.add_parser("audit", help="operator audits")
    audit_sub = audit.add_subparsers(dest="what", required=True)
    # prefix_chars="+": every -/-- option (and -h) passes through to audit.main.
    receipts = audit_sub.add_parser("receipts", help="bounded audit of orphan receipt files",
                                    prefix_chars="+", add_help=False)
    receipts.add_argument("rest", nargs=argparse.REMAINDER)
    # QingLong's command for operators (task_cli.py): every word passes through.
    task = sub.add_parser("task", help="run a script as a tracked run: task <path> [now] ...",
                          prefix_chars="+", add_help=False)
    task.add_argument("rest", nargs=argparse.REMAINDER)
    subscription = sub.add_parser("subscription", help="subscriptions (docs/subscriptions.md)")
    subscription_sub = subscription.add_subparsers(dest="what", required=True)
    pull = subscription_sub.add_parser("pull", help="one pull; run by the subscription's task")
    pull.add_argument("id")
    deps = sub.add_parser("deps", help="dependencies (docs/dependencies.md)")
    deps_sub = deps.add_subparsers(dest="what", required=True)
    apply = deps_sub.add_parser("apply", help="one job; run by the dependencies task")
    apply.add_argument("ecosystem", choices=["python", "node"])
    importer = sub.add_parser("import", help="bring another panel's data in")
    import_sub = importer.add_subparsers(dest="what", required=True)
    qinglong = import_sub.add_parser(
        "qinglong", help="a QingLong data directory or backup .tgz (docs/"
        "migrating-from-qinglong.md); prints what would change unless --apply")
    qinglong.add_argument("path", help="QingLong's /ql/data (mounted read-only) or its .tgz")
    qinglong.add_argument("--apply", action="store_true", help="import (default: dry run)")
    qinglong.add_argument("--on-conflict", choices=("rename", "replace"), default=None,
                          help="what to do with a conflict (default: list and skip it)")
    qinglong.add_argument("--with-logs", type=int, default=0, metavar="N",
                          help="also copy the last N logs of each cron, read-only")
    qinglong.add_argument("--json", action="store_true", help="the report as JSON")
    args = parser.parse_args(argv)
    if args.cmd == "import":
        if not 0 <= args.with_logs <= 100:
            parser.error("--with-logs takes 0 to 100")
        _setup_logging()
        return import_cmd(args)
    if args.cmd == "subscription":
        from .subscriptions import pull as subscription_pull

        return subscription_pull.main(args.id)
    if args.cmd == "deps":
        from .dependencies import install as dependency_install

        return dependency_install.main(args.ecosystem)
    _setup_logging()
    if args.cmd == "serve":
        return serve()
    if args.cmd == "migrate":
        return migrate_cmd()
    if args.cmd == "task":
        from . import task_cli

        return task_cli.main(args.rest)
    if args.cmd == "version":
        print(f"qledge {__version__}")
        return 0
    refused = embedded_only("audit receipts", args.rest)
    if refused is not None:
        return refused
    from .audit import receipts as audit_mod

    return audit_mod.main(args.rest)


if __name__ == "__main__":
    sys.exit(main())
