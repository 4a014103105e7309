"""The worker's own secrecy towards its tasks (docs/security.md).

Tasks run as the worker's uid, and the kernel lets a process of the same uid
read another's /proc/<pid>/environ, mem and fd and ptrace it — unless that
process is not dumpable. The worker holds the admin token (in memory, and in
its initial environment when given as QLEDGE_ADMIN_TOKEN), so `serve` first
makes itself non-dumpable, then blanks the token out of its environment.
"""

from __future__ import annotations

import ctypes
import logging
import os
import posix

log = logging.getLogger("qledge.process")
_PR_SET_DUMPABLE = 4


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def make_nondumpable() -> bool:
    """prctl(PR_SET_DUMPABLE, 0): /proc/<pid>/environ, mem, fd and ptrace are closed to
    other processes of this uid (an exec would reset it; the worker never execs)."""
    libc = _libc()
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        log.warning("could not make the worker non-dumpable: %s",
                    os.strerror(ctypes.get_errno()))
        return False
    return True


def scrub_environ(*names: str) -> None:
    """Remove these variables, blanking their values in place first: the process's
    initial environment block (what /proc/<pid>/environ shows) keeps its bytes after
    an unsetenv, so only overwriting them takes the secret out of it."""
    libc = _libc()
    libc.getenv.restype = ctypes.c_void_p
    libc.strlen.restype = ctypes.c_size_t
    for name in names:
        value = libc.getenv(name.encode())
        if value:
            ctypes.memset(value, 0, libc.strlen(ctypes.c_void_p(value)))
        os.environ.pop(name, None)
        posix.environ.pop(name.encode(), None)  # the interpreter's start-up copy
