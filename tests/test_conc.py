"""`task … conc`: the parent's transitions (pure) — its result is its children's."""

from __future__ import annotations

import pytest

from qledge import transitions
from qledge.model import CancelReason, Run, RunStatus, Trigger
from qledge.transitions import InvalidTransition

pytestmark = pytest.mark.pg  # also run on PostgreSQL: scripts/test's QLTEST_BACKEND=pg pass


def _run(status: RunStatus, exit_code: int | None = None,
         cancel_reason: CancelReason | None = None) -> Run:
    return Run(id="r", task_id="t", trigger=Trigger.API, status=status, version=3,
               event_seq=2, cancel_reason=cancel_reason,
               cancel_requested_at_ms=None if cancel_reason is None else 7,
               created_at_ms=1, started_at_ms=5, finished_at_ms=None, exit_code=exit_code,
               reason_code=None)


S, F = RunStatus.SUCCEEDED, RunStatus.FAILED


def test_fan_out_starts_the_parent_without_an_attempt() -> None:
    tr = transitions.fan_out(_run(RunStatus.QUEUED), 3, 10)
    assert (tr.run.status, tr.run.started_at_ms, tr.attempt) == (RunStatus.RUNNING, 10, None)
    assert [(e.type, e.data) for e in tr.events] == [("run.started", {"children": 3})]
    with pytest.raises(InvalidTransition):
        transitions.fan_out(_run(RunStatus.RUNNING), 3, 10)


@pytest.mark.parametrize(("kids", "cancel", "status", "code"), [
    ([(S, 0), (S, 0)], None, S, 0),
    ([(S, 0), (F, 4), (F, 9)], None, F, 4),
    ([(S, 0), (RunStatus.LOST, None)], None, F, None),
    ([(S, 0), (S, 0)], CancelReason.USER, S, 0),  # the children's receipts decide
    ([(S, 0), (RunStatus.CANCELLED, None)], CancelReason.USER, RunStatus.CANCELLED, None),
    ([(RunStatus.TIMED_OUT, None)], CancelReason.TIMEOUT, RunStatus.TIMED_OUT, None),
])
def test_children_done(kids: list[tuple[RunStatus, int | None]], cancel: CancelReason | None,
                       status: RunStatus, code: int | None) -> None:
    parent = _run(RunStatus.RUNNING, cancel_reason=cancel)
    children = [_run(s, c) for s, c in kids]
    tr = transitions.children_done(parent, children, 20)
    assert (tr.run.status, tr.run.exit_code, tr.run.reason_code) == (status, code,
                                                                       "CONC_CHILDREN")
    assert tr.events[0].type == "run.finished"
    assert tr.events[0].data["children"] == len(kids)
    assert tr.events[0].data["children_succeeded"] == sum(s is S for s, _ in kids)


def test_children_done_waits_for_every_child() -> None:
    with pytest.raises(InvalidTransition, match="CHILDREN_ACTIVE"):
        transitions.children_done(_run(RunStatus.RUNNING), [_run(S, 0),
                                                            _run(RunStatus.RUNNING)], 20)
