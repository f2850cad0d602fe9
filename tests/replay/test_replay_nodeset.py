"""Replay recorded `NodeSetScaleIn` histories against the current code (the determinism guard).

`histories/nodeset/scalein_unscheduled_pod.json` was recorded from the live dev stack (the operator's
integration test, `temporal workflow show -o json`): a pod that never got a Slurm node, condemned by a
scale-in; the workflow cordoned it, found the node absent, confirmed it with a fresh read, deleted the pod and
saw `pod_gone` from the pod watch. A change that alters the commands for this history fails here; guard it with
`workflow.patched()`.
"""

from __future__ import annotations

import json
from pathlib import Path

from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

with workflow.unsafe.imports_passed_through():
    from workflows.nodeset import NodeSetScaleInWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories" / "nodeset").glob("*.json"))


def test_histories_were_recorded() -> None:
    assert [p.stem for p in HISTORIES] == ["scalein_unscheduled_pod"]
    events = [e["eventType"] for e in json.loads(HISTORIES[0].read_text())["events"]]
    assert "EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED" in events and events[-1].endswith("COMPLETED")


async def test_every_history_replays() -> None:
    replayer = Replayer(workflows=[NodeSetScaleInWorkflow], data_converter=pydantic_data_converter)
    for path in HISTORIES:
        history = WorkflowHistory.from_json(f"replay-{path.stem}", path.read_text())
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"
