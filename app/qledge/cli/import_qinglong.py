"""`qledge import qinglong <path>`: the import's command (importer/, runtime/imports.py)."""

from __future__ import annotations

import argparse
import asyncio

from .output import fail


def import_cmd(args: argparse.Namespace) -> int:
    """`qledge import qinglong <path>`: a dry run unless --apply (runtime/imports.py)."""
    import json
    from pathlib import Path

    from .. import paths, settings
    from ..db import backend, migrate
    from ..importer import ImportFailed, SourceError
    from ..importer import report as qinglong_report
    from ..runtime import imports

    async def go(conf: settings.Settings) -> int:
        db = backend.database(conf, readers=1)
        await db.open()
        try:
            choice = None if args.on_conflict == "skip" else args.on_conflict  # the default
            plan = await imports.run(db, conf, Path(args.path), apply=args.apply,
                                     on_conflict=choice, with_logs=args.with_logs)
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
        return fail(str(exc), 1)
    except (settings.SettingsError, migrate.MigrationError, paths.RootError, OSError) as exc:
        return fail(str(exc))
