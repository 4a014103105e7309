"""The notify helpers shipped into the scripts folder (docs/notifications.md).

`notify.py` (`send(title, content)`) and `sendNotify.js` (`sendNotify(title,
content)`) are written on the first start that finds them not yet shipped, and
never over a file of that name: a user's own helper stays. A marker outside the
scripts tree remembers what was shipped, so a helper the user deleted stays
deleted.
"""

from __future__ import annotations

import os
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "shipped"
FILES = ("notify.py", "sendNotify.js")
MARKER = ".qledge-shipped"


def ship(scripts_dir: Path, work_dir: Path) -> list[str]:
    """Write the helpers not shipped before; returns the names written."""
    marker = work_dir / MARKER
    try:
        done = set(marker.read_text().split())
    except FileNotFoundError:
        done = set()
    written = []
    for name in FILES:
        if name in done:
            continue
        try:
            fd = os.open(scripts_dir / name,
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            done.add(name)  # the user's own file: theirs for good
            continue
        with os.fdopen(fd, "wb") as f:
            f.write((SOURCE / name).read_bytes())
            os.fsync(f.fileno())
        written.append(name)
        done.add(name)
    tmp = work_dir / f"{MARKER}.tmp"
    tmp.write_text("\n".join(sorted(done)) + "\n")
    os.replace(tmp, marker)
    return written
