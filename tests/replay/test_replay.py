"""Replay recorded ``WorkloadWorkflow`` histories against the current workflow code (the determinism guard).

The histories in ``histories/`` were recorded from the live dev stack (``temporal workflow show -o json``):
a pod that ran to completion and a pod deleted while Running. A code change that alters the commands the
workflow issues for an existing history fails here; guard such a change with ``workflow.patched()``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

with workflow.unsafe.imports_passed_through():
    from slinky.models.workload import PodStateResult, WorkloadInput
    from workflows import retry
    from workflows.workload import WorkloadWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(f"replay-{path.stem}", path.read_text())


def test_histories_were_recorded() -> None:
    names = {p.stem for p in HISTORIES}
    assert {"pod_happy_path", "pod_deleted_while_running"} <= names


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_recorded_history_replays_on_the_current_workflow(path: Path) -> None:
    replayer = Replayer(workflows=[WorkloadWorkflow], data_converter=pydantic_data_converter)
    await replayer.replay_workflow(load(path))


async def test_all_histories_replay_in_one_pass() -> None:
    replayer = Replayer(workflows=[WorkloadWorkflow], data_converter=pydantic_data_converter)

    async def histories() -> AsyncIterator[WorkflowHistory]:
        for path in HISTORIES:
            yield load(path)

    results = await replayer.replay_workflows(histories(), raise_on_replay_failure=False)
    assert {run_id: str(err) for run_id, err in results.replay_failures.items()} == {}


@workflow.defn(name="WorkloadWorkflow")
class PausedWorkloadWorkflow(WorkloadWorkflow):
    """A deliberately incompatible edit: a durable pause before the lifecycle starts (a new command)."""

    @workflow.run
    async def run(self, inp: WorkloadInput) -> str:
        await workflow.sleep(timedelta(seconds=1))
        return await super().run(inp)


@workflow.defn(name="WorkloadWorkflow")
class ExtraCallWorkloadWorkflow(WorkloadWorkflow):
    """A deliberately incompatible edit: one more local activity before the lifecycle starts.

    The SDK matches local-activity markers by sequence number, so this one is caught when the recorded
    results no longer fit the calls (a decoding failure), not as a command mismatch.
    """

    @workflow.run
    async def run(self, inp: WorkloadInput) -> str:
        await workflow.execute_local_activity(
            "get_pod_state", inp.pod, result_type=PodStateResult, start_to_close_timeout=retry.CALL_TIMEOUT
        )
        return await super().run(inp)


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_a_new_command_fails_the_replay_as_nondeterminism(path: Path) -> None:
    """Proof that the replay test can fail: the changed workflow must not replay a recorded history."""
    replayer = Replayer(workflows=[PausedWorkloadWorkflow], data_converter=pydantic_data_converter)
    with pytest.raises(NondeterminismError):
        await replayer.replay_workflow(load(path))


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_an_extra_local_activity_fails_the_replay(path: Path) -> None:
    replayer = Replayer(workflows=[ExtraCallWorkloadWorkflow], data_converter=pydantic_data_converter)
    with pytest.raises(RuntimeError, match="Failed decoding arguments"):
        await replayer.replay_workflow(load(path))
