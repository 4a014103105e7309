"""Helpers for the black-box ql-launch tests: find the binary, start attempts.

The binary for arch A is `$QLTEST_LAUNCHER_<A>` (e.g. QLTEST_LAUNCHER_AARCH64),
or `$QLEDGE_LAUNCHER` for the host arch, or build/launcher/<A>/ql-launch. The
default paths are (re)built with scripts/build-launcher when missing or older
than the C source. A foreign arch runs through qemu-user
(/usr/bin/qemu-aarch64-static, /usr/bin/qemu-arm-static for armv7).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import secrets
import shutil
import signal
import subprocess
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = (REPO / "image/launcher/ql-launch.c", REPO / "image/launcher/Makefile")
ARCHES = ("x86_64", "aarch64", "armv7")
_ALIASES = {"amd64": "x86_64", "arm64": "aarch64", "armv7l": "armv7"}
_QEMU = {"x86_64": "qemu-x86_64", "aarch64": "qemu-aarch64", "armv7": "qemu-arm"}
HOST_ARCH = _ALIASES.get(platform.machine(), platform.machine())
RECEIPT_KEYS = (
    "schemaVersion",
    "runId",
    "attemptId",
    "callbackSequence",
    "token",
    "startedAtMs",
    "finishedAtMs",
    "exitCode",
)


@dataclass(frozen=True)
class Launcher:
    arch: str
    path: Path
    prefix: tuple[str, ...] = ()  # () when native, (qemu,) when emulated

    @property
    def emulated(self) -> bool:
        return bool(self.prefix)

    def argv(self, *args: str) -> list[str]:
        return [*self.prefix, str(self.path), *args]


def _stale(binary: Path) -> bool:
    if not binary.exists():
        return True
    built = binary.stat().st_mtime
    return any(src.stat().st_mtime > built for src in SOURCES)


def locate(arch: str) -> Launcher | str:
    """The launcher for `arch`, or a human-readable reason why there is none."""
    prefix: tuple[str, ...] = ()
    if arch != HOST_ARCH:
        qemu = Path(f"/usr/bin/{_QEMU[arch]}-static")
        if not qemu.exists():
            return f"{qemu} is not installed (apt-get install qemu-user-static)"
        prefix = (str(qemu),)
    override = os.environ.get(f"QLTEST_LAUNCHER_{arch.upper()}") or (
        os.environ.get("QLEDGE_LAUNCHER") if arch == HOST_ARCH else None
    )
    if override:
        path = Path(override)
        if not path.is_file():
            return f"launcher {path} (from the environment) does not exist"
        return Launcher(arch, path, prefix)
    path = REPO / "build/launcher" / arch / "ql-launch"
    if _stale(path):
        build = subprocess.run(
            [str(REPO / "scripts/build-launcher"), arch],
            capture_output=True,
            text=True,
            check=False,
        )
        if build.returncode != 0 or not path.exists():
            tail = (build.stderr or build.stdout).strip().splitlines()[-1:]
            return f"no {arch} launcher and scripts/build-launcher {arch} failed: {tail}"
    return Launcher(arch, path, prefix)


def new_token(length: int = 43) -> str:
    return secrets.token_urlsafe(96)[:length]


@dataclass
class Attempt:
    """One attempt's files: a 0700 receipt shard directory and a log."""

    root: Path
    receipt_dir: Path = field(init=False)
    log: Path = field(init=False)
    run_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    attempt_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    sequence: int = 1
    token: str = field(default_factory=new_token)

    def __post_init__(self) -> None:
        self.receipt_dir = self.root / "receipts" / self.attempt_id[-2:]
        self.receipt_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.log = self.root / "logs" / f"{self.attempt_id}.log"
        self.log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)

    @property
    def receipt(self) -> Path:
        return self.receipt_dir / f"{self.attempt_id}.json"

    def args(self) -> list[str]:
        return [
            "--receipt-dir", str(self.receipt_dir),
            "--run-id", self.run_id,
            "--attempt-id", self.attempt_id,
            "--sequence", str(self.sequence),
        ]  # fmt: skip

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def entries(self) -> list[str]:
        return sorted(os.listdir(self.receipt_dir))


def token_pipe(payload: bytes) -> int:
    """A pipe read end holding `payload` followed by EOF."""
    r, w = os.pipe()
    try:
        os.write(w, payload)
    finally:
        os.close(w)
    return r


def start(
    launcher: Launcher,
    attempt: Attempt,
    command: Sequence[str],
    *,
    token: bytes | None = None,
    argv: list[str] | None = None,
    pass_fds: Sequence[int] = (),
    **popen: object,
) -> subprocess.Popen[bytes]:
    """Start the launcher the way the control plane does (own session, log fds).

    `argv`, when given, replaces the whole argument list (command included);
    "{fd}" in it stands for the token pipe's descriptor number.
    """
    r = token_pipe(attempt.token.encode() if token is None else token)
    try:
        if argv is None:
            args = [*attempt.args(), "--token-fd", str(r), "--", *command]
        else:
            args = [a.replace("{fd}", str(r)) for a in argv]
        with open(attempt.log, "ab") as log:
            options: dict[str, object] = {
                "start_new_session": True, "cwd": attempt.root, "stdin": subprocess.DEVNULL,
                "stdout": log, "stderr": log, **popen}
            return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
                launcher.argv(*args),
                pass_fds=(r, *pass_fds),
                **options,
            )
    finally:
        os.close(r)


