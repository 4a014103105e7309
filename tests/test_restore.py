"""backup/restore.py and swap.py: staging, refusals that change nothing, the swap and its
kill drill (docs/backup.md, "Restoring")."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import io
import os
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import msgspec
import pytest
from starlette.testclient import TestClient

from qledge import backup, paths, settings
from qledge.backup import restore, swap
from qledge.backup.manifest import (
    DB_NAME,
    FORMAT_NAME,
    MANIFEST_NAME,
    Format,
    Manifest,
    Member,
    encode,
)
from qledge.db import backend, envs, migrate, tasks
from qledge.db import dependencies as deps
from qledge.ids import uuid7
from qledge.tasks.writable import TaskFields

from support import make_settings, migrate_for


def _fill(conf: settings.Settings, tag: str, *, binary: bytes = b"") -> None:
    """An appliance holding a task, an env, a declared dependency and scripts named
    after `tag`."""
    migrate_for(conf)
    paths.prepare_roots(conf)

    async def rows() -> None:
        db = backend.database(conf)
        await db.open()
        try:
            async with db.write() as tx:
                await tasks.create_task(tx, uuid7(), TaskFields(
                    name=f"task-{tag}", command="true", schedule=None), 1)
                await envs.create_env(tx, uuid7(), {"name": f"ENV_{tag}", "value": tag}, 1)
                await deps.declare(tx, "python", [f"pkg{tag}==1.0"], 1)
        finally:
            await db.close()

    asyncio.run(rows())
    (conf.scripts_path / "sub").mkdir(exist_ok=True)
    (conf.scripts_path / f"{tag}.py").write_bytes(f"print('{tag}')\n".encode())
    (conf.scripts_path / f"{tag}.py").chmod(0o750)
    (conf.scripts_path / "sub" / f"{tag}.bin").write_bytes(binary or os.urandom(5000))
    (conf.script_history_path / f"{tag}.py.1").write_bytes(b"old\n")
    (conf.logs_path / "ab").mkdir(exist_ok=True)
    (conf.logs_path / "ab" / f"{tag}.log").write_bytes(f"log of {tag}\n".encode())
    copies = conf.logs_path / "qinglong" / tag
    copies.mkdir(parents=True, exist_ok=True)
    (copies / "1.log").write_bytes(b"\x1b[32mimported\x1b[0m\n")
    (copies / "1.log").chmod(0o400)  # as the import leaves its copies


def _tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            if p.is_file() else "dir" for p in sorted(root.rglob("*"))}


def _state(conf: settings.Settings) -> tuple[object, ...]:
    """What the appliance holds, as compared by the drills: scripts, history, logs,
    names."""
    conn = sqlite3.connect(f"file:{conf.db_path}?mode=ro", uri=True)
    try:
        names = sorted(r[0] for r in conn.execute(
            "SELECT name FROM tasks WHERE name NOT LIKE 'dependencies: %'"))
        env_names = sorted(r[0] for r in conn.execute("SELECT name FROM envs"))
    finally:
        conn.close()
    logs = {k: v for k, v in _tree(conf.logs_path).items() if not k.startswith(".restore")}
    return (_tree(conf.scripts_path), _tree(conf.script_history_path), logs, names,
            env_names)


def _bytes_of(*roots: Path) -> dict[str, str]:
    """Every entry under the roots, byte for byte (the 'exactly as it was' check)."""
    out: dict[str, str] = {}
    for root in roots:
        for p in sorted(root.rglob("*")):
            st = p.lstat()
            key = str(p)
            out[key] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and \
                not p.is_symlink() else f"{st.st_mode:o}"
    return out


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    """A backup (plain tar, with logs) of an appliance 'src'."""
    src = make_settings(tmp_path / "src")
    _fill(src, "src", binary=bytes(range(256)) * 40)
    target = tmp_path / "src.tar"
    with target.open("wb") as out:
        backup.write(src, out, gzip=False, with_logs=True)
    return target


def _leftovers(conf: settings.Settings) -> list[Path]:
    """A restore's own files: none may stay once it is committed or swept."""
    return [p for p in (*conf.data_path.iterdir(), *conf.work_path.iterdir(),
                        *conf.logs_path.iterdir()) if p.name.startswith((".restore", "restore-"))]


