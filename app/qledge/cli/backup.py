"""`qledge backup` (docs/backup.md): an archive of this appliance streamed to a file or to
stdout, or with --estimate the sizes it would hold; `qledge backup verify` checks one."""

from __future__ import annotations

import argparse
import os
import sys

from .output import fail


def backup_cmd(args: argparse.Namespace) -> int:
    from .. import backup, settings
    from ..db import snapshot

    try:
        conf = settings.load()
    except settings.SettingsError as exc:
        return fail(str(exc))
    if conf.fleet:
        return fail("fleet mode keeps its data in PostgreSQL: back it up with pg_dump"
                    " (docs/backup.md); `qledge backup` is for the embedded database")
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
        manifest = backup.write(conf, out, gzip=not args.no_gzip, with_logs=args.with_logs,
                                with_history=args.with_history)
        out.flush()
        if args.output != "-":
            os.fsync(out.fileno())
    except (snapshot.SnapshotError, OSError) as exc:
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


def verify_cmd(args: argparse.Namespace) -> int:
    from .. import backup

    try:
        with open(args.archive, "rb") as f:
            manifest = backup.verify(f)
    except backup.BackupInvalid as exc:
        return fail(f"{exc.code}: {exc}")
    except OSError as exc:
        return fail(str(exc))
    print(f"ok: format {manifest.format}, qledge {manifest.qledge_version}, schema"
          f" {manifest.schema_version}, {len(manifest.members)} members, all checksums match")
    return 0
