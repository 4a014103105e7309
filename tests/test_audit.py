"""`qledge audit receipts`: classification, quarantine moves, confinement, read-only DB, CLI."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from qledge.audit import receipts as audit
from qledge.db import migrate
from qledge.ids import uuid7

ROOT = Path(__file__).resolve().parents[1]
OLD = time.time() - 2 * 86400  # well past the default min age (3600 s)
ORPHANS = ".orphan-quarantine"


def aid(shard: str) -> str:
    """A fresh attempt id that lands in `shard` (the shard key is the id's last 2 digits)."""
    return uuid7()[:-2] + shard


def make_db(path: Path, attempts: dict[str, str], journaled: set[str]) -> Path:
    """A migrated database with `attempts` (id -> status) and journal rows for `journaled`."""
    migrate.apply(path)
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO tasks (id, name, command, created_at_ms, updated_at_ms)"
                 " VALUES ('t1', 'task', 'true', 1, 1)")
    conn.execute("INSERT INTO runs (id, task_id, trigger, status, created_at_ms)"
                 " VALUES ('r1', 't1', 'manual', 'running', 1)")
    for n, (attempt_id, status) in enumerate(sorted(attempts.items()), start=1):
        conn.execute(
            "INSERT INTO run_attempts (id, run_id, attempt_no, executor_type, runtime_owner,"
            " status, callback_token_hash, callback_sequence, log_path, created_at_ms)"
            " VALUES (?, 'r1', ?, 'local_process', 'node', ?, x'00', 1, ?, 1)",
            (attempt_id, n, status, f"{attempt_id[-2:]}/{attempt_id}.log"))
    for attempt_id in journaled:
        conn.execute(
            "UPDATE run_attempts SET receipt_state = 'pending', receipt_path = ?,"
            " receipt_created_at_ms = 1, receipt_updated_at_ms = 1 WHERE id = ?",
            (f"{attempt_id[-2:]}/{attempt_id}.json", attempt_id))
    conn.commit()
    conn.close()
    return path


def put(root: Path, rel: str, data: bytes = b'{"token":"secret"}', old: bool = True) -> Path:
    path = root / rel
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_bytes(data)
    if old:
        os.utime(path, (OLD, OLD))
    return path


def snapshot(*tops: Path) -> dict[str, tuple[object, ...]]:
    """Names, types, modes, sizes, contents (regular files), link targets, inodes of trees."""
    out: dict[str, tuple[object, ...]] = {}
    for top in tops:
        for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
            for name in dirnames + filenames:
                path = os.path.join(dirpath, name)
                st = os.lstat(path)
                extra: object = None
                if stat.S_ISREG(st.st_mode):
                    extra = (hashlib.sha256(Path(path).read_bytes()).hexdigest(), st.st_mtime_ns)
                elif stat.S_ISLNK(st.st_mode):
                    extra = os.readlink(path)
                out[path] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_size,
                             st.st_ino, extra)
    return out


class Tree:
    """Every class of entry in shards 00..03; shard 03 overflows a per-shard limit of 4."""

    def __init__(self, tmp: Path) -> None:
        self.root = tmp / "receipts"
        self.root.mkdir()
        self.outside = tmp / "outside"
        self.outside.mkdir()
        (self.outside / "secret.txt").write_bytes(b"not yours")
        j, a, t, u = aid("00"), aid("00"), aid("00"), aid("00")
        p, u2, y = aid("01"), aid("01"), aid("01")
        self.overflow_ids = [aid("03") for _ in range(5)]
        self.db = make_db(tmp / "q.sqlite3",
                          {j: "succeeded", a: "running", t: "failed", p: "preparing",
                           y: "lost"},
                          journaled={j})
        self.expected = {
            "journaled": [f"00/{j}.json"],
            "active": [f"00/{a}.json", f"01/.{p}.77.tmp"],
            "terminal-unjournaled": [f"00/{t}.json"],
            "unknown-attempt": [f"00/{u}.json"],
            "temp": [f"01/.{u2}.4242.tmp"],
            "other-regular": ["01/notes.txt"],
            "too-young": [f"01/{y}.json"],
            "unsafe": [f"02/{j}.json", "02/subdir", "02/pipe"],
        }
        for kind, rels in self.expected.items():
            for rel in rels:
                if kind != "unsafe":
                    put(self.root, rel, old=kind != "too-young")
        (self.root / "02").mkdir(mode=0o700)
        (self.root / f"02/{j}.json").symlink_to(self.outside / "secret.txt")
        (self.root / "02/subdir").mkdir()
        os.mkfifo(self.root / "02/pipe")
        for attempt_id in self.overflow_ids:  # 5 eligible old files, limit 4: overflow
            put(self.root, f"03/{attempt_id}.json")
        # Not shards: never walked even when the window would cover them.
        put(self.root, f".quarantine/00/{uuid7()}.json")

    def run(self, *args: str) -> tuple[int, dict[str, Any]]:
        argv = ["--receipts-dir", str(self.root), "--db", str(self.db), "--json",
                "--shards", "4", "--per-shard", "4", *args]
        return run_main(argv)


