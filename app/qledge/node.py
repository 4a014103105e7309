"""This node as the fleet sees it: name, labels, epoch, and where placement allows it.

Pure values and rules (docs/fleet.md). The embedded SQLite is a fleet of one: the
node has a name and labels all the same (placement means the same on one node),
but no lease and no epoch (`epoch` None). On PostgreSQL, runtime/fleet.py owns the
lease and sets `epoch` from the `nodes` row; `fenced` is set when a heartbeat
finds the epoch taken over, until the node registers again.
"""

from __future__ import annotations

import os
import re
import socket

import msgspec

NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=/:-]{0,62}")


class NodeError(ValueError):
    pass


class Node(msgspec.Struct, kw_only=True):
    name: str
    labels: tuple[str, ...]
    url: str = ""
    node_id: str = ""
    fleet: bool = False
    epoch: int | None = None
    fenced: bool = False


def default_name() -> str:
    """The host name, lowered to a node name (a container's is its short id)."""
    raw = socket.gethostname().split(".")[0].lower()
    name = re.sub(r"[^a-z0-9-]+", "-", raw).strip("-")[:63].strip("-")
    return name or "node"


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise NodeError(f"node name {name!r} must be 1-63 of [a-z0-9-], not starting or"
                        " ending with '-'")
    return name


def check_labels(labels: list[str] | tuple[str, ...]) -> list[str]:
    """A placement's or a node's labels: each a short token, no duplicates kept."""
    out: list[str] = []
    for label in labels:
        if not LABEL.fullmatch(label):
            raise NodeError(f"label {label!r} must be 1-63 of [A-Za-z0-9._=/:-]")
        if label not in out:
            out.append(label)
    if len(out) > 32:
        raise NodeError("at most 32 labels")
    return out


def labels_of(name: str, extra: str) -> tuple[str, ...]:
    """A node's labels: the implicit `arch=<uname -m>` and `node=<name>`, then its own."""
    return tuple(check_labels([f"arch={os.uname().machine}", f"node={name}", *extra.split()]))


def allows(node: Node, placement_node: str | None, placement_labels: list[str]) -> bool:
    """May a run with this placement execute on this node?"""
    if placement_node is not None and placement_node != node.name:
        return False
    return all(label in node.labels for label in placement_labels)
