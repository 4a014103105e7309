"""A bounded listing of the scripts folder (depth, entries per folder, total)."""

from __future__ import annotations

import os

import msgspec

from ..fs import confined as fs

# Like QingLong's tree: dependencies and lock files are noise in a scripts folder.
HIDDEN = frozenset({"node_modules", ".git", ".pnpm", "pnpm-lock.yaml", "yarn.lock",
                    "package-lock.json"})


class Node(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    name: str
    path: str
    # file | directory | symlink | fifo | socket | char_device | block_device
    type: str
    size: int | None = None
    mtime_ms: int = 0
    # A folder's entries; None when the depth bound stopped the walk above them.
    children: list[Node] | None = None
    truncated: bool = False  # this folder has more entries than were listed


def hidden(name: str) -> bool:
    return name in HIDDEN or name.startswith(fs.TEMP_PREFIX)


def _addressable(name: str) -> bool:
    """A name the API can take back: valid UTF-8 without control characters."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return not any(ord(c) < 0x20 or ord(c) == 0x7F for c in name)


class _Budget:
    def __init__(self, total: int) -> None:
        self.left = total
        self.truncated = False


def _order(node: Node) -> tuple[bool, str, str]:
    return node.type != "directory", node.name.casefold(), node.name


def _list(dfd: int, rel: str, levels: int, per_folder: int, budget: _Budget
          ) -> tuple[list[Node], bool]:
    taken: list[tuple[str, os.stat_result]] = []
    more = False
    with os.scandir(dfd) as it:
        for entry in it:
            if hidden(entry.name):
                continue
            if not _addressable(entry.name):
                more = True
                continue
            if len(taken) >= per_folder or budget.left <= 0:
                more = True
                break
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            taken.append((entry.name, st))
            budget.left -= 1
    if more:
        budget.truncated = True
    nodes: list[Node] = []
    for name, st in taken:
        path = f"{rel}/{name}" if rel else name
        what = fs.kind(st.st_mode)
        mtime = st.st_mtime_ns // 1_000_000
        if what != "directory":
            nodes.append(Node(name=name, path=path, type=what, mtime_ms=mtime,
                              size=st.st_size if what == "file" else None))
            continue
        children: list[Node] | None = None
        cut = False
        if levels > 1:
            try:
                sub = os.open(name, fs.DIR_FLAGS, dir_fd=dfd)
            except OSError:
                sub = -1  # gone or swapped for a symlink meanwhile: not listed
            if sub >= 0:
                try:
                    children, cut = _list(sub, path, levels - 1, per_folder, budget)
                finally:
                    os.close(sub)
        nodes.append(Node(name=name, path=path, type=what, mtime_ms=mtime,
                          children=children, truncated=cut))
    nodes.sort(key=_order)
    return nodes, more


def walk(dfd: int, rel: str, levels: int, per_folder: int, total: int
         ) -> tuple[list[Node], bool]:
    """The entries under the folder `dfd` (at `rel`), `levels` deep; (nodes, truncated)
    where truncated says some folder had more entries than the bounds allowed."""
    budget = _Budget(total)
    nodes, _ = _list(dfd, rel, levels, per_folder, budget)
    return nodes, budget.truncated
