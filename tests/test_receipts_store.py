from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from qledge.fs import dirfd
from qledge.fs.dirfd import MAX_SUFFIX, UnsafeDirectory
from qledge.ids import uuid7
from qledge.receipts.codec import MAX_RECEIPT_BYTES, ReceiptReason, Rejected, decode
from qledge.receipts.store import ReceiptStore, UnsupportedVolume, probe

from support import unavailable

NOT_REGULAR = Rejected(ReceiptReason.RECEIPT_NOT_REGULAR)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "receipts"
    path.mkdir()
    return path


@pytest.fixture
def store(root: Path) -> ReceiptStore:
    return ReceiptStore(root)


def put(store: ReceiptStore, attempt_id: str, data: bytes = b"evidence") -> Path:
    path = store.ensure_shard(attempt_id) / f"{attempt_id}.json"
    path.write_bytes(data)
    return path


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


# -- paths ---------------------------------------------------------------------


def test_relative_path_uses_the_random_tail(store: ReceiptStore) -> None:
    attempt_id = uuid7()
    assert store.relative_path(attempt_id) == f"{attempt_id[-2:]}/{attempt_id}.json"
    assert store.ensure_shard(attempt_id) == store.root / attempt_id[-2:]


def test_shards_are_uniform_within_one_millisecond(store: ReceiptStore) -> None:
    now = int(time.time() * 1000)
    shards = {store.relative_path(uuid7(now_ms=now)).split("/")[0] for _ in range(10_000)}
    assert len(shards) >= 200


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "../etc/passwd",
        "0190F3A2-7C41-7F00-A1B2-C3D4E5F60718",
        "0190f3a2-7c41-7f00-a1b2-c3d4e5f60718\n",
    ],
)
def test_non_canonical_ids_are_refused(store: ReceiptStore, bad: str) -> None:
    for call in (store.relative_path, store.ensure_shard, store.read):
        with pytest.raises(ValueError):
            call(bad)


def test_root_is_canonicalised(tmp_path: Path, root: Path) -> None:
    (tmp_path / "link").symlink_to(root)
    assert ReceiptStore(tmp_path / "link").root == root.resolve()
    with pytest.raises(NotADirectoryError):
        ReceiptStore(tmp_path / "missing")


def test_ensure_shard_is_private_and_idempotent(store: ReceiptStore) -> None:
    attempt_id = uuid7()
    old = os.umask(0o022)
    try:
        shard = store.ensure_shard(attempt_id)
    finally:
        os.umask(old)
    assert shard.is_dir() and not shard.is_symlink() and mode(shard) == 0o700
    assert store.ensure_shard(attempt_id) == shard


def test_ensure_shard_refuses_a_symlink(store: ReceiptStore, tmp_path: Path) -> None:
    attempt_id = uuid7()
    outside = tmp_path / "outside"
    outside.mkdir()
    (store.root / attempt_id[-2:]).symlink_to(outside)
    with pytest.raises(UnsafeDirectory):
        store.ensure_shard(attempt_id)
    with pytest.raises(UnsafeDirectory):
        store.read(attempt_id)


# -- read / remove ---------------------------------------------------------------


def test_read_missing_shard_and_missing_file(store: ReceiptStore) -> None:
    attempt_id = uuid7()
    assert store.read(attempt_id) is None
    store.ensure_shard(attempt_id)
    assert store.read(attempt_id) is None


def test_read_regular_file(store: ReceiptStore) -> None:
    attempt_id = uuid7()
    put(store, attempt_id, b'{"x":1}')
    assert store.read(attempt_id) == b'{"x":1}'


def test_read_symlink_is_not_followed(store: ReceiptStore, tmp_path: Path) -> None:
    attempt_id = uuid7()
    secret = tmp_path / "secret"
    secret.write_bytes(b"outside the root")
    (store.ensure_shard(attempt_id) / f"{attempt_id}.json").symlink_to(secret)
    assert store.read(attempt_id) == NOT_REGULAR
    dangling = uuid7()
    (store.ensure_shard(dangling) / f"{dangling}.json").symlink_to(tmp_path / "nowhere")
    assert store.read(dangling) == NOT_REGULAR


def test_read_fifo_does_not_block(store: ReceiptStore) -> None:
    attempt_id = uuid7()
    os.mkfifo(store.ensure_shard(attempt_id) / f"{attempt_id}.json", 0o600)
    assert store.read(attempt_id) == NOT_REGULAR


def test_read_directory(store: ReceiptStore) -> None:
    attempt_id = uuid7()
    (store.ensure_shard(attempt_id) / f"{attempt_id}.json").mkdir()
    assert store.read(attempt_id) == NOT_REGULAR


def test_read_oversize_is_capped_for_the_codec(store: ReceiptStore) -> None:
    attempt_id = uuid7()
    put(store, attempt_id, b"x" * 100_000)
    data = store.read(attempt_id)
    assert isinstance(data, bytes) and len(data) == MAX_RECEIPT_BYTES + 1
    assert decode(data) == Rejected(ReceiptReason.RECEIPT_TOO_LARGE)


