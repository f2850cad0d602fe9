"""Replay recorded `NodeSetScheduledUpdate` histories against the current code (the determinism guard).

Recorded from the live dev stack with `temporal workflow show -o json`:

* `window_open_across_operator_kill9_then_nodeset_deleted` (tests/integration/test_scheduled_update.py): the
  reservation made, the window opened, the node list signalled while the pods were replaced, the operator killed
  with -9 and started again inside the window, then the NodeSet deleted: cancelled, the reservation deleted;
* `window_ended` (`python -m tests.replay.record_scheduled_update`): a one-minute window that ran to its end.

A change that alters the commands for any of them fails here; guard it with `workflow.patched()`.
"""

from __future__ import annotations

import json
from pathlib import Path

from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from slinky.clients.temporal import data_converter

with workflow.unsafe.imports_passed_through():
    from workflows.scheduled_update import NodeSetScheduledUpdateWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories" / "scheduled_update").glob("*.json"))


def events(path: Path) -> list[str]:
    return [e["eventType"] for e in json.loads(path.read_text())["events"]]


def test_histories_were_recorded() -> None:
    assert [p.stem for p in HISTORIES] == ["window_ended", "window_open_across_operator_kill9_then_nodeset_deleted"]
    cancelled = events(HISTORIES[1])
    assert "EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED" in cancelled and cancelled[-1].endswith("CANCELED")
    ended = events(HISTORIES[0])
    assert ended.count("EVENT_TYPE_TIMER_FIRED") >= 2 and ended[-1].endswith("COMPLETED")


async def test_every_history_replays() -> None:
    replayer = Replayer(workflows=[NodeSetScheduledUpdateWorkflow], data_converter=data_converter)
    for path in HISTORIES:
        history = WorkflowHistory.from_json(f"replay-{path.stem}", path.read_text())
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"
