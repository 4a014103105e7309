"""The power-cut drills' worker: `qledge serve` with a boot id of the drill's choosing.

`python _reboot_worker.py BOOT_ID [CONTROL]` runs exactly what the CLI runs
(settings from QLEDGE_* env, migrations, the receipts probe, Hypercorn), but
passes the test-only `boot_id` so that a "reboot" of the drill is one to the
recovery code. CONTROL breaks the product on purpose, for the negative
controls the drill must catch:

* `reaper-early`: consumed receipts are deleted at once, before the fsync
  that makes their results durable (docs/storage.md);
* `deferred-step1`: spawn step 1 commits without its fsync at both doors (a
  trigger that finds a free slot, and the dispatcher): the product's own code
  with the failpoint `spawn.step1.deferred` armed, not a copy of it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "app"))


def _reaper_early() -> None:
    from qledge.runtime.reaper import Reaper

    def remove_at_once(self: Reaper, seq: int, attempt_ids: list[str], since_ms: int) -> None:
        self._remove_all(attempt_ids)

    Reaper.remove_after = remove_at_once  # type: ignore[method-assign]


def _deferred_step1() -> None:
    from qledge import failpoints

    armed = os.environ.get("QLTEST_FAILPOINTS", "")
    failpoints.configure(f"{armed},{failpoints.STEP1_DEFERRED}=on")


CONTROLS = {"reaper-early": _reaper_early, "deferred-step1": _deferred_step1}


def main(argv: list[str]) -> int:
    from qledge.cli.output import setup_logging
    from qledge.cli.serve import serve

    boot_id = argv[0]
    for control in argv[1:]:
        CONTROLS[control]()
    setup_logging()
    return serve(boot_id=boot_id)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
