"""Replay recorded `ControllerReconfigure` histories against the current code (the determinism guard).

Recorded from the live dev stack (tests/integration/test_managed_cluster.py) with `temporal workflow show -o json`:

* `applied_new_pod`: an extraConf change while a job ran, restart mode: a new slurmctld pod, verified;
* `applied_across_operator_kill9`: the same with the operator killed -9 mid-way (two worker identities, an
  activity attempt 2): the restarted operator's worker finished it;
* `rejected_by_the_parser`: `NoSuchSlurmKey=1` refused by Slurm's parser: the last good files kept, marked rejected;
* `rolled_back_pod_on_the_old_hash`: the new pod never showed the new hash in time (the reconciler raced it,
  since fixed): rolled back to the last good config;
* `controller_deleted_gone`: the Controller deleted (with its namespace) while the workflow verified.

A change that alters the commands for any of them fails here; guard it with `workflow.patched()`.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from slinky.clients.temporal import data_converter

with workflow.unsafe.imports_passed_through():
    from workflows.reconfigure import ControllerReconfigureWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories" / "reconfigure").glob("*.json"))


def _outcome(path: Path) -> str:
    last = json.loads(path.read_text())["events"][-1]
    data = last["workflowExecutionCompletedEventAttributes"]["result"]["payloads"][0]["data"]
    return str(json.loads(base64.b64decode(data))["outcome"])


def test_histories_cover_every_outcome() -> None:
    outcomes = {path.stem: _outcome(path) for path in HISTORIES}
    assert outcomes == {
        "applied_across_operator_kill9": "applied",
        "applied_new_pod": "applied",
        "controller_deleted_gone": "gone",
        "rejected_by_the_parser": "rejected",
        "rolled_back_pod_on_the_old_hash": "rolled-back",
    }


async def test_every_history_replays() -> None:
    replayer = Replayer(workflows=[ControllerReconfigureWorkflow], data_converter=data_converter)
    for path in HISTORIES:
        history = WorkflowHistory.from_json(f"replay-{path.stem}", path.read_text())
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"
