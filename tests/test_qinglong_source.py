"""Reading QingLong's data without writing to it, and refusing what cannot be read."""

from __future__ import annotations

import io
import shutil
import sqlite3
import tarfile
from pathlib import Path

import pytest

from qledge.importer import source as qinglong_source
from qledge.importer.source import SourceError

FIXTURE = Path(__file__).parent / "fixtures" / "qinglong" / "2.21.0-data.tgz"


@pytest.fixture
def ql(tmp_path: Path) -> Path:
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path / "ql", filter="data")
    return tmp_path / "ql" / "data"


def test_reads_every_kind_from_the_real_fixture(ql: Path) -> None:
    src = qinglong_source.read(ql, with_logs=1)
    assert [c.name for c in src.crons] == ["Hello Python", "Shell backup", "Greet JS",
                                           "Util (off)", "Cleanup at boot",
                                           "Legacy repo pull", "Example sign"]
    js = src.crons[2]
    assert js.extra_schedules == ["0 12 * * *", "15 30 18 * * 6"]
    assert (src.crons[0].task_before, src.crons[0].task_after) == ("echo before-hello",
                                                                   "echo after-hello")
    assert [c.allow_multiple_instances for c in src.crons[:2]] == [0, 1]
    assert src.crons[3].disabled and src.crons[4].work_dir == "tools"
    assert src.crons[6].sub_id == 1
    assert [(e.name, e.enabled) for e in src.envs] == [
        ("JD_COOKIE", True), ("JD_COOKIE", True), ("GREETING", True), ("OLD_TOKEN", False)]
    private = src.subscriptions[1]
    assert (private.pull_type, private.username, private.password) == (
        "user-pwd", "me", "fixture-repo-password")
    assert private.interval == {"type": "hours", "value": 12}
    assert [(d.name, d.type) for d in src.dependencies] == [
        ("axios", 0), ("requests==2.31.0", 1), ("jq", 2)]
    assert src.notification is not None and src.notification["type"] == "telegramBot"
    assert src.config is not None and src.config.values["TG_USER_ID"] == "987654321"
    assert "MY_SETTING" in src.config.exported and "RandomDelay" not in src.config.exported
    assert set(src.config.hooks) == {"task_before.sh"}  # the others are QingLong's samples
    assert src.scripts is not None
    assert {f.path for f in src.scripts.files} >= {"hello.py", "tools/util.py"}
    assert {(p, w.split(":")[0]) for p, w in src.scripts.skipped} == {
        ("notify.py", "QingLong's notification helper"),
        ("sendNotify.js", "QingLong's notification helper")}
    assert {g.folder for g in src.logs} == {"hello", "backup", "tools_cleanup"}


def test_config_sh_values_are_read_without_running_them(tmp_path: Path) -> None:
    (tmp_path / "config.sh").write_text(
        "export A=\"one two\"  # comment\nB='$HOME'\nexport C=$HOME/x\nD=plain # c\n"
        "export E=\"`id`\"\nA=\"again\"\n")
    config = qinglong_source.read_config(tmp_path)
    assert config is not None
    assert config.values == {"A": "again", "B": "$HOME", "C": "$HOME/x", "D": "plain",
                             "E": "`id`"}
    assert config.computed == ["C", "E"] and config.exported == ["A", "C", "E"]


