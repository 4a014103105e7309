"""Power-cut and kill -9 drills of a backup into a directory (backup/schedule.py,
docs/backup.md "Scheduled backups").

The backup directory is the rig of `_forgetful.py` (what was not fsynced — file data,
and names whose directory was not fsynced — is gone after a cut), or a plain
directory for kill -9. `qledge backup --to-dir DIR --keep 2` runs as its own process,
as an operator or the worker would run it, and is cut or killed:

* at a chosen filesystem operation on the rig (the partial's create, its N-th write,
  its fsync, the rename, rotation's unlink), right after it took effect;
* with SIGKILL once its partial file holds a random number of bytes;
* at each of its named crash points (QLTEST_FAILPOINTS=backup.dir.*=exit).

Then, on what the disk kept: every file with a final name is a complete archive
that `qledge backup verify` accepts, the previous archives are all there unless a
complete new one replaced the oldest, and the next backup cleans up what the cut
one left and rotates back to 2.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from qledge import paths, settings
from qledge.backup import schedule

from ._forgetful import ForgetfulMount, available
from support import make_settings, migrate_for, unavailable

pytestmark = pytest.mark.drill

KEEP = 2


def _env(conf: settings.Settings, **extra: str) -> dict[str, str]:
    return {**os.environ, "QLEDGE_STATE_DIR": str(conf.state_dir),
            "QLEDGE_ADMIN_TOKEN": "x" * 40, **extra}


def _backup(conf: settings.Settings, directory: Path, **extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "qledge", "backup", "--to-dir", str(directory),
         "--keep", str(KEEP)], env=_env(conf, **extra), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)


def _verify(conf: settings.Settings, archive: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "qledge", "backup", "verify", str(archive)],
                          env=_env(conf), capture_output=True, timeout=120, check=False)


def _finals(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if schedule.FINAL.fullmatch(p.name))


@pytest.fixture
def conf(tmp_path: Path) -> settings.Settings:
    conf = make_settings(tmp_path / "state")
    migrate_for(conf)
    paths.prepare_roots(conf)
    rng = random.Random(39)
    for i in range(24):  # ~3 MB that gzip cannot shrink: many writes to cut between
        (conf.scripts_path / f"s{i}.bin").write_bytes(rng.randbytes(128 * 1024))
    return conf


def _two_archives(conf: settings.Settings, directory: Path) -> list[str]:
    for _ in range(KEEP):
        p = _backup(conf, directory)
        assert p.wait(120) == 0, p.stderr.read() if p.stderr else ""
    finals = _finals(directory)
    assert len(finals) == KEEP
    return finals


def _check_after(conf: settings.Settings, directory: Path, before: list[str]) -> str:
    """Previous archives kept, or a complete new one in place of the oldest; every final
    name verifies. Returns what happened, for the drill's message."""
    finals = _finals(directory)
    for name in finals:
        checked = _verify(conf, directory / name)
        assert checked.returncode == 0, f"{name} has a final name but: {checked.stderr!r}"
    new = [n for n in finals if n not in before]
    if not new:
        assert set(before) <= set(finals), f"previous archives lost: {before} -> {finals}"
        return "previous archives kept"
    assert len(new) == 1, finals
    # Rotation deletes only after the new one is complete (verified just above).
    assert set(finals) - set(new) <= set(before) and len(finals) >= KEEP, finals
    return "a complete new archive"


def _next_backup_recovers(conf: settings.Settings, directory: Path) -> None:
    p = _backup(conf, directory)
    _out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    finals = _finals(directory)
    assert len(finals) == KEEP, finals
    assert not [n for n in os.listdir(directory) if schedule.PARTIAL.fullmatch(n)]
    for name in finals:
        assert _verify(conf, directory / name).returncode == 0


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[ForgetfulMount]:
    why = available()
    if why:
        unavailable(f"the power-cut rig needs FUSE: {why}")
    m = ForgetfulMount(tmp_path / "stick", tmp_path / "mnt")
    m.mount()
    try:
        yield m
    finally:
        m.unmount()


