"""The confined scripts folder (qledge.scripts.folder): hostile paths, planted symlinks and
special files, atomic writes under a real SIGKILL, the bounded history, the bounded
tree and delete, and the upload cap (413 before the body is read)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from qledge.fs import confined
from qledge.scripts import folder as scripts
from qledge.scripts import ship as shipped_scripts
from qledge.scripts.folder import Limits, Scripts

from support import ADMIN, ROOT, unavailable


@pytest.fixture
def world(tmp_path: Path) -> tuple[Scripts, Path]:
    """A scripts folder inside a work folder, next to an `outside` folder with a secret."""
    work = tmp_path / "work"
    (work / "scripts").mkdir(parents=True)
    (work / ".scripts-history").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("top secret\n")
    return Scripts(work / "scripts", work / ".scripts-history"), outside


def snapshot(root: Path) -> dict[str, tuple[str, bytes | str]]:
    """Every entry under root (not following symlinks): kind and content/target."""
    out: dict[str, tuple[str, bytes | str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[str(p.relative_to(root))] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                out[str(p.relative_to(root))] = ("file", p.read_bytes())
            else:
                out[str(p.relative_to(root))] = (confined.kind(st.st_mode), "")
    return out


# -- hostile paths: refused by their text, before anything is touched --------------------

HOSTILE = [
    ("../escape.js", "dotdot"),
    ("a/../../escape.js", "dotdot"),
    ("a/..", "dotdot"),
    ("..", "dotdot"),
    ("/etc/passwd", "absolute"),
    ("/", "absolute"),
    ("a\x00b.js", "nul"),
    ("a.js\x00/../../x", "nul"),
    ("a//b.js", "empty_part"),
    ("a/", "empty_part"),
    ("./a.js", "dot_part"),
    ("a/./b.js", "dot_part"),
    (".", "dot_part"),
    ("", "empty"),
    ("a\nb.js", "control_char"),
    ("a\x1b[31m.js", "control_char"),
    ("x" * 256, "too_long"),
    ("a/" * 2100 + "b", "too_long"),
    ("\udcff.js", "encoding"),
]

OPERATIONS: dict[str, Callable[[Scripts, str], object]] = {
    "read": lambda s, p: s.read(p),
    "read_bytes": lambda s, p: s.read_bytes(p),
    "write": lambda s, p: s.write(p, b"x"),
    "mkdir": lambda s, p: s.mkdir(p),
    "move_from": lambda s, p: s.move(p, "moved.js"),
    "move_to": lambda s, p: s.move("real.js", p),
    "delete": lambda s, p: s.delete(p),
    "download": lambda s, p: s.open_for_download(p),
    "history": lambda s, p: s.history(p),
    "restore": lambda s, p: s.restore(p, "0000000000000-000000"),
    "place": lambda s, p: s.place(s.stage(), p, overwrite=True),
}


@pytest.mark.parametrize(("path", "reason"), HOSTILE)
def test_hostile_paths_are_refused_with_their_reason(
        world: tuple[Scripts, Path], path: str, reason: str) -> None:
    sc, _ = world
    (sc.root / "real.js").write_text("real\n")
    before = snapshot(sc.root.parent.parent)
    for name, op in OPERATIONS.items():
        with pytest.raises(scripts.ScriptPathInvalid) as err:
            op(sc, path)
        assert err.value.reason == reason, (name, err.value.message)
    assert snapshot(sc.root.parent.parent) == before


def test_the_tree_refuses_hostile_folders_but_takes_the_root(world: tuple[Scripts, Path]) -> None:
    sc, _ = world
    assert sc.tree("") == ([], False)
    for path, reason in HOSTILE:
        if path:
            with pytest.raises(scripts.ScriptPathInvalid) as err:
                sc.tree(path)
            assert err.value.reason == reason


# -- planted symlinks and special files -------------------------------------------------

def test_symlinks_anywhere_on_the_path_are_refused_and_never_followed(
        world: tuple[Scripts, Path]) -> None:
    sc, outside = world
    root = sc.root
    (root / "lib").mkdir()
    (root / "lib" / "real.js").write_text("real\n")
    os.symlink(outside, root / "out")                 # a folder link leading outside
    os.symlink(outside / "secret", root / "secret.js")  # a file link leading outside
    os.symlink("lib", root / "alias")                 # an in-tree folder link
    os.symlink("real.js", root / "lib" / "same.js")   # an in-tree file link
    os.symlink("/nonexistent", root / "dangling.js")
    before_outside = snapshot(outside)
    refused = [
        ("out/secret", lambda: sc.read("out/secret"), "out"),
        ("out/new.js", lambda: sc.write("out/new.js", b"x"), "out"),
        ("out/deep/new.js", lambda: sc.write("out/deep/new.js", b"x"), "out"),
        ("out/d", lambda: sc.mkdir("out/d"), "out"),
        ("secret.js", lambda: sc.read("secret.js"), "secret.js"),
        ("secret.js w", lambda: sc.write("secret.js", b"overwritten"), "secret.js"),
        ("secret.js dl", lambda: sc.open_for_download("secret.js"), "secret.js"),
        ("secret.js mv", lambda: sc.move("secret.js", "moved.js"), "secret.js"),
        ("into out", lambda: sc.move("lib/real.js", "out/real.js"), "out"),
        ("upload", lambda: sc.place(sc.stage(), "secret.js", overwrite=True), "secret.js"),
        ("upload dir", lambda: sc.place(sc.stage(), "out/x.js", overwrite=True), "out"),
        ("alias", lambda: sc.read("alias/real.js"), "alias"),
        ("same", lambda: sc.read("lib/same.js"), "lib/same.js"),
        ("dangling", lambda: sc.read("dangling.js"), "dangling.js"),
        ("dangling w", lambda: sc.write("dangling.js", b"x"), "dangling.js"),
        ("tree", lambda: sc.tree("out"), "out"),
        ("delete through", lambda: sc.delete("out/secret"), "out"),
    ]
    for label, op, at in refused:
        with pytest.raises(scripts.ScriptSymlink) as err:
            op()
        assert err.value.reason == "symlink" and err.value.path == at, label
        assert "symlink" in err.value.message
    assert snapshot(outside) == before_outside
    assert not Path("/nonexistent").exists()
    # the tree shows them for what they are, without following them
    nodes, _ = sc.tree("")
    kinds = {n.name: n.type for n in nodes}
    assert kinds == {"lib": "directory", "out": "symlink", "secret.js": "symlink",
                     "alias": "symlink", "dangling.js": "symlink"}
    # deleting a link removes the link only
    sc.delete("out")
    sc.delete("secret.js")
    assert snapshot(outside) == before_outside
    assert not (root / "out").is_symlink() and not (root / "secret.js").is_symlink()


def _mknod(path: Path, mode: int, dev: int) -> None:
    try:
        os.mknod(path, mode | 0o600, dev)
    except PermissionError:
        unavailable("creating device nodes needs CAP_MKNOD (root)")


def _within(seconds: float, fn: Callable[[], object]) -> object:
    """Run fn in a daemon thread and fail if it blocks (a FIFO opened without O_NONBLOCK
    would wait for a writer forever)."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        pytest.fail("the call blocked")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("value")


