"""Task isolation (docs/security.md): what a task may not reach, and whether it holds.

Tasks run as the worker's uid (the image has no capabilities to switch uids),
so the files are kept from them by Landlock: the launcher confines each
command away from the data dir (database, admin token), the receipts, the
logs (a task writes its own through an inherited descriptor) and the
directory of the admin token file (`--deny DIR` each). Where the kernel has
no Landlock, `task_isolation` decides: `auto` runs tasks unconfined and says
so (`/api/v1/system`, a warning at start), `required` starts nothing (each
run ends `blocked` / `TASK_ISOLATION_UNAVAILABLE`), `off` never confines.

A control plane run as root (scripts/run-local from a root shell, `qledge serve`
bare on a homelab) runs its tasks as root: the launcher then takes every capability
away from a confined command (CAP_SYS_PTRACE would let it read other processes'
/proc/<pid>/environ and maps through Landlock), but a uid-0 task still owns root's
files outside the protected directories — no boundary against the host. That is
said loudly at start and in `/api/v1/system` (`as_root`); the image never runs as
root.
"""

from __future__ import annotations

import ctypes
import logging
import os
from pathlib import Path

import msgspec

from ..paths import RootError
from ..settings import Settings

log = logging.getLogger("qledge.isolation")
_LANDLOCK_CREATE_RULESET = 444  # the same number in every syscall table we build for
_CREATE_RULESET_VERSION = 1


def landlock_abi() -> tuple[int, str | None]:
    """(the kernel's Landlock ABI, None), or (0, why it is unavailable)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(ctypes.c_long(_LANDLOCK_CREATE_RULESET), None, ctypes.c_size_t(0),
                       ctypes.c_uint32(_CREATE_RULESET_VERSION))
    if abi < 0:
        return 0, f"Landlock unavailable: {os.strerror(ctypes.get_errno())}"
    return int(abi), None


def protected_dirs(settings: Settings) -> list[Path]:
    """Canonical directories no task may open anything beneath."""
    dirs = [settings.data_path, settings.receipts_path, settings.logs_path]
    if settings.admin_token_file:
        dirs.append(Path(settings.admin_token_file).absolute().parent)
    out: list[Path] = []
    for d in dirs:
        real = d.resolve()
        if real not in out:
            out.append(real)
    return out


def check_layout(settings: Settings) -> None:
    """Refuse a layout where confinement would take the tasks' own directory away."""
    if settings.task_isolation == "off":
        return
    work = settings.work_path.resolve()
    for d in protected_dirs(settings):
        if d == Path("/"):
            raise RootError("a protected directory is / (where is QLEDGE_ADMIN_TOKEN_FILE?)")
        if work == d or d in work.parents:
            raise RootError(f"the work dir {work} is inside {d}, which tasks may not reach "
                            "(data, receipts, logs, the admin token file's directory)")


class Isolation(msgspec.Struct, frozen=True, kw_only=True):
    mode: str
    landlock_abi: int | None
    effective: bool
    reason: str | None
    protected: tuple[str, ...]
    # Tasks run as root (the worker's uid): confined ones without capabilities.
    as_root: bool = False

    @property
    def refuses(self) -> bool:
        """`required` and not enforceable: no task may start."""
        return self.mode == "required" and not self.effective

    def launcher_args(self) -> list[str]:
        if not self.effective:
            return []
        deny = [arg for d in self.protected for arg in ("--deny", d)]
        return [*deny, "--isolation", "required" if self.mode == "required" else "auto"]

    def report(self) -> dict[str, object]:
        return {"mode": self.mode, "landlock_abi": self.landlock_abi,
                "effective": self.effective, "reason": self.reason,
                "protected": list(self.protected), "as_root": self.as_root}


ROOT_WARNING = (
    "the control plane runs as root, so its tasks do: a task can write root's files"
    " outside the protected directories (/etc and the like) and signal every root"
    " process; run qledge as an unprivileged user (the image does, docs/security.md)")


def decide(settings: Settings, abi: tuple[int, str | None] | None = None) -> Isolation:
    mode = settings.task_isolation
    protected = tuple(str(d) for d in protected_dirs(settings))
    as_root = os.geteuid() == 0  # the tasks' uid is the worker's
    if mode == "off":
        return _said(Isolation(mode=mode, landlock_abi=None, effective=False,
                               reason="task_isolation is off", protected=protected,
                               as_root=as_root))
    version, why = landlock_abi() if abi is None else abi
    if why is not None:
        if mode == "required":
            log.error("task isolation is required but %s: no task will start", why)
        else:
            log.warning("tasks run unconfined (they can read the database and the admin "
                        "token): %s", why)
    return _said(Isolation(mode=mode, landlock_abi=version or None, effective=why is None,
                           reason=why, protected=protected, as_root=as_root))


def _said(iso: Isolation) -> Isolation:
    """The root warning, loud at every start: what holds then is in docs/security.md."""
    if iso.as_root and not iso.refuses:
        log.warning("%s; %s", ROOT_WARNING,
                    "confined tasks keep no capability" if iso.effective
                    else "tasks are not confined and keep every capability")
    return iso
