"""`qledge passwd`: set the panel's password, or turn its second factor off
(`--reset-totp`), on the machine itself (docs/security.md, "Signing in to the panel").
The operator needs no current password: who runs this holds the data volume."""

from __future__ import annotations

import asyncio
import getpass
import sys

from .output import fail


async def _apply(new: str | None, reset_totp: bool, end_sessions: bool) -> None:
    from .. import settings
    from ..auth import Accounts
    from ..db import backend

    conf = settings.load()
    db = backend.database(conf, readers=1)
    await db.open()
    try:
        # No admin token is needed here: `operator=True` is the machine's own say-so.
        accounts = Accounts(db, "", idle_ms=conf.session_idle_s * 1000,
                            max_ms=conf.session_max_s * 1000)
        if new is not None:
            await accounts.set_password(new, current=None, operator=True)
        if reset_totp:
            await accounts.totp_reset()
        if end_sessions:
            await accounts.sign_out_everywhere()
    finally:
        await db.close()


def _read_new(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\n")
    first = getpass.getpass("New panel password: ")
    if getpass.getpass("Again: ") != first:
        raise ValueError("the two passwords differ")
    return first


def passwd_cmd(*, reset_totp: bool, from_stdin: bool, end_sessions: bool) -> int:
    from .. import paths, settings
    from ..auth import WeakPassword
    from ..auth.password import check_new
    from ..db import backend, migrate

    try:
        new = None if reset_totp else _read_new(from_stdin)
        if new is not None:
            check_new(new)
        conf = settings.load()
        paths.prepare_roots(conf)
        backend.migrate_now(conf)
        asyncio.run(_apply(new, reset_totp, end_sessions))
    except (WeakPassword, ValueError, EOFError) as exc:
        return fail(str(exc))
    except (settings.SettingsError, migrate.MigrationError, paths.RootError, OSError) as exc:
        return fail(str(exc))
    print("second factor turned off" if reset_totp else "panel password set")
    return 0