def test_remove(store: ReceiptStore) -> None:
    attempt_id = uuid7()
    assert store.remove(attempt_id) is False  # no shard yet
    path = put(store, attempt_id)
    assert store.remove(attempt_id) is True
    assert not path.exists()
    assert store.remove(attempt_id) is False


# -- quarantine --------------------------------------------------------------------


def test_quarantine_moves_by_link_and_keeps_the_inode(store: ReceiptStore) -> None:
    attempt_id = uuid7()
    path = put(store, attempt_id, b"bad evidence")
    inode = path.stat().st_ino
    old = os.umask(0o022)
    try:
        ref = store.quarantine(attempt_id, ReceiptReason.RECEIPT_DUPLICATE_KEY)
    finally:
        os.umask(old)
    assert ref == f".quarantine/{attempt_id[-2:]}/{attempt_id}.json"
    moved = store.root / ref
    assert not path.exists()
    assert moved.read_bytes() == b"bad evidence"
    assert moved.stat().st_ino == inode and moved.stat().st_nlink == 1
    assert mode(store.root / ".quarantine") == 0o700
    assert mode(moved.parent) == 0o700
    assert store.read(attempt_id) is None


def test_quarantine_uses_deterministic_suffixes(store: ReceiptStore) -> None:
    attempt_id = uuid7()
    refs = []
    for n in range(3):
        put(store, attempt_id, f"copy {n}".encode())
        refs.append(store.quarantine(attempt_id, ReceiptReason.RECEIPT_BAD_TOKEN))
    shard = attempt_id[-2:]
    assert refs == [
        f".quarantine/{shard}/{attempt_id}.json",
        f".quarantine/{shard}/{attempt_id}.1.json",
        f".quarantine/{shard}/{attempt_id}.2.json",
    ]
    assert [(store.root / r).read_bytes() for r in refs] == [b"copy 0", b"copy 1", b"copy 2"]


def test_quarantine_bounded_suffixes(store: ReceiptStore) -> None:
    attempt_id = uuid7()
    for _ in range(MAX_SUFFIX + 1):
        put(store, attempt_id)
        store.quarantine(attempt_id, ReceiptReason.RECEIPT_BAD_TOKEN)
    path = put(store, attempt_id)
    with pytest.raises(FileExistsError):
        store.quarantine(attempt_id, ReceiptReason.RECEIPT_BAD_TOKEN)
    assert path.exists()  # nothing was overwritten or lost


def test_quarantine_finishes_after_a_crash_between_link_and_unlink(store: ReceiptStore) -> None:
    attempt_id = uuid7()
    path = put(store, attempt_id)
    target = store.root / ".quarantine" / attempt_id[-2:] / f"{attempt_id}.json"
    target.parent.mkdir(parents=True)
    os.link(path, target)  # the crash left the file at both names
    ref = store.quarantine(attempt_id, ReceiptReason.RECEIPT_UNKNOWN_FIELD)
    assert ref == f".quarantine/{attempt_id[-2:]}/{attempt_id}.json"
    assert not path.exists() and target.stat().st_nlink == 1
    assert mode(target.parent) == 0o700
    # and once more after the unlink too: same answer, nothing else moves
    assert store.quarantine(attempt_id, ReceiptReason.RECEIPT_UNKNOWN_FIELD) == ref
    assert os.listdir(target.parent) == [target.name]


def test_quarantine_with_nothing_to_move(store: ReceiptStore) -> None:
    with pytest.raises(FileNotFoundError):
        store.quarantine(uuid7(), ReceiptReason.RECEIPT_EMPTY)


def test_quarantine_moves_a_symlink_itself(store: ReceiptStore, tmp_path: Path) -> None:
    attempt_id = uuid7()
    secret = tmp_path / "secret"
    secret.write_bytes(b"keep me")
    (store.ensure_shard(attempt_id) / f"{attempt_id}.json").symlink_to(secret)
    ref = store.quarantine(attempt_id, ReceiptReason.RECEIPT_NOT_REGULAR)
    assert (store.root / ref).is_symlink()
    assert secret.read_bytes() == b"keep me"
    assert store.purge_quarantined(ref) is True
    assert secret.read_bytes() == b"keep me"


def test_quarantine_refuses_a_symlinked_quarantine(store: ReceiptStore, tmp_path: Path) -> None:
    attempt_id = uuid7()
    path = put(store, attempt_id)
    outside = tmp_path / "outside"
    outside.mkdir()
    (store.root / ".quarantine").symlink_to(outside)
    with pytest.raises(UnsafeDirectory):
        store.quarantine(attempt_id, ReceiptReason.RECEIPT_BAD_ID)
    assert path.exists() and not any(outside.iterdir())