def test_scripts_symlinks_and_installed_folders_are_not_followed(ql: Path,
                                                                 tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    (ql / "scripts" / "link.py").symlink_to(outside)
    (ql / "scripts" / "linkdir").symlink_to(tmp_path)
    (ql / "scripts" / "node_modules" / "x").mkdir(parents=True)
    (ql / "scripts" / "node_modules" / "x" / "index.js").write_text("1")
    src = qinglong_source.read(ql)
    assert src.scripts is not None
    skipped = dict(src.scripts.skipped)
    assert skipped["link.py"] == "symlink (not followed)"
    assert skipped["linkdir"] == "symlink (not followed)"
    assert skipped["node_modules/"].startswith("folder not copied")
    assert not any(f.path.startswith(("link", "node_modules")) for f in src.scripts.files)


@pytest.mark.parametrize("damage", ["junk", "truncated", "missing"])
def test_a_damaged_or_missing_database_is_refused_clearly(ql: Path, damage: str) -> None:
    db = ql / "db" / "database.sqlite"
    if damage == "junk":
        db.write_bytes(b"not a database" * 100)
        why = "is not a readable SQLite database"
    elif damage == "truncated":
        data = db.read_bytes()
        db.write_bytes(data[:4096 * 3])  # the header says more pages than there are
        why = "database"
    else:
        db.unlink()
        why = "db/database.sqlite is missing"
    with pytest.raises(SourceError, match=why):
        qinglong_source.read(ql)


def test_a_live_write_ahead_log_is_refused(ql: Path) -> None:
    (ql / "db" / "database.sqlite-wal").write_bytes(b"\0" * 32)
    with pytest.raises(SourceError, match=r"QingLong is running or did not stop cleanly"):
        qinglong_source.read(ql)


def test_older_layouts_name_the_version_needed(tmp_path: Path, ql: Path) -> None:
    nedb = tmp_path / "nedb"
    (nedb / "db").mkdir(parents=True)
    (nedb / "db" / "crontab.db").write_text("{}\n")
    with pytest.raises(SourceError, match=r"NeDB files \(crontab.db\).*2\.12 or later"):
        qinglong_source.read(nedb)

    old_root = tmp_path / "ql-2.11"  # /ql of 2.11: config/, db/, shell/ side by side
    shutil.copytree(ql, old_root)
    (old_root / "shell").mkdir()
    with pytest.raises(SourceError, match=r"before 2\.12.*data/ folder"):
        qinglong_source.read(old_root)

    conn = sqlite3.connect(ql / "db" / "database.sqlite")
    conn.execute("UPDATE Crontabs SET command = 'task /ql/scripts/hello.py' WHERE id = 1")
    conn.commit()
    conn.close()
    with pytest.raises(SourceError, match=r"/ql/scripts/.*2\.12 or later"):
        qinglong_source.read(ql)

    new_root = tmp_path / "ql-root"  # /ql of 2.12+: its data/ is found
    (new_root / "shell").mkdir(parents=True)
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(new_root, filter="data")
    assert qinglong_source.read(new_root).root == str(new_root / "data")


def _tgz(members: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return out.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    return info


def test_an_archive_cannot_escape_or_plant_links(tmp_path: Path) -> None:
    archive = tmp_path / "evil.tgz"
    archive.write_bytes(_tgz([
        (_member("data/db/ok.txt"), b"fine"),
        (_member("../escape.txt"), b"x"),
        (_member("/abs.txt"), b"x"),
        (_member("data/../../up.txt"), b"x"),
        (_member("data/link", tarfile.SYMTYPE, "/etc/passwd"), b""),
        (_member("data/hard", tarfile.LNKTYPE, "data/db/ok.txt"), b""),
        (_member("data/fifo", tarfile.FIFOTYPE), b""),
    ]))
    into = tmp_path / "into"
    into.mkdir()
    skipped = qinglong_source.unpack(archive, into)
    assert sorted(str(p.relative_to(into)) for p in into.rglob("*")) == [
        "data", "data/db", "data/db/ok.txt"]
    assert len(skipped) == 6
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "up.txt").exists()
    assert (into / "data" / "db" / "ok.txt").stat().st_mode & 0o777 == 0o600


def test_an_unreadable_archive_is_a_clear_error(tmp_path: Path) -> None:
    archive = tmp_path / "cut.tgz"
    archive.write_bytes(FIXTURE.read_bytes()[:5000])
    into = tmp_path / "into"
    into.mkdir()
    with pytest.raises(SourceError, match=r"not a readable \.tgz archive"):
        qinglong_source.unpack(archive, into)


def test_a_scripts_folder_that_is_a_link_is_named_as_such(ql: Path, tmp_path: Path) -> None:
    # Finding 15 of issue 35: the walk refuses to follow links, and said only
    # "[Errno 20] Not a directory".
    elsewhere = tmp_path / "elsewhere"
    (ql / "scripts").rename(elsewhere)
    (ql / "scripts").symlink_to(elsewhere)
    with pytest.raises(SourceError, match=r"scripts is a symbolic link \(to .*elsewhere\):"
                                          r" the import does not follow links") as caught:
        qinglong_source.read(ql)
    assert "Errno" not in str(caught.value)
    (ql / "scripts").unlink()
    (ql / "scripts").write_text("not a folder")
    with pytest.raises(SourceError, match=r"scripts is not a folder"):
        qinglong_source.read(ql)