def test_restore_into_an_empty_appliance(conf: settings.Settings, archive: Path,
                                         tmp_path: Path) -> None:
    migrate_for(conf)
    paths.prepare_roots(conf)
    with archive.open("rb") as f:
        pending = restore.stage(conf, f)
    assert pending.requeued == {"python": 1}
    assert (conf.data_path / swap.MARKER).exists()
    assert swap.apply_pending(conf) == pending
    src = make_settings(tmp_path / "src")
    assert _state(conf) == _state(src)
    assert (conf.scripts_path / "sub" / "src.bin").read_bytes() == bytes(range(256)) * 40
    assert (conf.scripts_path / "src.py").stat().st_mode & 0o777 == 0o750  # x bits kept
    assert (conf.logs_path / "ab" / "src.log").read_bytes() == b"log of src\n"
    assert (conf.logs_path / "qinglong" / "src" / "1.log").read_bytes().startswith(b"\x1b")
    assert not _leftovers(conf)  # committed: no marker, staging or previous state left
    # The dependency's install is queued in the restored database.
    conn = sqlite3.connect(conf.db_path)
    row = conn.execute("SELECT d.name, r.status, j.action FROM dependencies d JOIN runs r"
                       " ON r.id = d.last_run_id JOIN dependency_jobs j ON j.run_id = r.id"
                       ).fetchall()
    conn.close()
    assert row == [("pkgsrc", "queued", "install")]
    assert swap.apply_pending(conf) is None  # nothing more to do


def test_a_full_appliance_needs_replace(conf: settings.Settings, archive: Path) -> None:
    _fill(conf, "old")
    before = _bytes_of(conf.data_path, conf.work_path)
    with archive.open("rb") as f, pytest.raises(backup.RestoreError) as err:
        restore.stage(conf, f)
    assert err.value.code == "RESTORE_NOT_EMPTY"
    assert err.value.params["tasks"] == 1
    assert _bytes_of(conf.data_path, conf.work_path) == before
    with archive.open("rb") as f:
        restore.stage(conf, f, replace=True)
    swap.apply_pending(conf)
    assert _state(conf)[3] == ["task-src"]


def test_an_archive_without_logs_leaves_the_logs_as_they_are(
        conf: settings.Settings, tmp_path: Path) -> None:
    """Logs are optional in a backup: one without them replaces the rest and leaves the
    logs volume alone; one with them replaces its entries (the test above)."""
    src = make_settings(tmp_path / "src")
    _fill(src, "src")
    target = tmp_path / "nologs.tar"
    with target.open("wb") as out:
        backup.write(src, out, gzip=False)
    _fill(conf, "old")
    logs_before = _tree(conf.logs_path)
    (conf.logs_path / ".restore-staging").mkdir()  # a crashed restore's: never backed up
    with target.open("rb") as f:
        assert restore.stage(conf, f, replace=True).logs is False
    swap.apply_pending(conf)
    assert _state(conf)[:2] == _state(src)[:2] and _state(conf)[3] == ["task-src"]
    assert _tree(conf.logs_path) == logs_before
    assert not _leftovers(conf)
    (conf.logs_path / ".restore-staging").mkdir()
    with_logs = io.BytesIO()
    backup.write(conf, with_logs, gzip=False, with_logs=True)
    names = [m.name for m in backup.verify(io.BytesIO(with_logs.getvalue())).members]
    assert "qledge-backup/logs/ab/old.log" in names
    assert not [n for n in names if ".restore" in n]


