"""Which Debian packages the runtime image can purge: everything the roots don't need.

    python3 slim.py ROOT... > purge-list

Reads the installed packages from `dpkg-query` and prints, one per line, every
installed package outside the closure of the roots under Depends and Pre-Depends
(an alternative `a | b` keeps the first one installed; a virtual name keeps its
installed providers). `dpkg` itself is never printed: the caller removes its
programs last and keeps its status file, so image scanners still read what is
installed, and it is exact.

Why a closure and not a fixed list: an extra package a user builds in
(`--build-arg EXTRA_PACKAGES=…`) may need something on the list (git needs perl);
the closure keeps it, where a fixed purge list would break it silently.
Runs on the target (under qemu for a foreign one) with the target's python3.
"""

from __future__ import annotations

import subprocess
import sys

# Only maintainer scripts use debconf (and through it perl); with apt and dpkg's
# programs gone nothing runs them again, so a dependency on it is not followed.
DEBCONF = frozenset({"debconf", "debconf-2.0", "cdebconf"})
FORMAT = "${Package}\t${Status}\t${Depends}\t${Pre-Depends}\t${Provides}\n"


def installed() -> dict[str, list[list[str]]]:
    """Installed package -> its dependencies, each a list of alternatives."""
    out = subprocess.run(["dpkg-query", "-W", "-f", FORMAT], check=True,
                         capture_output=True, text=True).stdout
    deps: dict[str, list[list[str]]] = {}
    provides: dict[str, list[str]] = {}
    for line in out.splitlines():
        name, status, depends, pre, prov = line.split("\t")
        if not status.endswith(" installed"):
            continue
        deps[name] = [alternatives(group) for group in split(depends) + split(pre)]
        for virtual in split(prov):
            provides.setdefault(bare(virtual), []).append(name)
    # A virtual name stands for its installed providers.
    for name, groups in deps.items():
        deps[name] = [[p for alt in group for p in ([alt] if alt in deps
                                                     else provides.get(alt, []))]
                      for group in groups]
    return deps


def split(field: str) -> list[str]:
    return [part.strip() for part in field.split(",") if part.strip()]


def bare(spec: str) -> str:
    """`libc6:amd64 (>= 2.34)` -> `libc6`."""
    return spec.split("(")[0].strip().split(":")[0]


def alternatives(group: str) -> list[str]:
    return [bare(alt) for alt in group.split("|")]


def closure(deps: dict[str, list[list[str]]], roots: list[str]) -> set[str]:
    missing = [r for r in roots if r not in deps]
    if missing:
        sys.exit(f"slim.py: roots not installed: {' '.join(missing)}")
    keep: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep.add(name)
        for group in deps[name]:
            if any(alt in DEBCONF for alt in group):
                continue
            chosen = next((alt for alt in group if alt in deps), None)
            if chosen is None:
                # Nothing installed satisfies it: dpkg would have said so already.
                continue
            todo.append(chosen)
    return keep


def main() -> None:
    deps = installed()
    keep = closure(deps, sys.argv[1:])
    # debconf and perl last: the other packages' removal scripts still use them.
    last = [n for n in ("debconf", "perl-base") if n in deps and n not in keep]
    for name in sorted(set(deps) - keep - {"dpkg"} - set(last)) + last:
        print(name)


if __name__ == "__main__":
    main()
