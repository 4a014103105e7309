"""The panel's fleet views (issue 23, docs/panel.md): the System page's Nodes, a task's
placement through the editor and back, what ran where and why a queued run waits — on
one real node (embedded SQLite) — and, on two real nodes over one real PostgreSQL, a
node frozen beyond its lease: expired on the System page, its log "on n2, which has not
answered since …" instead of an empty log, then its late receipt shown, never applied."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from drills._fleet import (  # noqa: F401  (the two fixtures)
    Fleet,
    cluster_fixture,
    fleet_fixture,
    freeze,
    nodes_view,
    thaw_processes,
    wait_node_state,
)
from drills.conftest import get_run, make_task, trigger, wait_until

from .conftest import FAST, api_task, sign_in, sign_in_at, wait_run
from _appliance import Appliance
from support import free_port

pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def appliance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Appliance]:
    app = Appliance(tmp_path_factory.mktemp("fleetviews") / "state", free_port(),
                    node_name="garage", node_labels="gpio", **FAST)
    try:
        app.start(timeout=60)
        yield app
    finally:
        app.stop()


def test_the_system_page_lists_this_node(page: Page) -> None:
    sign_in(page)
    page.goto("/#/system")
    nodes = page.locator("#sys-nodes")
    expect(nodes).to_have_attribute("data-fleet", "false")
    me = nodes.locator("tr[data-node='garage']")
    expect(me).to_have_attribute("data-state", "live")
    expect(me.locator("td").first).to_contain_text("this node")
    expect(me.locator("td").first).to_contain_text("scheduler")
    expect(me).to_contain_text("live: healthy")
    expect(me.locator("td").nth(2)).to_contain_text("gpio")
    expect(me.locator("td").nth(2)).to_contain_text("node=garage")


def test_a_placement_saved_through_the_form_is_shown_back_and_runs_there(
        appliance: Appliance, page: Page) -> None:
    sign_in(page)
    page.goto("/#/tasks/new")
    page.get_by_label("Name", exact=True).fill("sensor")
    page.get_by_label("Command").fill("echo read")
    page.get_by_label("Run on node").fill("garage")
    page.get_by_label("Required node labels").fill("gpio  arch=" + _arch())
    page.get_by_role("button", name="Create task").click()
    row = page.locator("tr[data-task-name='sensor']")
    expect(row.locator("[data-role='placement']")).to_have_text(
        f"Placement: node garage · labels gpio arch={_arch()}")
    task = next(t for t in appliance.api("GET", "/tasks").json()["items"]
                if t["name"] == "sensor")
    assert task["placement"] == {"node": "garage", "labels": ["gpio", f"arch={_arch()}"]}
    row.get_by_role("link", name="Edit — sensor").click()
    expect(page.get_by_label("Run on node")).to_have_value("garage")
    expect(page.get_by_label("Required node labels")).to_have_value(f"gpio arch={_arch()}")
    # Emptied: any node again.
    page.get_by_label("Run on node").fill("")
    page.get_by_label("Required node labels").fill("")
    page.get_by_role("button", name="Save").click()
    expect(row).to_be_visible()
    expect(row.locator("[data-role='placement']")).to_have_count(0)
    got = appliance.api("GET", f"/tasks/{task['id']}").json()
    assert got["placement"] == {"node": None, "labels": []}
    # What ran where: the attempt's node.
    run_id = appliance.api("POST", f"/tasks/{task['id']}/runs").json()["run"]["id"]
    wait_run(appliance, run_id, {"succeeded"})
    page.goto(f"/#/runs/{run_id}")
    expect(page.locator("td[data-label='Node']")).to_have_text(["garage"])


def test_a_run_placed_on_no_known_node_says_why_it_waits(
        appliance: Appliance, page: Page) -> None:
    task = api_task(appliance, name="elsewhere", command="true",
                    placement={"node": "office", "labels": []})
    run_id = appliance.api("POST", f"/tasks/{task['id']}/runs").json()["run"]["id"]
    sign_in(page)
    page.goto(f"/#/runs/{run_id}")
    expect(page.locator("#run-waiting")).to_have_text("no node is named office")
    expect(page.locator("dt:text-is('Placement') + dd")).to_have_text("node office · labels —")
    page.locator("[data-action='lang']").click()
    expect(page.locator("#run-waiting")).to_have_text("没有名为 office 的节点")
    appliance.api("POST", f"/runs/{run_id}/cancel")


def _arch() -> str:
    return os.uname().machine


# -- two nodes over PostgreSQL: a node frozen beyond its lease ------------------------------


def test_a_frozen_node_its_log_and_its_late_receipt(fleet: Fleet, page: Page) -> None:
    n1 = fleet.start("n1")
    n2 = fleet.start("n2", fenced_tasks="leave")
    gate = fleet.root / "gate"
    command = f"echo started; {fleet.marked('late', 4, gate=gate)}"
    task = make_task(n1, command, placement={"node": "n2", "labels": []})
    run_id = trigger(n1, task["id"])
    wait_until(lambda: get_run(n1, run_id)["status"] == "running", 30, "running on n2")
    sign_in_at(page, n1)
    page.goto(f"http://127.0.0.1:{n1.port}/#/system")
    nodes = page.locator("#sys-nodes")
    expect(nodes).to_have_attribute("data-fleet", "true")
    expect(nodes.locator("tr[data-node='n1'] td").first).to_contain_text("this node")
    expect(nodes.locator("tr[data-node='n2']")).to_contain_text("live: healthy")
    expect(nodes.locator("tr[data-node='n2'] td[data-label='Running']")).to_have_text("1")
    pids = freeze(n2)
    try:
        wait_node_state(n1, "n2", "expired", 30)
        page.locator("[data-action='refresh']").click()
        expect(nodes.locator("tr[data-node='n2']")).to_have_attribute("data-state", "expired")
        expect(nodes.locator("tr[data-node='n2']")).to_contain_text("expired: taken over")
        page.goto(f"http://127.0.0.1:{n1.port}/#/runs/{run_id}")
        expect(page.locator("#log-state")).to_have_text(re.compile(
            r"^the log is on n2, which has not answered since \S"))
        expect(page.locator("#log")).to_have_text("")
        page.locator("[data-action='download']").click()
        expect(page.locator("#log-problem")).to_have_attribute("data-error", "NODE_UNAVAILABLE")
        expect(page.locator("#log-problem")).to_contain_text("the log is on n2")
        expect(page.locator("#run-reason")).to_contain_text("stopped renewing its lease")
        gate.touch()  # the frozen task sees it only once thawed
    finally:
        thaw_processes(pids)
    wait_until(lambda: nodes_view(n1)["n2"]["state"] == "live", 40, "n2 live again")
    wait_until(lambda: get_run(n1, run_id)["attempts"][0]["late_exit_code"] is not None, 40,
               "the late receipt recorded")
    page.reload()
    late = page.locator("[data-late='1']")
    expect(late).to_have_text("Attempt 1: late receipt: exited 4 on n2 after its lease "
                              "expired (not applied).")
    expect(page.locator("td[data-label='Node']")).to_have_text(["n2"])
    expect(page.locator("#run-status")).to_have_text("lost")
    expect(page.locator("li[data-type='attempt.late_receipt']")).to_contain_text(
        "exit 4, not applied")