def run_main(argv: list[str]) -> tuple[int, dict[str, Any]]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = audit.main(argv)
    return code, json.loads(buf.getvalue()) if buf.getvalue().strip() else {}


def sorted_paths(report: dict[str, Any]) -> dict[str, list[str]]:
    paths = report["paths"]
    return {k: sorted(v) for k, v in paths.items()}


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path)


def test_report_mode_classifies_everything_and_changes_nothing(tree: Tree) -> None:
    before = snapshot(tree.root, tree.outside)
    db_bytes = tree.db.read_bytes()
    code, report = tree.run()
    assert code == 1
    assert snapshot(tree.root, tree.outside) == before
    assert tree.db.read_bytes() == db_bytes
    assert report["shardCursor"] == "00" and report["nextShard"] == "04"
    assert report["root"] == str(tree.root.resolve())
    assert report["shards"] == [
        {"shard": "00", "entries": 4, "overflow": False},  # exactly the limit: no overflow
        {"shard": "01", "entries": 4, "overflow": False},
        {"shard": "02", "entries": 3, "overflow": False},
        {"shard": "03", "entries": 4, "overflow": True},
    ]
    paths = sorted_paths(report)
    overflow = {f"03/{i}.json" for i in tree.overflow_ids}
    listed_overflow = [p for p in paths["unknown-attempt"] if p.startswith("03/")]
    assert len(listed_overflow) == 4 and set(listed_overflow) <= overflow
    paths["unknown-attempt"] = [p for p in paths["unknown-attempt"] if not p.startswith("03/")]
    assert paths == {k: sorted(v) for k, v in tree.expected.items()}
    counts = {k: len(v) for k, v in tree.expected.items()}
    counts["unknown-attempt"] += 4
    assert report["counts"] == counts
    assert report["moved"] == 0 and report["quarantine"] is False
    assert set(report["omitted"].values()) == {0}
    assert not (tree.root / ORPHANS).exists()


def test_quarantine_moves_exactly_the_eligible_files(tree: Tree) -> None:
    eligible = [*tree.expected["terminal-unjournaled"], *tree.expected["unknown-attempt"],
                *tree.expected["temp"], *tree.expected["other-regular"]]
    inodes = {rel: os.lstat(tree.root / rel).st_ino for rel in eligible}
    contents = {rel: (tree.root / rel).read_bytes() for rel in eligible}
    before = snapshot(tree.root, tree.outside)
    db_bytes = tree.db.read_bytes()

    code, report = tree.run("--quarantine")
    assert code == 1
    assert report["moved"] == len(eligible) == 4
    assert sorted(report["movedPaths"]) == sorted(f"{ORPHANS}/{r}" for r in eligible)
    assert report["notMoved"] == []
    for rel in eligible:
        moved = tree.root / ORPHANS / rel
        assert not (tree.root / rel).exists()
        assert os.lstat(moved).st_ino == inodes[rel]  # hard link: the same file, not a copy
        assert moved.read_bytes() == contents[rel]
    for rel in (ORPHANS, f"{ORPHANS}/00", f"{ORPHANS}/01"):
        assert stat.S_IMODE(os.lstat(tree.root / rel).st_mode) == 0o700
    assert sorted(os.listdir(tree.root / ORPHANS)) == ["00", "01"]  # nothing from 03
    # Everything else is exactly as it was.
    after = snapshot(tree.root, tree.outside)
    gone = {str(tree.root / rel) for rel in eligible}
    unchanged = {k: v for k, v in before.items() if k not in gone}
    dirs = {str(tree.root / s) for s in ("00", "01")}  # their sizes changed with the unlinks
    assert {k: v for k, v in after.items() if ORPHANS not in k and k not in dirs} == {
        k: v for k, v in unchanged.items() if k not in dirs}
    assert tree.db.read_bytes() == db_bytes

    # Idempotent: a second run finds nothing more to move and changes nothing.
    settled = snapshot(tree.root, tree.outside)
    code, again = tree.run("--quarantine")
    assert code == 1  # young, unsafe and overflow remain findings
    assert again["moved"] == 0 and again["notMoved"] == []
    assert snapshot(tree.root, tree.outside) == settled
    for kind in ("terminal-unjournaled", "temp", "other-regular"):
        assert again["counts"][kind] == 0