CUTS = [("create", "*.partial", 0), ("write", "*.partial", 3), ("write", "*.partial", 40),
        ("fsync", "*.partial", 0), ("rename", "qledge-backup-*", 0), ("fsyncdir", "*", 0),
        ("unlink", "qledge-backup-*", 0)]


@pytest.mark.parametrize(("op", "glob", "skip"), CUTS)
def test_a_power_cut_leaves_the_previous_archives_or_a_complete_new_one(
        conf: settings.Settings, rig: ForgetfulMount, op: str, glob: str, skip: int) -> None:
    before = _two_archives(conf, rig.mountpoint)
    rig.command("sync")
    rig.command("arm", op=op, glob=glob, skip=skip)
    p = _backup(conf, rig.mountpoint)
    deadline = time.monotonic() + 120
    while not rig.status()["cut"]:
        assert p.poll() is None or time.monotonic() < deadline, "the armed cut never came"
        if p.poll() is not None:
            break
        time.sleep(0.02)
    assert rig.status()["cut"], (op, glob, skip, p.stderr.read() if p.stderr else "")
    p.kill()  # the machine is dead; its processes with it
    p.wait(30)
    rig.remount()
    outcome = _check_after(conf, rig.mountpoint, before)
    if op == "unlink":
        assert outcome == "a complete new archive"
    _next_backup_recovers(conf, rig.mountpoint)


def test_negative_control_without_the_fsync_a_cut_leaves_a_broken_final_name(
        conf: settings.Settings, rig: ForgetfulMount) -> None:
    """The same checks catch a writer that renames before its data is on the disk."""
    before = _two_archives(conf, rig.mountpoint)
    rig.command("sync")
    rig.command("arm", op="fsyncdir", glob="*", skip=0)
    p = _backup(conf, rig.mountpoint, QLTEST_FAILPOINTS=f"{schedule.FP_NO_FSYNC}=on")
    deadline = time.monotonic() + 120
    while not rig.status()["cut"] and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert rig.status()["cut"], p.stderr.read() if p.stderr else ""
    p.kill()
    p.wait(30)
    rig.remount()
    with pytest.raises(AssertionError, match="has a final name but"):
        _check_after(conf, rig.mountpoint, before)


@pytest.mark.parametrize("seed", range(4))
def test_kill_9_at_a_random_byte_count_never_leaves_a_half_archive_named(
        conf: settings.Settings, tmp_path: Path, seed: int) -> None:
    d = tmp_path / "usb"
    d.mkdir()
    before = _two_archives(conf, d)
    size = (d / before[-1]).stat().st_size
    at = random.Random(seed).randrange(1, size)
    p = _backup(conf, d)
    killed = False
    deadline = time.monotonic() + 120
    while p.poll() is None and time.monotonic() < deadline:
        partial = [e for e in os.scandir(d) if schedule.PARTIAL.fullmatch(e.name)]
        if partial and partial[0].stat().st_size >= at:
            p.send_signal(signal.SIGKILL)
            killed = True
            break
    p.wait(30)
    assert killed or p.returncode == 0
    outcome = _check_after(conf, d, before)
    if killed:
        assert outcome == "previous archives kept"
    _next_backup_recovers(conf, d)


@pytest.mark.parametrize("point", [schedule.FP_WRITTEN, schedule.FP_SYNCED,
                                   schedule.FP_RENAMED, schedule.FP_ROTATING])
def test_a_crash_at_each_step(conf: settings.Settings, tmp_path: Path, point: str) -> None:
    d = tmp_path / "nas"
    d.mkdir()
    before = _two_archives(conf, d)
    p = _backup(conf, d, QLTEST_FAILPOINTS=f"{point}=exit")
    assert p.wait(120) == 86  # os._exit at the point, like a kill -9 for the disk
    outcome = _check_after(conf, d, before)
    assert outcome == ("previous archives kept" if point in (
        schedule.FP_WRITTEN, schedule.FP_SYNCED) else "a complete new archive")
    _next_backup_recovers(conf, d)
