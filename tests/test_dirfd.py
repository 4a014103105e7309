"""dirfd: the one never-overwrite move, shared by the receipt quarantine and the audit."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from qledge.fs import dirfd


@pytest.fixture
def dirs(tmp_path: Path) -> Iterator[tuple[Path, int, Path, int]]:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    with dirfd.open_dir(str(src), None) as sfd, dirfd.open_dir(str(dst), None) as dfd:
        yield src, sfd, dst, dfd


@pytest.fixture
def no_links(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", refuse)


def _put(path: Path, data: bytes) -> os.stat_result:
    path.write_bytes(data)
    return os.lstat(path)


def test_numbered_names_keep_the_suffix() -> None:
    assert [dirfd.numbered("a.json", n) for n in (0, 1, 16)] == ["a.json", "a.1.json",
                                                                 "a.16.json"]
    assert dirfd.numbered(".x.123.tmp", 2) == ".x.123.2.tmp"
    assert dirfd.numbered("plain", 1) == "plain.1"
    assert dirfd.numbered(".hidden", 1) == ".hidden.1"


@pytest.mark.parametrize("links", [True, False], ids=["link", "rename-noreplace"])
def test_a_taken_name_is_skipped_never_overwritten(
        dirs: tuple[Path, int, Path, int], links: bool, request: pytest.FixtureRequest) -> None:
    src, sfd, dst, dfd = dirs
    if not links:
        request.getfixturevalue("no_links")
    _put(dst / "r.json", b"older")
    _put(dst / "r.1.json", b"older still")
    source = _put(src / "r.json", b"new")
    assert dirfd.move_no_overwrite(sfd, "r.json", dfd, source) == "r.2.json"
    assert (dst / "r.json").read_bytes() == b"older"
    assert (dst / "r.1.json").read_bytes() == b"older still"
    assert (dst / "r.2.json").read_bytes() == b"new"
    assert os.lstat(dst / "r.2.json").st_ino == source.st_ino  # moved, not copied
    assert not (src / "r.json").exists()


def test_an_interrupted_move_is_finished_not_repeated(dirs: tuple[Path, int, Path, int]) -> None:
    src, sfd, dst, dfd = dirs
    source = _put(src / "r.json", b"half moved")
    os.link(src / "r.json", dst / "r.json")  # the crash came between link and unlink
    assert dirfd.move_no_overwrite(sfd, "r.json", dfd, source) == "r.json"
    assert os.listdir(dst) == ["r.json"] and os.listdir(src) == []
    assert os.lstat(dst / "r.json").st_nlink == 1


@pytest.mark.parametrize("links", [True, False], ids=["link", "rename-noreplace"])
def test_a_swapped_file_is_left_where_it_was(
        dirs: tuple[Path, int, Path, int], links: bool, request: pytest.FixtureRequest) -> None:
    src, sfd, dst, dfd = dirs
    examined = _put(src / "r.json", b"what the caller judged")
    os.link(src / "r.json", src.parent / "kept")  # its inode stays taken
    swapped = _put(src.parent / "planted", b"planted since")
    os.replace(src.parent / "planted", src / "r.json")
    if not links:
        request.getfixturevalue("no_links")
    with pytest.raises(dirfd.Changed):
        dirfd.move_no_overwrite(sfd, "r.json", dfd, examined)
    assert os.lstat(src / "r.json").st_ino == swapped.st_ino
    assert (src / "r.json").read_bytes() == b"planted since"
    assert os.listdir(dst) == []


def test_every_name_taken_moves_nothing(dirs: tuple[Path, int, Path, int]) -> None:
    src, sfd, dst, dfd = dirs
    for n in range(dirfd.MAX_SUFFIX + 1):
        _put(dst / dirfd.numbered("r.json", n), b"x")
    source = _put(src / "r.json", b"kept")
    with pytest.raises(FileExistsError):
        dirfd.move_no_overwrite(sfd, "r.json", dfd, source)
    assert (src / "r.json").read_bytes() == b"kept"


def test_open_dir_never_follows_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "file").write_bytes(b"")
    with dirfd.open_dir(str(tmp_path), None) as fd:
        for name in ("link", "file"):
            with pytest.raises(dirfd.UnsafeDirectory), dirfd.open_dir(name, fd):
                pass
        with contextlib.ExitStack() as stack:
            made = dirfd.private_dir("new", fd, stack, enforce=False)
            assert os.fstat(made).st_mode & 0o777 == 0o700