def test_quarantine_never_overwrites(tmp_path: Path) -> None:
    root = tmp_path / "receipts"
    root.mkdir()
    db = make_db(tmp_path / "q.sqlite3", {}, set())
    first, second = aid("00"), aid("00")
    put(root, f"00/{first}.json", b"new evidence")
    put(root, f"{ORPHANS}/00/{first}.json", b"older evidence")
    # A name the audit gave before it shared the receipt store's move: left alone.
    put(root, f"{ORPHANS}/00/{first}.json.1", b"even older")
    put(root, f"{ORPHANS}/00/{first}.1.json", b"older still")
    # An interrupted earlier move: the same inode under both names.
    src = put(root, f"00/{second}.json", b"half moved")
    os.link(src, root / ORPHANS / "00" / f"{second}.json")

    code, report = run_main(["--receipts-dir", str(root), "--db", str(db), "--json",
                             "--quarantine"])
    assert code == 1 and report["moved"] == 2
    q = root / ORPHANS / "00"
    assert (q / f"{first}.json").read_bytes() == b"older evidence"
    assert (q / f"{first}.json.1").read_bytes() == b"even older"
    assert (q / f"{first}.1.json").read_bytes() == b"older still"
    assert (q / f"{first}.2.json").read_bytes() == b"new evidence"  # the receipts' scheme
    assert (q / f"{second}.json").read_bytes() == b"half moved"
    assert os.lstat(q / f"{second}.json").st_nlink == 1
    assert os.listdir(root / "00") == []


def test_cursor_walks_every_shard_once(tmp_path: Path) -> None:
    root = tmp_path / "receipts"
    root.mkdir()
    db = make_db(tmp_path / "q.sqlite3", {}, set())
    for shard in ("00", "7f", "ff"):
        (root / shard).mkdir()
    seen: list[str] = []
    cursor = "00"
    for _ in range(32):
        code, report = run_main(["--receipts-dir", str(root), "--db", str(db), "--json",
                                 "--shard-cursor", cursor])
        assert code == 0
        seen += [s["shard"] for s in report["shards"]]
        cursor = str(report["nextShard"])
    assert cursor == "00"
    assert seen == [f"{i:02x}" for i in range(256)]


def test_window_wraps_from_ff(tmp_path: Path) -> None:
    root = tmp_path / "receipts"
    root.mkdir()
    db = make_db(tmp_path / "q.sqlite3", {}, set())
    code, report = run_main(["--receipts-dir", str(root), "--db", str(db), "--json",
                             "--shard-cursor", "fe", "--shards", "4"])
    assert code == 0 and report["nextShard"] == "02"
    assert [s["shard"] for s in report["shards"]] == ["fe", "ff", "00", "01"]


def test_symlinked_shard_outside_fails_closed(tree: Tree) -> None:
    target = tree.outside / "fake-shard"
    target.mkdir()
    put(target.parent, f"fake-shard/{aid('01')}.json")
    os.rename(tree.root / "01", tree.root / "01.real")
    (tree.root / "01").symlink_to(target)
    before = snapshot(tree.root, tree.outside)
    for extra in ((), ("--quarantine",)):
        code, report = tree.run(*extra)
        assert code == 2 and "outside the receipts root" in str(report["error"])
        assert snapshot(tree.root, tree.outside) == before  # nothing moved, not even in 00


def test_symlinked_shard_inside_fails_closed(tree: Tree) -> None:
    (tree.root / "04").symlink_to(tree.root / "00")
    before = snapshot(tree.root)
    code, report = tree.run("--quarantine", "--shards", "5")
    assert code == 2 and "not a real directory" in str(report["error"])
    assert snapshot(tree.root) == before


def test_symlinked_orphan_quarantine_fails_closed(tree: Tree) -> None:
    escape = tree.outside / "escape"
    escape.mkdir()
    (tree.root / ORPHANS).symlink_to(escape)
    before = snapshot(tree.root, tree.outside)
    for extra in (("--quarantine",), ()):
        code, report = tree.run(*extra)
        assert code == 2 and "outside the receipts root" in str(report["error"])
        assert snapshot(tree.root, tree.outside) == before
    assert os.listdir(escape) == []


def test_symlinked_orphan_shard_dir_fails_closed(tree: Tree) -> None:
    escape = tree.outside / "escape"
    escape.mkdir()
    (tree.root / ORPHANS).mkdir(mode=0o700)
    (tree.root / ORPHANS / "00").symlink_to(escape)
    before = snapshot(tree.root, tree.outside)
    code, _ = tree.run("--quarantine")
    assert code == 2
    assert snapshot(tree.root, tree.outside) == before


