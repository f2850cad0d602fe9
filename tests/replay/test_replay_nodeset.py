"""Replay recorded `NodeSetScaleIn` histories against the current code (the determinism guard).

Each was recorded from the live dev stack with `temporal workflow show -o json`:

* `scalein_unscheduled_pod`: a pod that never got a Slurm node; the absent node confirmed by a fresh read;
* `scalein_idle_node`, `scalein_busy_node_waits_for_its_job` (`make demo`): an idle node drained and deleted at
  once; a busy one drained, the poll's signals carrying its job until it ended;
* `scalein_busy_node_across_operator_kill9`, `update_busy_node_after_operator_kill9`
  (tests/integration/test_operator_crash.py): the operator killed with -9 mid-way and started again;
* `scalein_fallback_timer` (`python -m tests.replay.record_nodeset`): no news for three fallback periods, each
  checking the pod (`workflow.patched("fallback-checks-the-pod")`) and reading the node;
* `scalein_busy_node_events_beside` (`make demo`): the Events in their own lane
  (`workflow.patched("events-beside-the-path")`).

The kill -9 histories were recorded before both patches: they guard workflows started by older workers. A change
that alters the commands for any of them fails here; guard it with `workflow.patched()`.
"""

from __future__ import annotations

import json
from pathlib import Path

from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from slinky.clients.temporal import data_converter

with workflow.unsafe.imports_passed_through():
    from workflows.nodeset import NodeSetScaleInWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories" / "nodeset").glob("*.json"))


def test_histories_were_recorded() -> None:
    assert len(HISTORIES) == 7
    for path in HISTORIES:
        events = [e["eventType"] for e in json.loads(path.read_text())["events"]]
        assert "EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED" in events and events[-1].endswith("COMPLETED"), path.name
    fallback = [
        e["eventType"] for e in json.loads((HISTORIES[0].parent / "scalein_fallback_timer.json").read_text())["events"]
    ]
    assert "EVENT_TYPE_TIMER_FIRED" in fallback and "EVENT_TYPE_MARKER_RECORDED" in fallback, "the patch marker"


async def test_every_history_replays() -> None:
    replayer = Replayer(workflows=[NodeSetScaleInWorkflow], data_converter=data_converter)
    for path in HISTORIES:
        history = WorkflowHistory.from_json(f"replay-{path.stem}", path.read_text())
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"