def test_quarantine_falls_back_to_rename_noreplace(
    store: ReceiptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    attempt_id = uuid7()
    first = put(store, attempt_id, b"one")
    inode = first.stat().st_ino
    ref = store.quarantine(attempt_id, ReceiptReason.RECEIPT_BAD_TIME)
    assert (store.root / ref).stat().st_ino == inode and not first.exists()
    put(store, attempt_id, b"two")
    ref2 = store.quarantine(attempt_id, ReceiptReason.RECEIPT_BAD_TIME)
    assert ref2.endswith(f"{attempt_id}.1.json")
    assert (store.root / ref).read_bytes() == b"one"  # never replaced


def test_purge(store: ReceiptStore) -> None:
    refs = set()
    for _ in range(5):
        attempt_id = uuid7()
        put(store, attempt_id)
        refs.add(store.quarantine(attempt_id, ReceiptReason.RECEIPT_MISSING_FIELD))
    ref = sorted(refs)[0]
    assert store.purge_quarantined(ref) is True
    assert not (store.root / ref).exists()
    assert store.purge_quarantined(ref) is False
    assert all((store.root / r).exists() for r in refs - {ref})


@pytest.mark.parametrize(
    "ref",
    [
        "../receipts/ab/0190f3a2-7c41-7f00-a1b2-c3d4e5f60718.json",
        ".quarantine/18/../18/0190f3a2-7c41-7f00-a1b2-c3d4e5f60718.json",
        ".quarantine/18/0190f3a2-7c41-7f00-a1b2-c3d4e5f60718.json/..",
        "/.quarantine/18/0190f3a2-7c41-7f00-a1b2-c3d4e5f60718.json",
        ".quarantine/ab/0190f3a2-7c41-7f00-a1b2-c3d4e5f60718.json",  # wrong shard
        ".quarantine/18/0190f3a2-7c41-7f00-a1b2-c3d4e5f60718.17.json",
        ".quarantine/18/0190f3a2-7c41-7f00-a1b2-c3d4e5f60718.0.json",
        ".orphan-quarantine/18/0190f3a2-7c41-7f00-a1b2-c3d4e5f60718.json",
        "18/0190f3a2-7c41-7f00-a1b2-c3d4e5f60718.json",
        ".quarantine/18/0190f3a2-7c41-7f00-a1b2-c3d4e5f60718.json\n",
    ],
)
def test_purge_is_confined(store: ReceiptStore, ref: str) -> None:
    with pytest.raises(ValueError):
        store.purge_quarantined(ref)


def test_purge_accepts_suffixed_refs(store: ReceiptStore) -> None:
    assert (
        store.purge_quarantined(".quarantine/18/0190f3a2-7c41-7f00-a1b2-c3d4e5f60718.16.json")
        is False
    )


# -- probe ------------------------------------------------------------------------------


def test_probe_passes_here_and_leaves_nothing(root: Path) -> None:
    probe(root)
    assert list(root.iterdir()) == []


def test_probe_without_links_or_renameat2(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_links(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    monkeypatch.setattr(dirfd, "_libc_renameat2", lambda: None)
    with pytest.raises(UnsupportedVolume, match="hard links or rename-no-replace"):
        probe(root)
    assert list(root.iterdir()) == []


def test_probe_renameat2_alone_is_enough(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_links(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    probe(root)
    assert list(root.iterdir()) == []


@pytest.fixture
def vfat_mount(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        unavailable("mounting a vfat image needs root")
    if shutil.which("mkfs.vfat") is None:
        unavailable("mkfs.vfat (dosfstools) is not installed")
    image, mnt = tmp_path / "fat.img", tmp_path / "mnt"
    mnt.mkdir()
    with image.open("wb") as f:
        f.truncate(2 * 1024 * 1024)
    subprocess.run(["mkfs.vfat", str(image)], check=True, capture_output=True)
    attempts = [(["mount", "-o", "loop", str(image), str(mnt)], ["umount", str(mnt)])]
    if shutil.which("fusefat"):
        attempts.append(
            (["fusefat", "-o", "rw+", str(image), str(mnt)], ["fusermount", "-u", str(mnt)])
        )
    errors: list[str] = []
    unmount: list[str] | None = None
    for mount, undo in attempts:
        done = subprocess.run(mount, capture_output=True, text=True, timeout=30)
        for _ in range(50):  # a FUSE daemon may finish mounting just after it returns
            if done.returncode != 0 or os.path.ismount(mnt):
                break
            time.sleep(0.05)
        if done.returncode == 0 and os.path.ismount(mnt):
            unmount = undo
            break
        errors.append(f"{mount[0]}: {done.stderr.strip() or done.returncode}")
    if unmount is None:
        unavailable("could not mount a vfat image: " + "; ".join(errors))
    try:
        yield mnt
    finally:
        subprocess.run(unmount, capture_output=True, timeout=30)
        if os.path.ismount(mnt):
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)


def test_probe_refuses_vfat(vfat_mount: Path) -> None:
    with pytest.raises(UnsupportedVolume) as info:
        probe(vfat_mount)
    message = str(info.value)
    assert "vfat" in message and "ext4" in message and "named volume" in message
    assert list(vfat_mount.iterdir()) == []
