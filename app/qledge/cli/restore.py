"""`qledge restore ARCHIVE [--replace] [--force]` (docs/backup.md, "Restoring"): the
archive checked whole and staged; with the worker stopped the swap follows at once,
with it running the staged state is applied when the worker next starts."""

from __future__ import annotations

import argparse
import os
import sys

from .output import fail


def restore_cmd(args: argparse.Namespace) -> int:
    from .. import paths, settings
    from ..backup import BackupInvalid, RestoreError, restore, swap
    from .backup import NoPassphrase, passphrase_of

    try:  # first: the variable leaves the environment before anything else runs
        passphrase = passphrase_of(args)
    except NoPassphrase as exc:
        return fail(str(exc))
    try:
        conf = settings.load()
        paths.prepare_roots(conf)
    except (settings.SettingsError, paths.RootError, OSError) as exc:
        return fail(str(exc))
    if args.cancel:
        try:
            lock_fd = paths.acquire_runtime_lock(conf)
        except paths.AlreadyRunning:
            lock_fd = -1  # a running worker applies a marker only at its start
        try:
            dropped = swap.cancel(conf)
        except swap.Busy as exc:
            return fail(f"RESTORE_BUSY: {exc}")
        finally:
            if lock_fd >= 0:
                os.close(lock_fd)
        print("staged restore dropped" if dropped else "no restore was staged", file=sys.stderr)
        return 0
    if not args.archive:
        return fail("restore takes the archive's path (or - for stdin)")
    try:
        source = sys.stdin.buffer if args.archive == "-" else open(args.archive, "rb")  # noqa: SIM115
    except OSError as exc:
        return fail(str(exc))
    try:
        pending = restore.stage(conf, source, replace=args.replace, force=args.force,
                                passphrase=passphrase)
    except (BackupInvalid, RestoreError) as exc:
        return fail(f"{exc.code}: {exc} (nothing was changed)")
    except swap.Busy as exc:
        return fail(f"RESTORE_BUSY: {exc} (nothing was changed)")
    except OSError as exc:
        return fail(f"restore failed: {exc} (nothing was changed)")
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    counts = ", ".join(f"{k} {v}" for k, v in pending.counts.items())
    requeued = ", ".join(f"{k} {v}" for k, v in pending.requeued.items()) or "none"
    print(f"archive verified and staged: schema {pending.schema_version}, {counts};"
          f" dependency installs queued: {requeued}; logs "
          + ("replaced by the archive's" if pending.logs else "left as they are (none in the"
             " archive)"), file=sys.stderr)
    try:
        lock_fd = paths.acquire_runtime_lock(conf)
    except paths.AlreadyRunning:
        print("the worker is running: the restore is applied when it restarts"
              " (e.g. `supervisorctl restart http`, or restart the container)", file=sys.stderr)
        return 0
    try:
        swap.apply_pending(conf)
    except OSError as exc:
        return fail(f"the swap was cut short ({exc}): it is finished at the next start")
    finally:
        os.close(lock_fd)
    print("restored: start the worker to use it", file=sys.stderr)
    return 0
