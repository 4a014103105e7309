"""`qledge serve`: the HTTP worker and the runtime in one process, and its start-up order
(settings → roots → flock → migrations → receipts volume probe → token → serve)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable

from .. import __version__
from .output import fail

log = logging.getLogger("qledge")


def serve(*, boot_id: str | None = None) -> int:
    """Run the HTTP worker in ONE process (no forking supervisor of its own).

    `boot_id` exists for the power-cut drills, whose runner simulates a reboot
    (tests/drills/_reboot_worker.py); the CLI never passes it, so the product
    always reads /proc/sys/kernel/random/boot_id.
    """
    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config, Sockets

    from .. import paths, process, settings
    from ..db import backend, migrate
    from ..http.app import create_app
    from ..launch import isolation
    from ..launch.identity import pidfd_unavailable
    from ..receipts.store import UnsupportedVolume, probe

    # Tasks run as this uid: keep /proc/<pid>/environ, mem, fd and ptrace closed to
    # them, then take the admin token out of the environment (docs/security.md).
    process.make_nondumpable()
    try:
        conf = settings.load()
        process.scrub_environ("QLEDGE_ADMIN_TOKEN")
        paths.prepare_roots(conf)
        isolation.check_layout(conf)
        lock_fd = paths.acquire_runtime_lock(conf)
        if not conf.fleet:  # a staged restore is put in place before the database opens
            from ..backup import swap

            swap.apply_pending(conf)
        if conf.fleet:
            log.info("fleet mode: database %s, node %s", settings.redact_dsn(conf.database_url),
                     conf.node_name or "(host name)")
        backend.migrate_now(conf)
        probe(conf.receipts_path)
        token, generated = paths.admin_token(conf)
    except paths.AlreadyRunning as exc:
        return fail(str(exc), 3)
    except (settings.SettingsError, migrate.MigrationError, paths.RootError,
            UnsupportedVolume, OSError) as exc:
        return fail(str(exc))
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
        app.state.restart = stop.set  # a staged restore: exit, supervisord starts us again
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
