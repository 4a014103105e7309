"""`qledge backup` (docs/backup.md): an archive of this appliance streamed to a file or to
stdout, or with --estimate the sizes it would hold; `qledge backup verify` checks one.

A passphrase (--passphrase-file F, or QLEDGE_BACKUP_PASSPHRASE, removed from the
environment before anything else reads it) encrypts the archive (backup/crypto.py)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..settings import Settings
from .output import fail

# The worker says something at least every PROGRESS_S (http/backup_schedule.py).
SCHEDULED_READ_TIMEOUT_S = 300
PASSPHRASE_ENV = "QLEDGE_BACKUP_PASSPHRASE"  # noqa: S105 - a variable name, not a secret


class NoPassphrase(Exception):
    pass


def passphrase_of(args: argparse.Namespace) -> bytes | None:
    """The passphrase from --passphrase-file (its first line) or the environment."""
    from ..backup import BackupInvalid, crypto

    # Popped first: nothing this
    # process starts should inherit it.
    from_env = os.environ.pop(PASSPHRASE_ENV, None)
    if args.passphrase_file:
        try:
            with open(args.passphrase_file, encoding="utf-8") as f:
                text = f.readline().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise NoPassphrase(f"--passphrase-file: {exc}") from exc
    elif from_env is not None:
        text = from_env
    else:
        return None
    try:
        crypto.require()
        return crypto.check_passphrase(text)
    except BackupInvalid as exc:
        raise NoPassphrase(f"{exc.code}: {exc}") from None


def backup_cmd(args: argparse.Namespace) -> int:
    from .. import backup, settings
    from ..backup import crypto
    from ..db import snapshot

    try:
        passphrase = passphrase_of(args)
    except NoPassphrase as exc:
        return fail(str(exc))
    try:
        conf = settings.load()
    except settings.SettingsError as exc:
        return fail(str(exc))
    if conf.fleet:
        return fail("fleet mode keeps its data in PostgreSQL: back it up with pg_dump"
                    " (docs/backup.md); `qledge backup` is for the embedded database")
    if args.to_dir:
        return _to_dir(conf, args, passphrase)
    if args.estimate:
        sizes = backup.estimate(conf, with_logs=args.with_logs)
        for part, size in sizes.items():
            print(f"{part}: {size} bytes")
        print(f"total (before compression): {sum(sizes.values())} bytes")
        return 0
    if args.output == "-":
        out = sys.stdout.buffer
    else:
        # A temporary name, fsynced, renamed: a cut-short backup never has the final name.
        tmp = f"{args.output}.partial"
        out = open(tmp, "xb")  # noqa: SIM115 (closed below)
    try:
        sealed = crypto.EncryptingWriter(out, passphrase) if passphrase else None
        manifest = backup.write(conf, sealed or out, gzip=not args.no_gzip,  # type: ignore[arg-type]
                                with_logs=args.with_logs, with_history=args.with_history,
                                encrypted=sealed is not None)
        if sealed is not None:
            sealed.finish()
        out.flush()
        if args.output != "-":
            os.fsync(out.fileno())
    except (snapshot.SnapshotError, OSError, backup.BackupInvalid) as exc:
        if args.output != "-":
            out.close()
            os.unlink(tmp)
        return fail(f"backup failed: {exc}")
    if args.output != "-":
        out.close()
        os.rename(tmp, args.output)
        dirfd = os.open(os.path.dirname(os.path.abspath(args.output)), os.O_RDONLY)
        try:
            os.fsync(dirfd)
        finally:
            os.close(dirfd)
    counts = ", ".join(f"{k} {v}" for k, v in manifest.counts.items())
    print(f"backup written: {len(manifest.members)} members, schema {manifest.schema_version},"
          f" {counts}", file=sys.stderr)
    return 0


def _to_dir(conf: Settings, args: argparse.Namespace, passphrase: bytes | None) -> int:
    """A new archive in a directory, then rotation (docs/backup.md "Scheduled backups")."""
    from ..backup import BackupInvalid, schedule, schedule_run
    from ..db import snapshot

    if not 1 <= args.keep <= schedule.KEEP_MAX:
        return fail(f"--keep takes 1 to {schedule.KEEP_MAX}")
    try:
        schedule_run.run_into_dir(conf, Path(args.to_dir), args.keep,
                                  with_logs=args.with_logs, with_history=args.with_history,
                                  passphrase=passphrase,
                                  say=lambda line: print(line, flush=True))
    except schedule.DirectoryBusy as exc:
        return fail(str(exc))
    except (snapshot.SnapshotError, OSError, BackupInvalid) as exc:
        return fail(f"backup failed: {exc}")
    return 0


def scheduled_cmd(args: argparse.Namespace) -> int:
    """The scheduled backup task's command: a task cannot read the database (Landlock,
    launch/isolation.py), so it asks the worker, with its run's credential, to write the
    archive, and prints what the worker says: the run's log and exit code are the
    backup's. The worker reads the settings from the task itself, not from these words."""
    import urllib.error
    import urllib.request

    url, token = os.environ.get("QL_NOTIFY_URL", ""), os.environ.get("QL_NOTIFY_TOKEN", "")
    if not url.endswith("/notify") or not token:
        return fail("no run credential in the environment: `qledge backup scheduled` is"
                    " the scheduled backup task's command (PUT /api/v1/backup/schedule)")
    request = urllib.request.Request(  # noqa: S310 (the worker's own http:// address)
        url.removesuffix("/notify") + "/backup/scheduled", method="POST", data=b"",
        headers={"Authorization": f"Bearer {token}"})
    last = ""
    try:
        with urllib.request.urlopen(request, timeout=SCHEDULED_READ_TIMEOUT_S) as resp:  # noqa: S310
            for raw in resp:
                last = raw.decode("utf-8", "replace").rstrip("\n")
                print(last, flush=True)
    except urllib.error.HTTPError as exc:
        return fail(f"the worker refused: {exc.code} {exc.read().decode('utf-8', 'replace')}")
    except OSError as exc:
        return fail(f"backup failed: the worker's answer was cut: {exc}")
    return 0 if last.startswith("ok:") else 2


def verify_cmd(args: argparse.Namespace) -> int:
    from .. import backup

    try:
        passphrase = passphrase_of(args)
    except NoPassphrase as exc:
        return fail(str(exc))
    try:
        with open(args.archive, "rb") as f:
            manifest = backup.verify(f, passphrase=passphrase)
    except backup.BackupInvalid as exc:
        return fail(f"{exc.code}: {exc}")
    except OSError as exc:
        return fail(str(exc))
    print(f"ok: format {manifest.format}, qledge {manifest.qledge_version}, schema"
          f" {manifest.schema_version}, {len(manifest.members)} members,"
          f"{' encrypted,' if manifest.encrypted else ''} all checksums match")
    return 0
