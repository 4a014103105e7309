"""`qledge migrate`: apply the database migrations and exit (the image's start-up check)."""

from __future__ import annotations

from .output import fail


def migrate_cmd() -> int:
    from .. import paths, settings
    from ..db import backend, migrate

    try:
        conf = settings.load()
        paths.prepare_roots(conf)
        done = backend.migrate_now(conf)
    except (settings.SettingsError, migrate.MigrationError, paths.RootError, OSError) as exc:
        return fail(str(exc))
    where = settings.redact_dsn(conf.database_url) if conf.fleet else str(conf.db_path)
    print(f"migrations applied to {where}: {done or 'none (up to date)'}")
    return 0