def test_fifos_sockets_and_devices_are_refused_by_kind(
        world: tuple[Scripts, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    sc, _ = world
    root = sc.root
    os.mkfifo(root / "pipe.js")
    monkeypatch.chdir(root)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind("sock.js")
    _mknod(root / "null.js", stat.S_IFCHR, os.makedev(1, 3))
    _mknod(root / "loop.js", stat.S_IFBLK, os.makedev(7, 0))
    try:
        for name, reason in (("pipe.js", "fifo"), ("sock.js", "socket"),
                             ("null.js", "char_device"), ("loop.js", "block_device")):
            for op in (OPERATIONS[k] for k in ("read", "read_bytes", "write", "mkdir",
                                                "move_from", "download", "place")):
                with pytest.raises(scripts.ScriptNotRegular) as err:
                    _within(5, lambda op=op, name=name: op(sc, name))  # type: ignore[misc]
                assert err.value.reason == reason and err.value.path == name
            assert stat.S_IFMT((root / name).lstat().st_mode) != stat.S_IFREG
        with pytest.raises(scripts.ScriptNotRegular):
            _within(5, lambda: sc.tree("pipe.js"))
        nodes, _ = sc.tree("")
        assert {n.name: n.type for n in nodes} == {
            "pipe.js": "fifo", "sock.js": "socket", "null.js": "char_device",
            "loop.js": "block_device"}
        sc.delete("pipe.js")  # removing the name is harmless
        assert not (root / "pipe.js").exists()
    finally:
        sock.close()


def test_a_fifo_swapped_in_after_the_check_cannot_block(
        world: tuple[Scripts, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The lstat said "regular file"; by the open it is a FIFO: O_NONBLOCK keeps the open
    from waiting for a writer, and the fstat refuses it."""
    sc, _ = world
    (sc.root / "plain.js").write_text("x")
    regular = (sc.root / "plain.js").lstat()
    os.mkfifo(sc.root / "race.js")
    monkeypatch.setattr(confined, "lstat_at", lambda fd, name: regular)
    with pytest.raises(scripts.ScriptNotRegular) as err:
        _within(5, lambda: sc.read("race.js"))
    assert err.value.reason == "fifo"


def test_folders_and_files_in_each_others_place(world: tuple[Scripts, Path]) -> None:
    sc, _ = world
    (sc.root / "dir").mkdir()
    (sc.root / "file.js").write_text("x")
    with pytest.raises(scripts.ScriptWrongType) as err:
        sc.read("dir")
    assert err.value.reason == "is_directory"
    with pytest.raises(scripts.ScriptWrongType) as err:
        sc.read("file.js/x")
    assert err.value.reason == "not_directory" and err.value.path == "file.js"
    with pytest.raises(scripts.ScriptWrongType):
        sc.write("dir", b"x")
    with pytest.raises(scripts.ScriptWrongType):
        sc.mkdir("file.js")
    with pytest.raises(scripts.ScriptExists):
        sc.mkdir("dir")
    with pytest.raises(scripts.ScriptNotFound):
        sc.read("missing.js")


# -- atomic writes ---------------------------------------------------------------------

_WRITER = """
import sys
from pathlib import Path
from qledge.scripts.folder import Limits, Scripts
root = Path(sys.argv[1])
size = int(sys.argv[2])
sc = Scripts(root / "scripts", root / ".scripts-history", Limits(max_text=size))
sc.write("big.txt", b"B" * size)
"""
# One byte over the writer's text cap, so no history copy is made first: the kill lands
# in the writing of the new content.
OLD = b"A" * ((24 << 20) + 1)
NEW = b"B" * (24 << 20)


def _writer(work: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(work), str(len(NEW))],
        env={**os.environ, "PYTHONPATH": str(ROOT / "app"), **(env or {})})


def _temps(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.name.startswith(confined.TEMP_PREFIX)]


def test_a_writer_killed_mid_write_leaves_the_old_content(world: tuple[Scripts, Path]) -> None:
    """A real SIGKILL while the new bytes are going into the temp file: the script still
    has its old content, whole; the torn temp file is hidden from the tree."""
    sc, _ = world
    work = sc.root.parent
    target = sc.root / "big.txt"
    killed_mid_write = 0
    for _attempt in range(5):
        target.write_bytes(OLD)
        for tmp in _temps(sc.root):
            tmp.unlink()
        proc = _writer(work)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            temps = _temps(sc.root)
            try:
                size = temps[0].stat().st_size if temps else 0
            except FileNotFoundError:  # renamed into place just now
                size = 0
            if 0 < size < len(NEW):
                proc.send_signal(signal.SIGKILL)
                killed_mid_write += 1
                break
            time.sleep(0.0005)
        proc.wait(30)
        data = target.read_bytes()
        assert data == OLD, "a killed writer left a mix"
        if killed_mid_write:
            assert [n.name for n in sc.tree("")[0]] == ["big.txt"]  # the temp is hidden
            break
    assert killed_mid_write, "never caught the writer mid-write"


def test_a_writer_killed_around_its_rename_leaves_old_or_new(
        world: tuple[Scripts, Path]) -> None:
    """Kills at growing delays after the temp file appears (during the write, the fsync,
    the rename): every outcome is the whole old or the whole new content."""
    sc, _ = world
    target = sc.root / "big.txt"
    seen: set[bytes] = set()
    for i in range(8):
        target.write_bytes(OLD)
        proc = _writer(sc.root.parent)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None and not _temps(sc.root):
            time.sleep(0.0005)
        time.sleep(0.01 * i)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        data = target.read_bytes()
        assert data in (OLD, NEW), f"mixed content after a kill {10 * i} ms into the write"
        seen.add(data[:1])
        for tmp in _temps(sc.root):
            tmp.unlink()
    assert b"A" in seen


@pytest.mark.parametrize(("point", "want"), [("scripts.write.chunk", OLD),
                                             ("scripts.write.before_rename", OLD)])
def test_a_writer_dying_at_a_failpoint_leaves_the_old_content(
        world: tuple[Scripts, Path], point: str, want: bytes) -> None:
    sc, _ = world
    (sc.root / "big.txt").write_bytes(OLD)
    proc = _writer(sc.root.parent, {"QLTEST_FAILPOINTS": f"{point}=exit"})
    assert proc.wait(60) == 86  # the failpoint's os._exit, like a kill -9 for the disk
    assert (sc.root / "big.txt").read_bytes() == want
    assert _temps(sc.root), "the failpoint was not reached while the temp file existed"


def test_a_write_never_follows_a_symlink_planted_at_the_temp_name(
        world: tuple[Scripts, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    sc, outside = world
    os.symlink(outside / "secret", sc.root / (confined.TEMP_PREFIX + "fixed"))
    monkeypatch.setattr(confined, "_temp_name", lambda: confined.TEMP_PREFIX + "fixed")
    with pytest.raises(FileExistsError):
        sc.write("a.js", b"payload")
    assert (outside / "secret").read_text() == "top secret\n"


def test_writes_keep_the_mode_and_report_what_changed(world: tuple[Scripts, Path]) -> None:
    sc, _ = world
    first = sc.write("run.sh", b"echo 1\n")
    assert first.created and first.changed and first.history == "none"
    assert stat.S_IMODE((sc.root / "run.sh").stat().st_mode) == 0o644
    os.chmod(sc.root / "run.sh", 0o755)
    second = sc.write("run.sh", b"echo 2\n")
    assert not second.created and second.history == "kept"
    assert stat.S_IMODE((sc.root / "run.sh").stat().st_mode) == 0o755
    same = sc.write("run.sh", b"echo 2\n")
    assert not same.changed and same.history == "none"
    assert len(sc.history("run.sh")) == 1
    with pytest.raises(scripts.ScriptExists):
        sc.write("run.sh", b"x", create_only=True)
    with pytest.raises(scripts.ScriptChanged):
        sc.write("run.sh", b"echo 3\n", base_sha256=first.sha256)
    assert (sc.root / "run.sh").read_bytes() == b"echo 2\n"
    ok = sc.write("run.sh", b"echo 3\n", base_sha256=second.sha256)
    assert ok.changed
    with pytest.raises(scripts.ScriptChanged):  # a new file is not what an editor loaded
        sc.write("new.sh", b"x", base_sha256=second.sha256)
    with pytest.raises(scripts.ScriptTooLarge):
        sc.write("big.txt", b"x" * (sc.limits.max_text + 1))


def test_reads_refuse_binary_and_oversized_files(world: tuple[Scripts, Path]) -> None:
    sc, _ = world
    (sc.root / "bin.so").write_bytes(b"\x7fELF\x00\x01")
    (sc.root / "latin1.txt").write_bytes("café".encode("latin-1"))
    (sc.root / "huge.js").write_bytes(b"x" * (sc.limits.max_text + 1))
    for name in ("bin.so", "latin1.txt"):
        with pytest.raises(scripts.ScriptBinary):
            sc.read(name)
    with pytest.raises(scripts.ScriptTooLarge):
        sc.read("huge.js")
    fd, size = sc.open_for_download("huge.js")  # downloads stream any size
    os.close(fd)
    assert size == sc.limits.max_text + 1
    assert sc.read_bytes("bin.so")[0] == b"\x7fELF\x00\x01"


# -- history ---------------------------------------------------------------------------

def test_history_keeps_the_last_five_replaced_contents(world: tuple[Scripts, Path]) -> None:
    sc, _ = world
    for i in range(8):  # several saves within one millisecond keep their order
        sc.write("a/b.js", f"v{i}\n".encode())
    versions = sc.history("a/b.js")
    assert len(versions) == 5
    assert [sc.version("a/b.js", v.id) for v in versions] == [
        f"v{i}\n".encode() for i in (6, 5, 4, 3, 2)]
    assert versions == sorted(versions, key=lambda v: v.id, reverse=True)
    # outside the scripts tree: a task's `ls -R` or a subscription never sees it
    assert not any(".scripts-history" in str(p) for p in sc.root.rglob("*"))
    assert all(p.name in ("a", "b.js") for p in sc.root.rglob("*"))
    # restore writes the version back and keeps the current content as a version
    restored = sc.restore("a/b.js", versions[2].id)
    assert restored.history == "kept"
    assert (sc.root / "a" / "b.js").read_text() == "v4\n"
    after = sc.history("a/b.js")
    assert len(after) == 5 and sc.version("a/b.js", after[0].id) == b"v7\n"
    with pytest.raises(scripts.ScriptVersionNotFound):
        sc.version("a/b.js", "0000000000000-000000")
    with pytest.raises(scripts.ScriptVersionNotFound):
        sc.version("a/b.js", "../../outside")


def test_versions_saved_in_one_millisecond_keep_their_order(tmp_path: Path) -> None:
    from qledge.scripts._history import History

    history = History(tmp_path, keep=3)
    for i in range(5):
        history.record(("x.js",), str(i).encode(), 1_000_000)
    versions = history.versions(("x.js",))
    assert [history.read(("x.js",), v.id, 10) for v in versions] == [b"4", b"3", b"2"]
    assert [v.saved_at_ms for v in versions] == [1_000_004, 1_000_003, 1_000_002]


def test_history_follows_moves_and_goes_with_deletes(world: tuple[Scripts, Path]) -> None:
    sc, _ = world
    sc.write("d/x.js", b"1")
    sc.write("d/x.js", b"2")
    sc.write("d/b", b"file named like a folder")
    sc.write("d/b", b"again")
    sc.move("d/x.js", "e/y.js")
    assert sc.history("d/x.js") == []
    assert [sc.version("e/y.js", v.id) for v in sc.history("e/y.js")] == [b"1"]
    sc.move("d", "f")
    assert [sc.version("f/b", v.id) for v in sc.history("f/b")] == [b"file named like a folder"]
    sc.delete("e/y.js")
    assert sc.history("e/y.js") == []
    sc.write("e/y.js", b"new")  # a new file with the old name starts a fresh history
    assert sc.history("e/y.js") == []
    sc.delete("f")
    assert sc.history("f/b") == []
    assert not (sc.history_store.root / "d.f").exists()


def test_content_larger_than_the_text_cap_is_replaced_without_history(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "h").mkdir()
    sc = Scripts(tmp_path / "s", tmp_path / "h", Limits(max_text=16, max_upload=1024))
    (tmp_path / "s" / "big.bin").write_bytes(b"x" * 100)
    up = sc.stage()
    up.write(b"small")
    saved = sc.place(up, "big.bin", overwrite=True)
    assert saved.history == "skipped"
    assert (tmp_path / "s" / "big.bin").read_bytes() == b"small"
    assert sc.history("big.bin") == []


# -- bounds ----------------------------------------------------------------------------

def test_the_tree_is_bounded_and_hides_noise(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "h").mkdir()
    root = tmp_path / "s"
    sc = Scripts(root, tmp_path / "h", Limits(tree_depth=3, tree_per_folder=10,
                                              tree_total=25))
    for name in ("node_modules", ".git", ".pnpm"):
        (root / name).mkdir()
        (root / name / "x.js").write_text("x")
    for name in ("pnpm-lock.yaml", "yarn.lock", "package-lock.json",
                 confined.TEMP_PREFIX + "0123"):
        (root / name).write_text("x")
    (root / "many").mkdir()
    for i in range(30):
        (root / "many" / f"f{i:02}.js").write_text("x")
    (root / "deep" / "a" / "b" / "c").mkdir(parents=True)
    (root / "deep" / "a" / "b" / "c" / "leaf.js").write_text("x")
    (root / "top.js").write_text("x")
    nodes, truncated = sc.tree("")
    assert truncated
    by = {n.name: n for n in nodes}
    assert set(by) == {"many", "deep", "top.js"}  # hidden names are not listed
    assert [n.type for n in nodes] == ["directory", "directory", "file"]  # folders first
    many = by["many"]
    assert many.truncated and many.children is not None and len(many.children) == 10
    deep_b = by["deep"].children[0].children[0]  # type: ignore[index]
    assert deep_b.name == "b" and deep_b.children is None  # the depth bound
    assert sc.tree("deep/a/b", depth=5)[0][0].children[0].name == "leaf.js"  # type: ignore[index]
    # the total bound holds across folders
    def count(ns: list[scripts.Node]) -> int:
        return sum(1 + count(n.children or []) for n in ns)
    assert count(nodes) <= 25
    # a name the API could not take back (not UTF-8) is left out, and says so
    os.mkdir(os.path.join(os.fsencode(root), b"bad\xff"))
    small = Scripts(root, tmp_path / "h")
    names = [n.name for n in small.tree("")[0]]
    assert all("\udcff" not in n for n in names) and small.tree("")[1]


def test_a_folder_delete_is_bounded_and_never_follows_links(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "h").mkdir()
    root = tmp_path / "s"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    sc = Scripts(root, tmp_path / "h", Limits(delete_entries=20, delete_depth=4))
    (root / "big").mkdir()
    for i in range(25):
        (root / "big" / f"{i}.js").write_text("x")
    with pytest.raises(scripts.ScriptTreeTooLarge):
        sc.delete("big")
    assert len(list((root / "big").iterdir())) == 25  # nothing was removed
    (root / "nest" / "1" / "2" / "3" / "4").mkdir(parents=True)
    with pytest.raises(scripts.ScriptTreeTooLarge):
        sc.delete("nest")
    assert (root / "nest" / "1" / "2" / "3" / "4").is_dir()
    (root / "repo" / "sub").mkdir(parents=True)
    (root / "repo" / "sub" / "a.js").write_text("x")
    os.symlink(outside, root / "repo" / "link")
    os.mkfifo(root / "repo" / "sub" / "fifo")
    gone = sc.delete("repo")
    assert gone == {"path": "repo", "type": "directory", "entries": 4}  # sub, a.js, link, fifo
    assert not (root / "repo").exists()
    assert (outside / "keep").read_text() == "keep"


def test_uploads_are_capped_while_they_stream(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "h").mkdir()
    sc = Scripts(tmp_path / "s", tmp_path / "h", Limits(max_upload=10))
    up = sc.stage()
    up.write(b"0123456789")
    with pytest.raises(scripts.ScriptTooLarge):
        up.write(b"x")
    up.abort()
    assert list((tmp_path / "s").iterdir()) == []  # the staged bytes are gone


def _small_app(client: TestClient, max_upload: int) -> Scripts:
    rt = client.app.state.runtime  # type: ignore[attr-defined]
    sc = Scripts(rt.settings.scripts_path, rt.settings.script_history_path,
                 Limits(max_upload=max_upload))
    client.app.state.scripts = sc  # type: ignore[attr-defined]
    return sc


async def _post_chunks(app: object, path: str, headers: dict[str, str],
                      chunks: Iterator[bytes]) -> tuple[int, dict[str, object], int]:
    """POST through the ASGI app itself, counting the body chunks the server pulled."""
    pulled = 0

    async def receive() -> dict[str, object]:
        nonlocal pulled
        chunk = next(chunks, None)
        if chunk is None:
            return {"type": "http.request", "body": b"", "more_body": False}
        pulled += 1
        return {"type": "http.request", "body": chunk, "more_body": True}

    sent: list[dict[str, object]] = []

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
             "root_path": "", "query_string": b"", "server": ("test", 80),
             "client": ("127.0.0.1", 1),
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}
    await app(scope, receive, send)  # type: ignore[operator]
    body = b"".join(m.get("body", b"") for m in sent[1:])  # type: ignore[misc]
    return int(sent[0]["status"]), json.loads(body), pulled  # type: ignore[call-overload]


def test_upload_over_the_cap_is_413_before_the_body_is_read(client: TestClient) -> None:
    sc = _small_app(client, 1024)
    for name in shipped_scripts.FILES:  # shipped at start-up; this test wants an empty folder
        (sc.root / name).unlink(missing_ok=True)
    auth = {"Authorization": f"Bearer {ADMIN}",
            "Content-Type": "multipart/form-data; boundary=zzz"}
    many = (b"x" * 1024 for _ in range(10_000))
    # declared: refused from Content-Length alone, not one body chunk read
    status, body, pulled = asyncio.run(_post_chunks(
        client.app, "/api/v1/scripts/upload", {**auth, "Content-Length": str(10 << 20)}, many))
    assert status == 413, body
    assert body["error"] == "SCRIPT_TOO_LARGE" and body["reason"] == "too_large"
    assert pulled == 0

    # streamed without a length: refused once the file part passes the cap
    def multipart() -> Iterator[bytes]:
        yield (b"--zzz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.js\""
               b"\r\n\r\n")
        for _ in range(10_000):
            yield b"y" * 512
    status, body, pulled = asyncio.run(_post_chunks(
        client.app, "/api/v1/scripts/upload", auth, multipart()))
    assert status == 413, body
    assert pulled <= 4  # the header part and ~2 KiB of file bytes, of 5 MB sent
    assert list(sc.root.iterdir()) == []  # no staged leftovers, nothing placed
    # and under the cap the same upload lands
    r = client.post("/api/v1/scripts/upload", files={"file": ("a.js", b"y" * 1024)})
    assert r.status_code == 201, r.text
    assert (sc.root / "a.js").read_bytes() == b"y" * 1024


def test_start_up_makes_the_scripts_folder_private(tmp_path: Path) -> None:
    from qledge import paths

    from support import make_settings

    conf = make_settings(tmp_path / "state")
    for folder in (conf.scripts_path, conf.script_history_path):
        assert folder.is_dir() and stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert conf.scripts_path == conf.work_path / "scripts"
    assert conf.script_history_path.parent == conf.work_path  # beside, not inside, scripts/
    os.chmod(conf.scripts_path, 0o755)  # e.g. a folder copied in from QingLong
    paths.prepare_roots(conf)
    assert stat.S_IMODE(conf.scripts_path.stat().st_mode) == 0o700
    conf.scripts_path.rmdir()
    os.symlink(tmp_path, conf.scripts_path)
    with pytest.raises(paths.RootError):
        paths.prepare_roots(conf)