def test_database_connection_is_read_only(tree: Tree) -> None:
    db_bytes = tree.db.read_bytes()
    conn = audit.open_readonly(tree.db)
    try:
        assert conn.execute("PRAGMA query_only").fetchone()[0] == 1
        assert conn.execute("PRAGMA trusted_schema").fetchone()[0] == 0
        with pytest.raises(sqlite3.OperationalError):
            conn.execute("INSERT INTO node (singleton, node_id, created_at_ms) VALUES (1, 'x', 1)")
        with pytest.raises(sqlite3.OperationalError):
            conn.execute("PRAGMA query_only=OFF")
            conn.execute("UPDATE run_attempts SET receipt_state = NULL")  # mode=ro holds
    finally:
        conn.close()
    tree.run("--quarantine")
    assert tree.db.read_bytes() == db_bytes


def test_missing_database_is_an_error_and_not_created(tmp_path: Path) -> None:
    root = tmp_path / "receipts"
    root.mkdir()
    with pytest.raises(FileNotFoundError):
        audit.open_readonly(tmp_path / "none.sqlite3")
    code, report = run_main(["--receipts-dir", str(root), "--db", str(tmp_path / "none.sqlite3"),
                             "--json"])
    assert code == 2 and "no database" in str(report["error"])
    assert not (tmp_path / "none.sqlite3").exists()


@pytest.mark.parametrize("argv", [["--shard-cursor", "0A"], ["--shard-cursor", "100"],
                                  ["--shards", "0"], ["--per-shard", "x"], ["--min-age", "10"]])
def test_bad_arguments_exit_2(tmp_path: Path, argv: list[str]) -> None:
    assert audit.main(argv) == 2


def test_limits_are_clamped_with_a_note(tree: Tree) -> None:
    code, report = run_main(["--receipts-dir", str(tree.root), "--db", str(tree.db), "--json",
                             "--shards", "300", "--per-shard", "1000"])
    assert code == 1
    assert len(report["shards"]) == 32 and report["nextShard"] == "20"
    assert report["perShard"] == 64
    assert report["notes"] == ["--shards 300 clamped to 32", "--per-shard 1000 clamped to 64"]


def test_listed_paths_are_bounded(tmp_path: Path) -> None:
    root = tmp_path / "receipts"
    root.mkdir()
    db = make_db(tmp_path / "q.sqlite3", {}, set())
    for n in range(30):
        put(root, f"00/junk-{n:02d}\x1b[2J")  # hostile names never reach the output raw
    code, report = run_main(["--receipts-dir", str(root), "--db", str(db), "--json"])
    assert code == 1
    assert report["counts"]["other-regular"] == 30
    listed = report["paths"]["other-regular"]
    assert len(listed) == 20 and report["omitted"]["other-regular"] == 10
    assert all("\x1b" not in p and p.endswith("\\x1b[2J") for p in listed)


# -- the real CLI ------------------------------------------------------------------


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "qledge", "audit", "receipts", *args],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, **(env or {})})


def test_cli_exit_codes_and_json(tree: Tree, tmp_path: Path) -> None:
    base = ["--receipts-dir", str(tree.root), "--db", str(tree.db), "--json"]
    found = cli(*base, "--shards", "4", "--per-shard", "4")
    assert found.returncode == 1, found.stderr
    assert json.loads(found.stdout)["counts"]["too-young"] == 1

    clean_root = tmp_path / "clean"
    clean_root.mkdir()
    j, a = aid("00"), aid("00")
    db = make_db(tmp_path / "clean.sqlite3", {j: "succeeded", a: "running"}, {j})
    put(clean_root, f"00/{j}.json")
    put(clean_root, f"00/{a}.json")
    clean = cli("--receipts-dir", str(clean_root), "--db", str(db), "--json")
    assert clean.returncode == 0, clean.stderr
    report = json.loads(clean.stdout)
    assert report["counts"]["journaled"] == 1 and report["counts"]["active"] == 1

    missing = cli("--receipts-dir", str(clean_root), "--db", str(tmp_path / "no.db"), "--json")
    assert missing.returncode == 2 and "no database" in missing.stderr

    human = cli("--receipts-dir", str(clean_root), "--db", str(db))
    assert human.returncode == 0 and "nextShard 08" in human.stdout
    assert "secret" not in found.stdout + human.stdout  # never a byte of a receipt


def test_cli_reads_settings_from_env(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "receipts" / "00").mkdir(parents=True)
    (state / "data").mkdir()
    make_db(state / "data" / "qledge.sqlite3", {}, set())
    put(state / "receipts", "00/stray.txt")
    env = {k: v for k, v in os.environ.items() if not k.startswith("QLEDGE_")}
    env["QLEDGE_STATE_DIR"] = str(state)
    proc = subprocess.run([sys.executable, "-m", "qledge", "audit", "receipts", "--json"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["paths"]["other-regular"] == ["00/stray.txt"]