def finish(proc: subprocess.Popen[bytes], timeout: float = 30) -> int:
    try:
        return proc.wait(timeout=timeout)
    finally:
        kill_group(proc.pid)


def run(launcher: Launcher, attempt: Attempt, command: Sequence[str], **kw: object) -> int:
    return finish(start(launcher, attempt, command, **kw))  # type: ignore[arg-type]


def kill_group(pgid: int) -> None:
    """Clean up whatever is left in an attempt's process group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def wait_until(predicate: Callable[[], bool], timeout: float = 20, what: str = "") -> None:
    from support import eventually  # here: scripts/_bench imports this module without qledge

    eventually(predicate, timeout=timeout, interval=0.01, what=what or str(predicate))


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


NR_LINK, NR_LINKAT = 86, 265  # x86_64
# Landlock's numbers are the same in every table (x86_64, arm64, arm).
NR_LANDLOCK_CREATE_RULESET, NR_LANDLOCK_ADD_RULE, NR_LANDLOCK_RESTRICT_SELF = 444, 445, 446


def seccomp_errno(failing: dict[int, int]) -> Callable[[], None] | None:
    """A preexec_fn installing a seccomp filter: syscall nr -> the errno it fails with.

    Keyed on the *host* syscall table, so it also holds for a binary running
    under qemu-user. x86_64 hosts only (None otherwise).
    """
    if HOST_ARCH != "x86_64":
        return None
    audit_arch_x86_64 = 0xC000003E
    ld_abs, jeq, ret = 0x20, 0x15, 0x06
    ret_errno, allow = 0x00050000, 0x7FFF0000

    class Filter(ctypes.Structure):
        _fields_ = (
            ("code", ctypes.c_uint16),
            ("jt", ctypes.c_uint8),
            ("jf", ctypes.c_uint8),
            ("k", ctypes.c_uint32),
        )

    class Program(ctypes.Structure):
        _fields_ = (("len", ctypes.c_uint16), ("filter", ctypes.POINTER(Filter)))

    ops = [
        Filter(ld_abs, 0, 0, 4),  # seccomp_data.arch
        Filter(jeq, 0, 2 * len(failing) + 1, audit_arch_x86_64),  # other arch: allow
        Filter(ld_abs, 0, 0, 0),  # seccomp_data.nr
    ]
    for nr, err in failing.items():
        ops += [Filter(jeq, 0, 1, nr), Filter(ret, 0, 0, ret_errno | err)]
    ops.append(Filter(ret, 0, 0, allow))
    code = (Filter * len(ops))(*ops)
    program = Program(len(ops), code)
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_no_new_privs, pr_set_seccomp, seccomp_mode_filter = 38, 22, 2

    def preexec() -> None:
        if libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
        if libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(program)) != 0:
            raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")

    preexec.keep = (code, program)  # type: ignore[attr-defined]
    return preexec


def deny_syscalls(numbers: Sequence[int], err: int) -> Callable[[], None] | None:
    """The x86_64 syscalls `numbers` fail with `err` (e.g. pidfd_open, 434, with
    ENOSYS: a kernel older than 5.3). x86_64 hosts only (None otherwise)."""
    return seccomp_errno(dict.fromkeys(numbers, err))


def deny_hard_links() -> Callable[[], None] | None:
    """link()/linkat() fail with EPERM: a filesystem without hard links, on any
    filesystem, so the launcher's renameat2(RENAME_NOREPLACE) fallback is tested."""
    return seccomp_errno({NR_LINKAT: errno.EPERM, NR_LINK: errno.EPERM})


def landlock_unavailable() -> Callable[[], None] | None:
    """Landlock's syscalls fail with ENOSYS, as on a kernel without it."""
    return seccomp_errno({nr: errno.ENOSYS for nr in (
        NR_LANDLOCK_CREATE_RULESET, NR_LANDLOCK_ADD_RULE, NR_LANDLOCK_RESTRICT_SELF)})


def build_variant(define: str) -> Path | str:
    """A host-arch launcher compiled with one test/bench-only switch (-D`define`,
    image/launcher/README.md) into build/launcher-test/; the shipped build is
    untouched. Returns the binary, or why it could not be built."""
    out = REPO / "build/launcher-test" / HOST_ARCH / f"ql-launch-{define.lower()}"
    if not _stale(out):
        return out
    cc = shutil.which("musl-gcc")
    if cc is None:
        return "musl-gcc is not installed (apt-get install musl-tools)"
    flags = f"-std=c11 -Wall -Wextra -Werror -O2 -D{define}"
    build = subprocess.run(
        ["make", "-s", "-B", "-C", str(REPO / "image/launcher"), f"CC={cc}", f"OUT={out}",
         f"CFLAGS={flags}"], capture_output=True, text=True, check=False)
    if build.returncode != 0 or not out.exists():
        return f"test build -D{define} failed: {(build.stderr or build.stdout).strip()[-300:]}"
    return out
