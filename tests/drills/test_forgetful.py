"""The power-cut rig itself (tests/drills/_forgetful.py): what a cut must drop and keep.

A rig that dropped nothing would make every power-cut drill pass vacuously, so
each rule of the model is checked here against the real FUSE mount: unsynced
data and unsynced directory operations vanish at a cut, synced ones survive.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from ._forgetful import ForgetfulMount, available
from support import unavailable

pytestmark = pytest.mark.drill


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[ForgetfulMount]:
    why = available()
    if why:
        unavailable(f"the power-cut rig needs FUSE: {why}")
    m = ForgetfulMount(tmp_path / "backing", tmp_path / "mnt", watch="d/*.json")
    m.mount()
    try:
        yield m
    finally:
        m.unmount()


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write(path: Path, data: bytes, *, sync: bool, mode: str = "wb") -> None:
    with open(path, mode) as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())


def reboot(rig: ForgetfulMount) -> Path:
    rig.cut()
    rig.remount()
    return rig.mountpoint


def durable_dir(rig: ForgetfulMount, name: str = "d") -> Path:
    d = rig.mountpoint / name
    d.mkdir()
    fsync_dir(rig.mountpoint)
    return d


def test_file_data_is_durable_only_up_to_its_last_fsync(rig: ForgetfulMount) -> None:
    d = durable_dir(rig)
    write(d / "f", b"A" * 5000, sync=True)
    fsync_dir(d)
    write(d / "f", b"B" * 3000, sync=False, mode="ab")            # appended, not synced
    with open(d / "f", "r+b") as f:                               # overwritten, not synced
        f.seek(100)
        f.write(b"C" * 10)
    write(d / "g", b"never synced", sync=False)
    assert (d / "f").stat().st_size == 8000
    mnt = reboot(rig)
    assert (mnt / "d" / "f").read_bytes() == b"A" * 5000
    assert not (mnt / "d" / "g").exists()                          # its name was not synced either


def test_truncation_without_fsync_is_undone(rig: ForgetfulMount) -> None:
    d = durable_dir(rig)
    write(d / "f", bytes(range(256)) * 40, sync=True)
    fsync_dir(d)
    os.truncate(d / "f", 10)
    mnt = reboot(rig)
    assert (mnt / "d" / "f").read_bytes() == bytes(range(256)) * 40


def test_fsync_of_a_file_does_not_make_its_name_durable(rig: ForgetfulMount) -> None:
    d = durable_dir(rig)
    write(d / "synced-data", b"data", sync=True)
    write(d / "named", b"", sync=False)
    fsync_dir(d)
    write(d / "named", b"late data", sync=False)
    mnt = reboot(rig)
    assert (mnt / "d" / "synced-data").read_bytes() == b"data"     # created before the dir fsync
    assert (mnt / "d" / "named").read_bytes() == b""              # name durable, data not


def test_a_new_file_vanishes_without_a_directory_fsync(rig: ForgetfulMount) -> None:
    d = durable_dir(rig)
    write(d / "f", b"data", sync=True)
    mnt = reboot(rig)
    assert os.listdir(mnt / "d") == []


def test_a_new_directory_and_all_it_holds_vanish_without_the_parent_fsync(
        rig: ForgetfulMount) -> None:
    sub = rig.mountpoint / "sub"
    sub.mkdir()
    write(sub / "f", b"data", sync=True)
    fsync_dir(sub)
    mnt = reboot(rig)
    assert os.listdir(mnt) == []


def test_unlink_is_undone_without_a_directory_fsync_and_kept_with_one(
        rig: ForgetfulMount) -> None:
    d = durable_dir(rig)
    write(d / "kept", b"K" * 9000, sync=True)
    write(d / "gone", b"G", sync=True)
    fsync_dir(d)
    (d / "kept").unlink()
    (d / "gone").unlink()
    fsync_dir(d)
    write(d / "other", b"x", sync=True)
    fsync_dir(d)
    (d / "other").unlink()                                        # forgotten
    mnt = reboot(rig)
    assert sorted(os.listdir(mnt / "d")) == ["other"]
    assert (mnt / "d" / "other").read_bytes() == b"x"


def test_rename_needs_both_directories_synced(rig: ForgetfulMount) -> None:
    a, b = durable_dir(rig, "a"), durable_dir(rig, "b")
    write(a / "f", b"F", sync=True)
    write(b / "target", b"old target", sync=True)
    fsync_dir(a)
    fsync_dir(b)
    os.rename(a / "f", b / "target")                              # replaces, not synced
    assert (b / "target").read_bytes() == b"F"
    mnt = reboot(rig)
    assert (mnt / "a" / "f").read_bytes() == b"F"
    assert (mnt / "b" / "target").read_bytes() == b"old target"

    os.rename(mnt / "a" / "f", mnt / "b" / "target")
    fsync_dir(mnt / "a")
    fsync_dir(mnt / "b")
    mnt = reboot(rig)
    assert os.listdir(mnt / "a") == []
    assert (mnt / "b" / "target").read_bytes() == b"F"


def test_the_receipt_protocol_survives_only_with_its_directory_fsync(
        rig: ForgetfulMount) -> None:
    """temp + fsync, link to the final name, unlink the temp, fsync the directory."""
    d = durable_dir(rig)

    def publish(name: str, dir_fsync: bool) -> None:
        tmp = d / f".{name}.tmp"
        write(tmp, b'{"exitCode":3}', sync=True)
        os.link(tmp, d / name)
        tmp.unlink()
        if dir_fsync:
            fsync_dir(d)

    publish("durable.json", dir_fsync=True)
    publish("forgotten.json", dir_fsync=False)
    assert rig.status()["durable_ever"] == ["d/durable.json"]
    mnt = reboot(rig)
    assert os.listdir(mnt / "d") == ["durable.json"]
    assert (mnt / "d" / "durable.json").read_bytes() == b'{"exitCode":3}'
    assert (mnt / "d" / "durable.json").stat().st_nlink == 1


def test_an_armed_cut_happens_inside_the_operation(rig: ForgetfulMount) -> None:
    d = durable_dir(rig)
    write(d / "a.json", b"1", sync=True)
    write(d / "b.json", b"2", sync=True)
    fsync_dir(d)
    rig.command("arm", op="unlink", glob="d/*.json", skip=1)
    (d / "a.json").unlink()                                       # skipped
    assert not rig.status()["cut"]
    (d / "b.json").unlink()                                       # the caller sees success
    st = rig.status()
    assert st["cut"] and st["fired"] == "d/b.json"
    with pytest.raises(OSError) as err:
        os.listdir(d)
    assert err.value.errno == 5                                   # EIO: the machine is dead
    rig.remount()
    assert sorted(os.listdir(rig.mountpoint / "d")) == ["a.json", "b.json"]


def test_settle_and_sync_make_pending_state_durable(rig: ForgetfulMount) -> None:
    d = durable_dir(rig)
    write(d / "f", b"F", sync=True)
    write(d / "g", b"G", sync=False)
    rig.command("settle", path="d")                               # names only
    mnt = reboot(rig)
    assert sorted(os.listdir(mnt / "d")) == ["f", "g"]
    assert (mnt / "d" / "g").read_bytes() == b""
    write(mnt / "d" / "g", b"G", sync=False)
    rig.command("sync")
    mnt = reboot(rig)
    assert (mnt / "d" / "g").read_bytes() == b"G"


def test_sqlite_wal_keeps_durable_commits_and_loses_the_rest(rig: ForgetfulMount) -> None:
    db = durable_dir(rig) / "x.db"
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("CREATE TABLE t (v)")
    fsync_dir(db.parent)                                          # the -wal file's name
    con.execute("INSERT INTO t VALUES ('durable')")
    con.execute("PRAGMA synchronous=NORMAL")
    con.execute("INSERT INTO t VALUES ('deferred')")
    assert con.execute("SELECT count(*) FROM t").fetchone() == (2,)
    dropped = rig.cut()
    con.close()
    assert dropped["held_bytes_dropped"] > 0
    rig.remount()
    con = sqlite3.connect(rig.mountpoint / "d" / "x.db", isolation_level=None)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert con.execute("SELECT v FROM t").fetchall() == [("durable",)]
    finally:
        con.close()


def test_statfs_is_passed_through_or_absent(tmp_path: Path, rig: ForgetfulMount) -> None:
    st = os.statvfs(rig.mountpoint)
    assert st.f_blocks > 0 and st.f_bavail > 0
    bare = ForgetfulMount(tmp_path / "b2", tmp_path / "m2", statfs=False)
    bare.mount()
    try:
        st = os.statvfs(bare.mountpoint)
        assert (st.f_blocks, st.f_bavail) == (0, 0)
    finally:
        bare.unmount()
