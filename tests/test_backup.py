"""backup/: the streamed archive (writer) and its check (verify), docs/backup.md."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from qledge import backup, paths, settings
from qledge.backup.manifest import DB_NAME, FORMAT_NAME, MANIFEST_NAME, Format, encode
from qledge.db import migrate
from qledge.db.interface import Database

from support import migrate_for


def _appliance(conf: settings.Settings) -> dict[str, bytes]:
    migrate_for(conf)
    paths.prepare_roots(conf)
    files = {"a.py": b"print('a')\n", "sub/b.js": os.urandom(70_000), "sub/深/c.sh": b"echo c\n"}
    for rel, data in files.items():
        p = conf.scripts_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    (conf.scripts_path / "link").symlink_to("/etc/passwd")
    os.mkfifo(conf.scripts_path / "fifo")
    (conf.script_history_path / "a.py.1").write_bytes(b"old\n")
    return files


def _write(conf: settings.Settings, target: Path, **kw: bool) -> backup.Manifest:
    with target.open("wb") as out:
        return backup.write(conf, out, **kw)


def test_archive_holds_the_snapshot_scripts_and_history_and_verifies(
        conf: settings.Settings, tmp_path: Path) -> None:
    files = _appliance(conf)
    target = tmp_path / "b.tar.gz"
    written = _write(conf, target)
    with target.open("rb") as f:
        read = backup.verify(f)
    assert read == written
    assert read.schema_version == len(migrate.bundled())
    assert read.counts["tasks"] == 0 and set(read.counts) >= {
        "tasks", "envs", "subscriptions", "channels", "apps", "dependencies"}
    by_name = {m.name: m for m in read.members}
    for rel, data in files.items():
        m = by_name[f"qledge-backup/scripts/{rel}"]
        assert (m.size, m.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    assert "qledge-backup/scripts-history/a.py.1" in by_name
    assert "qledge-backup/scripts/link" not in by_name  # links and fifos are left out
    assert "qledge-backup/scripts/fifo" not in by_name
    assert DB_NAME in by_name
    assert not [p for p in conf.data_path.iterdir() if p.name.startswith(".backup-")]


def test_estimate_counts_the_parts(conf: settings.Settings) -> None:
    files = _appliance(conf)
    sizes = backup.estimate(conf)
    assert sizes["scripts"] == sum(len(d) for d in files.values())
    assert sizes["scripts-history"] == 4 and sizes["database"] > 0
    assert "logs" not in sizes and "logs" in backup.estimate(conf, with_logs=True)


def test_a_changed_byte_is_refused(conf: settings.Settings, tmp_path: Path) -> None:
    _appliance(conf)
    target = tmp_path / "b.tar"
    _write(conf, target, gzip=False)
    raw = bytearray(target.read_bytes())
    at = raw.index(b"print('a')")
    raw[at] ^= 0x01
    with pytest.raises(backup.BackupInvalid) as err:
        backup.verify(io.BytesIO(bytes(raw)))
    assert err.value.code == "BACKUP_CHECKSUM"
    assert err.value.params == {"member": "qledge-backup/scripts/a.py"}


def test_a_cut_archive_is_refused(conf: settings.Settings, tmp_path: Path) -> None:
    _appliance(conf)
    target = tmp_path / "b.tar.gz"
    _write(conf, target)
    raw = target.read_bytes()
    with pytest.raises(backup.BackupInvalid) as err:
        backup.verify(io.BytesIO(raw[: len(raw) // 2]))
    assert err.value.code in ("BACKUP_DAMAGED", "BACKUP_NO_MANIFEST")


def _hostile(*members: tarfile.TarInfo, fmt: int = 1) -> io.BytesIO:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        data = encode(Format(format=fmt, qledge_version="9.9"))
        info = tarfile.TarInfo(FORMAT_NAME)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for m in members:
            tar.addfile(m, io.BytesIO(b"x" * m.size) if m.isreg() else None)
    out.seek(0)
    return out


def _member(name: str, type_: bytes = tarfile.REGTYPE, size: int = 1,
            link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = type_, size if type_ == tarfile.REGTYPE else 0, link
    return info


@pytest.mark.parametrize(("members", "code"), [
    ([_member("qledge-backup/scripts/../../etc/x")], "BACKUP_MEMBER_PATH"),
    ([_member("/etc/passwd")], "BACKUP_MEMBER_PATH"),
    ([_member("qledge-backup/scripts/./a")], "BACKUP_MEMBER_PATH"),
    ([_member("qledge-backup/elsewhere/a")], "BACKUP_MEMBER_UNKNOWN"),
    ([_member("qledge-backup/scripts/l", tarfile.SYMTYPE, link="/etc/passwd")],
     "BACKUP_MEMBER_TYPE"),
    ([_member("qledge-backup/scripts/h", tarfile.LNKTYPE, link="qledge-backup/db.sqlite3")],
     "BACKUP_MEMBER_TYPE"),
    ([_member("qledge-backup/scripts/dev", tarfile.CHRTYPE)], "BACKUP_MEMBER_TYPE"),
    ([_member("qledge-backup/scripts/a"), _member("qledge-backup/scripts/a")],
     "BACKUP_MEMBER_DUPLICATE"),
    ([_member("qledge-backup/scripts/a")], "BACKUP_NO_MANIFEST"),
])
def test_hostile_archives_are_refused(members: list[tarfile.TarInfo], code: str) -> None:
    with pytest.raises(backup.BackupInvalid) as err:
        backup.verify(_hostile(*members))
    assert err.value.code == code


def test_a_newer_format_is_refused_before_reading_on() -> None:
    with pytest.raises(backup.BackupInvalid) as err:
        backup.verify(_hostile(_member("qledge-backup/scripts/a"), fmt=2))
    assert err.value.code == "BACKUP_FORMAT_NEWER"
    assert err.value.params == {"format": 2, "version": "9.9"}


def test_not_a_backup_is_refused() -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        tar.addfile(_member(MANIFEST_NAME, size=2), io.BytesIO(b"{}"))
    out.seek(0)
    with pytest.raises(backup.BackupInvalid) as err:
        backup.verify(out)
    assert err.value.code == "BACKUP_NO_FORMAT"
    with pytest.raises(backup.BackupInvalid) as err:
        backup.verify(io.BytesIO(b"\x00garbage" * 100))
    assert err.value.code in ("BACKUP_NOT_AN_ARCHIVE", "BACKUP_DAMAGED", "BACKUP_NO_FORMAT")


def _cli(conf: settings.Settings, *words: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "QLEDGE_STATE_DIR": str(conf.state_dir),
           "QLEDGE_ADMIN_TOKEN": "x" * 40}
    return subprocess.run([sys.executable, "-m", "qledge", "backup", *words], env=env,
                          capture_output=True, timeout=60, check=False)


def test_cli_writes_under_a_temporary_name_and_verifies(
        conf: settings.Settings, tmp_path: Path) -> None:
    _appliance(conf)
    target = tmp_path / "out" / "b.tar.gz"
    target.parent.mkdir()
    done = _cli(conf, "-o", str(target))
    assert done.returncode == 0, done.stderr
    assert [p.name for p in target.parent.iterdir()] == ["b.tar.gz"]
    checked = _cli(conf, "verify", str(target))
    assert checked.returncode == 0, checked.stderr
    assert b"all checksums match" in checked.stdout
    estimate = _cli(conf, "--estimate")
    assert b"scripts: " in estimate.stdout and b"total" in estimate.stdout
    target.write_bytes(target.read_bytes()[:-100])
    bad = _cli(conf, "verify", str(target))
    assert bad.returncode == 2 and b"BACKUP_" in bad.stderr


async def test_snapshot_is_consistent_while_the_writer_holds_a_transaction(
        conf: settings.Settings, db: Database, tmp_path: Path) -> None:
    _appliance(conf)
    async with db.write() as tx:
        await tx.execute("INSERT INTO storage_settings (name, value) VALUES ('kept', '1')")
    target = tmp_path / "b.tar"
    async with db.write() as tx:  # open, not committed, while the backup is taken
        await tx.execute("INSERT INTO storage_settings (name, value) VALUES ('open', '1')")
        await asyncio.to_thread(_write, conf, target, gzip=False)
    with tarfile.open(target) as tar:
        member = tar.extractfile(DB_NAME)
        assert member is not None
        (tmp_path / "snap.sqlite3").write_bytes(member.read())
    conn = sqlite3.connect(tmp_path / "snap.sqlite3")
    names = {r[0] for r in conn.execute("SELECT name FROM storage_settings")}
    conn.close()
    assert "kept" in names and "open" not in names


def test_api_streams_an_archive_that_verifies(conf: settings.Settings, client: TestClient,
                                              tmp_path: Path) -> None:
    files = _appliance(conf)
    sizes = client.get("/api/v1/backup/estimate").json()
    on_disk = sum(p.stat().st_size for p in conf.scripts_path.rglob("*")
                  if p.is_file() and not p.is_symlink())  # with the shipped notify files
    assert sizes["parts"]["scripts"] == on_disk
    assert sizes["total"] == sum(sizes["parts"].values())
    target = tmp_path / "dl.tar.gz"
    with client.stream("GET", "/api/v1/backup") as resp:
        assert resp.status_code == 200
        assert "content-length" not in resp.headers  # streamed, chunked
        assert resp.headers["content-disposition"].startswith("attachment;")
        with target.open("wb") as out:
            for chunk in resp.iter_bytes():
                out.write(chunk)
    with target.open("rb") as f:
        manifest = backup.verify(f)
    assert f"qledge-backup/scripts/{next(iter(files))}" in {m.name for m in manifest.members}
