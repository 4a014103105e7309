"""The power-cut drills' worker: `qledge serve` with a boot id of the drill's choosing.

`python _reboot_worker.py BOOT_ID [CONTROL]` runs exactly what the CLI runs
(settings from QLEDGE_* env, migrations, the receipts probe, Hypercorn), but
passes the test-only `boot_id` so that a "reboot" of the drill is one to the
recovery code. CONTROL breaks the product on purpose, for the negative
controls the drill must catch:

* `reaper-early`: consumed receipts are deleted at once, before the fsync
  that makes their results durable (docs/storage.md);
* `deferred-step1`: spawn step 1 commits without its fsync (both doors: a
  trigger that finds a free slot, and the dispatcher).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "app"))


def _reaper_early() -> None:
    from qledge.runtime.reaper import Reaper

    def remove_at_once(self: Reaper, seq: int, attempt_ids: list[str], since_ms: int) -> None:
        self._remove_all(attempt_ids)

    Reaper.remove_after = remove_at_once  # type: ignore[method-assign]


def _deferred_step1() -> None:
    from qledge import ids, operations
    from qledge.clock import now_ms
    from qledge.db import runs, tasks
    from qledge.model import Concurrency, Trigger
    from qledge.operations import tasks as task_ops
    from qledge.runtime.dispatcher import Dispatcher
    from qledge.runtime.lifecycle import Runtime

    async def start_run(rt: Runtime, task_id: str, how: Trigger) -> operations.Started:
        async with rt.db.write(durable=False) as tx:  # the defect
            task = await tasks.get_task(tx, task_id)
            if task.concurrency is Concurrency.FORBID:
                raise AssertionError("drills use concurrency: allow")
            run = await runs.create_run(tx, ids.uuid7(), task.id, how, now_ms())
            prepared = await rt.dispatcher.admit_new(tx, run, task)
        if prepared is not None:
            rt.dispatcher.launch_soon(prepared)
        else:
            rt.kick()
        return operations.Started(run=run,
                                  outcome="started" if prepared is not None else "queued")

    async def dispatch_once(self: Dispatcher) -> int:
        if await self.may_spawn() is not None:
            return 0
        async with self.db.read() as tx:
            queued = await runs.queued_runs(tx, self.limit * 2, now_ms())
        started = 0
        for run in queued:
            async with self.db.write(durable=False) as tx:  # the defect
                if not await self._slot_free(tx):
                    return started
                prepared = await self.executor.prepare_in(tx, run)
            if prepared is None:
                continue
            result = await self.executor.launch(prepared)
            if result is not None:
                self.on_spawned(result)
                started += 1
        return started

    # The API's door (http/runs.py) calls the package's name; operations.trigger
    # (operations/tasks.py) calls its module's: both go through the defect.
    operations.start_run = task_ops.start_run = start_run  # type: ignore[assignment]
    Dispatcher.dispatch_once = dispatch_once  # type: ignore[method-assign]


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