def test_an_older_schema_is_migrated(conf: settings.Settings, tmp_path: Path) -> None:
    old = make_settings(tmp_path / "old")
    paths.prepare_roots(old)
    migrate.apply(old.db_path, migrate.bundled()[:20])
    target = tmp_path / "old.tar.gz"
    with target.open("wb") as out:
        written = backup.write(old, out)
    assert written.schema_version == 20
    paths.prepare_roots(conf)
    with target.open("rb") as f:
        pending = restore.stage(conf, f)
    assert pending.schema_version == len(migrate.bundled())
    swap.apply_pending(conf)
    conn = sqlite3.connect(conf.db_path)
    assert conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] == \
        len(migrate.bundled())
    conn.close()


# -- hostile and damaged archives: refused, the appliance exactly as it was -------------

def _members(path: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    out = []
    with tarfile.open(path) as tar:
        for info in tar:
            f = tar.extractfile(info) if info.isreg() else None
            out.append((info, f.read() if f is not None else b""))
    return out


def _pack(members: list[tuple[tarfile.TarInfo, bytes]], manifest: Manifest | None = None,
          tail: bytes = b"") -> io.BytesIO:
    """A tar of these members; with `manifest`, it replaces the archive's own."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for shared, data in members:
            info = copy.copy(shared)
            if info.name == MANIFEST_NAME and manifest is not None:
                data = encode(manifest)
            if info.isreg():
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    out.write(tail)
    out.seek(0)
    return out


def _manifest(members: list[tuple[tarfile.TarInfo, bytes]]) -> Manifest:
    data = next(d for i, d in members if i.name == MANIFEST_NAME)
    return msgspec.json.decode(data, type=Manifest)


def _special(name: str, type_: bytes, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = type_, link
    return info


def _insert(members: list[tuple[tarfile.TarInfo, bytes]], info: tarfile.TarInfo,
            data: bytes = b"", listed: bool = True) -> io.BytesIO:
    """`info` added before the manifest, listed in it (unless not `listed`)."""
    at = len(members) - 1
    manifest = _manifest(members)
    if listed:
        kind = "file" if info.isreg() else "dir" if info.isdir() else "link"
        manifest = msgspec.structs.replace(manifest, members=(*manifest.members, Member(
            name=info.name, kind=kind, size=len(data),
            sha256=hashlib.sha256(data).hexdigest() if info.isreg() else "")))
    if info.isreg():
        info.size = len(data)
    return _pack([*members[:at], (info, data), members[at]], manifest)


def _cases(archive: Path) -> dict[str, tuple[io.BytesIO, str]]:
    m = _members(archive)
    raw = archive.read_bytes()
    scripts = [i for i, (info, _) in enumerate(m) if info.name.startswith(
        "qledge-backup/scripts/") and info.isreg()]
    first = m[scripts[0]][0].name
    manifest = _manifest(m)
    flipped = [(i, bytes([d[0] ^ 1]) + d[1:] if i.name == first else d) for i, d in m]
    newer = [(i, encode(Format(format=99, qledge_version="99.0")) if i.name == FORMAT_NAME
              else d) for i, d in m]
    huge = tarfile.TarInfo("qledge-backup/scripts/huge")
    huge.size = 40 * 1024**3
    huge_stream = io.BytesIO()
    with tarfile.open(fileobj=huge_stream, mode="w", format=tarfile.GNU_FORMAT) as tar:
        tar.addfile(copy.copy(m[0][0]), io.BytesIO(m[0][1]))
        # The FORMAT member, then a header claiming 40 GiB and a few bytes: refused on
        # the header, before anything is read or written.
        huge_raw = huge_stream.getvalue() + huge.tobuf(tarfile.GNU_FORMAT) + b"x" * 4096
    not_db = [(i, b"SQLite format 3\0" + b"\xff" * 4000 if i.name == DB_NAME else d)
              for i, d in m]
    return {
        "truncated": (io.BytesIO(raw[: len(raw) * 2 // 3]), "BACKUP_DAMAGED|BACKUP_NO_MANIFEST"),
        "garbage": (io.BytesIO(os.urandom(20000)), "BACKUP_NOT_AN_ARCHIVE|BACKUP_DAMAGED"),
        "checksum": (_pack(flipped), "BACKUP_CHECKSUM"),
        "newer format": (_pack(newer), "BACKUP_FORMAT_NEWER"),
        "symlink": (_insert(m, _special("qledge-backup/scripts/l", tarfile.SYMTYPE,
                                        "/etc/passwd")), "BACKUP_MEMBER_TYPE"),
        "hardlink": (_insert(m, _special("qledge-backup/scripts/h", tarfile.LNKTYPE,
                                         DB_NAME)), "BACKUP_MEMBER_TYPE"),
        "device": (_insert(m, _special("qledge-backup/scripts/d", tarfile.CHRTYPE)),
                   "BACKUP_MEMBER_TYPE"),
        "fifo": (_insert(m, _special("qledge-backup/scripts/f", tarfile.FIFOTYPE)),
                 "BACKUP_MEMBER_TYPE"),
        "dotdot": (_insert(m, tarfile.TarInfo("qledge-backup/scripts/../../../x"), b"x"),
                   "BACKUP_MEMBER_PATH"),
        "absolute": (_insert(m, tarfile.TarInfo("/tmp/x"), b"x"), "BACKUP_MEMBER_PATH"),
        "absurd size": (io.BytesIO(huge_raw), "BACKUP_MEMBER_SIZE"),
        "duplicate": (_insert(m, tarfile.TarInfo(first), b"again", listed=False),
                      "BACKUP_MEMBER_DUPLICATE"),
        "not in the manifest": (_insert(m, tarfile.TarInfo("qledge-backup/scripts/extra"),
                                        b"x", listed=False), "BACKUP_MEMBER_UNLISTED"),
        "missing from the archive": (_pack([x for x in m if x[0].name != first], manifest),
                                     "BACKUP_MEMBER_MISSING"),
        "file under a file": (_insert(m, tarfile.TarInfo(f"{first}/under"), b"x"),
                              "BACKUP_MEMBER_PATH"),
        "not a database": (_pack(not_db, msgspec.structs.replace(manifest, members=tuple(
            msgspec.structs.replace(x, size=4016, sha256=hashlib.sha256(
                b"SQLite format 3\0" + b"\xff" * 4000).hexdigest()) if x.name == DB_NAME
            else x for x in manifest.members))), "RESTORE_DATABASE_INVALID"),
    }


CASES = ["truncated", "garbage", "checksum", "newer format", "symlink", "hardlink", "device",
         "fifo", "dotdot", "absolute", "absurd size", "duplicate", "not in the manifest",
         "missing from the archive", "file under a file", "not a database"]


@pytest.mark.parametrize("case", CASES)
def test_a_refused_archive_changes_nothing(conf: settings.Settings, archive: Path,
                                           case: str) -> None:
    _fill(conf, "old")
    source, codes = _cases(archive)[case]
    before = _bytes_of(Path(conf.state_dir))
    with pytest.raises((backup.BackupInvalid, backup.RestoreError)) as err:
        restore.stage(conf, source, replace=True)
    assert err.value.code in codes.split("|"), err.value  # type: ignore[union-attr]
    assert _bytes_of(Path(conf.state_dir)) == before


# -- the swap, killed at every step ----------------------------------------------------

SWAP_POINTS = ["restore.before_marker",
               *(f"restore.swap.{n}.{w}" for n in range(6) for w in ("aside", "placed")),
               "restore.committed"]


def _cli(conf: settings.Settings, *words: str, failpoints: str = ""
         ) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "QLEDGE_STATE_DIR": str(conf.state_dir),
           "QLEDGE_ADMIN_TOKEN": "x" * 40, "QLTEST_FAILPOINTS": failpoints}
    return subprocess.run([sys.executable, "-m", "qledge", "restore", *words], env=env,
                          capture_output=True, timeout=120, check=False)


@pytest.mark.parametrize("point", SWAP_POINTS)
def test_a_restore_killed_at_any_step_leaves_old_or_new(
        tmp_path: Path, archive: Path, point: str) -> None:
    conf = make_settings(tmp_path / "state")
    _fill(conf, "old")
    old = _state(conf)
    new = _state(make_settings(tmp_path / "src"))
    killed = _cli(conf, str(archive), "--replace", failpoints=f"{point}=exit")
    assert killed.returncode == 86, killed.stderr  # os._exit at the point: a kill -9
    if point == "restore.before_marker":
        assert _state(conf) == old
    # The next start (the worker's, or this) finishes or sweeps, and nothing is mixed.
    swap.apply_pending(conf)
    assert _state(conf) == (old if point == "restore.before_marker" else new)
    assert not _leftovers(conf)


def test_the_cli_restores_with_the_worker_stopped(tmp_path: Path, archive: Path) -> None:
    conf = make_settings(tmp_path / "state")
    _fill(conf, "old")
    refused = _cli(conf, str(archive))
    assert refused.returncode == 2 and b"RESTORE_NOT_EMPTY" in refused.stderr
    done = _cli(conf, str(archive), "--replace")
    assert done.returncode == 0, done.stderr
    assert b"dependency installs queued: python 1; logs replaced" in done.stderr
    assert _state(conf) == _state(make_settings(tmp_path / "src"))


def test_the_api_stages_and_refuses_with_codes(conf: settings.Settings, client: TestClient,
                                               archive: Path) -> None:
    with tarfile.open(archive) as tar:  # cut inside the manifest: the end is missing
        at = tar.getmember(MANIFEST_NAME).offset_data + 10
    damaged = archive.read_bytes()[:at]
    resp = client.post("/api/v1/restore?replace=1", content=damaged)
    assert resp.status_code == 422
    assert resp.json()["error"] in ("BACKUP_DAMAGED", "BACKUP_NO_MANIFEST")
    resp = client.post("/api/v1/restore", content=archive.read_bytes())
    assert resp.status_code == 202, resp.text  # the test's appliance is empty
    assert resp.json()["requeued"] == {"python": 1} and resp.json()["logs"] is True
    assert resp.json()["restarting"] is False  # no supervisor here: applied at next start
    assert swap.read_pending(conf) is not None
    again = client.post("/api/v1/restore?replace=1", content=archive.read_bytes())
    assert again.status_code == 409 and again.json()["error"] == "RESTORE_PENDING"
    assert not [p for p in conf.data_path.iterdir() if p.name.startswith(".restore-upload")]


def test_a_staged_restore_can_be_cancelled(tmp_path: Path, archive: Path) -> None:
    conf = make_settings(tmp_path / "state")
    _fill(conf, "old")
    old = _state(conf)
    with archive.open("rb") as f:
        restore.stage(conf, f, replace=True)  # as with a running worker: staged only
    done = _cli(conf, "--cancel")
    assert done.returncode == 0 and b"staged restore dropped" in done.stderr
    assert swap.apply_pending(conf) is None
    assert _state(conf) == old
    assert not _leftovers(conf)


def test_an_encrypted_archive_restores_with_its_passphrase_only(
        conf: settings.Settings, archive: Path, tmp_path: Path) -> None:
    """The readers open an archive through backup/reader.py, which decrypts: the
    passphrase missing or wrong changes nothing, the right one restores."""
    from qledge.backup import crypto

    passphrase = b"correct horse battery staple"
    sealed = tmp_path / "src.tar.enc"
    with sealed.open("wb") as out:
        writer = crypto.EncryptingWriter(out, passphrase)
        writer.write(archive.read_bytes())
        writer.finish()
    assert archive.read_bytes()[:512] not in sealed.read_bytes()
    paths.prepare_roots(conf)
    before = _bytes_of(conf.data_path, conf.work_path)
    for given, code in ((None, "BACKUP_PASSPHRASE_NEEDED"),
                        (b"not the passphrase", "BACKUP_PASSPHRASE_WRONG")):
        with sealed.open("rb") as f, pytest.raises(backup.BackupInvalid) as refused:
            restore.stage(conf, f, passphrase=given)
        assert refused.value.code == code
        assert _bytes_of(conf.data_path, conf.work_path) == before
    with archive.open("rb") as f, pytest.raises(backup.BackupInvalid) as refused:
        restore.stage(conf, f, passphrase=passphrase)
    assert refused.value.code == "BACKUP_NOT_ENCRYPTED"
    wrong = _cli(conf, str(sealed), "--passphrase-file", str(_line(tmp_path, "wrong one!")))
    assert wrong.returncode == 2 and b"BACKUP_PASSPHRASE_WRONG" in wrong.stderr
    assert _bytes_of(conf.data_path, conf.work_path) == before
    done = _cli(conf, str(sealed), "--passphrase-file",
                str(_line(tmp_path, passphrase.decode())))
    assert done.returncode == 0, done.stderr
    assert _state(conf) == _state(make_settings(tmp_path / "src"))


def _line(folder: Path, text: str) -> Path:
    path = folder / "passphrase"
    path.write_text(text + "\n")
    return path


def test_a_gzip_archive_cut_anywhere_is_refused(tmp_path: Path) -> None:
    """tarfile stops at the tar's end marker; the reader still reads gzip's trailer, so
    even the last byte missing is a damaged archive, not a complete one."""
    src = make_settings(tmp_path / "src")
    _fill(src, "src")
    whole = io.BytesIO()
    backup.write(src, whole, gzip=True)
    raw = whole.getvalue()
    assert backup.verify(io.BytesIO(raw)).counts["tasks"] >= 1
    for cut in (1, 4, 8, 100, len(raw) // 2):
        with pytest.raises(backup.BackupInvalid) as refused:
            backup.verify(io.BytesIO(raw[:-cut]))
        assert refused.value.code in ("BACKUP_DAMAGED", "BACKUP_NO_MANIFEST"), cut
    with pytest.raises(backup.BackupInvalid) as refused:
        backup.verify(io.BytesIO(raw + b"junk" * (1 << 19)))  # gzip skips zero padding
    assert refused.value.code in ("BACKUP_DAMAGED", "BACKUP_TRAILING_DATA")


def test_the_api_takes_an_encrypted_archives_passphrase_in_a_header(
        conf: settings.Settings, client: TestClient, archive: Path, tmp_path: Path) -> None:
    from urllib.parse import quote

    from qledge.backup import crypto

    passphrase = "口令 correct horse"  # UTF-8, percent-encoded in the header
    sealed = io.BytesIO()
    writer = crypto.EncryptingWriter(sealed, passphrase.encode())
    writer.write(archive.read_bytes())
    writer.finish()
    resp = client.post("/api/v1/restore", content=sealed.getvalue())
    assert resp.status_code == 422 and resp.json()["error"] == "BACKUP_PASSPHRASE_NEEDED"
    resp = client.post("/api/v1/restore", content=sealed.getvalue(),
                       headers={"Qledge-Backup-Passphrase": quote("wrong horse")})
    assert resp.status_code == 422 and resp.json()["error"] == "BACKUP_PASSPHRASE_WRONG"
    assert swap.read_pending(conf) is None
    resp = client.post("/api/v1/restore", content=sealed.getvalue(),
                       headers={"Qledge-Backup-Passphrase": quote(passphrase)})
    assert resp.status_code == 202, resp.text
    assert swap.read_pending(conf) is not None
