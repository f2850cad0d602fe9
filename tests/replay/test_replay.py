"""Replay recorded ``WorkloadWorkflow`` histories against the current workflow code (the determinism guard).

The histories in ``histories/`` were recorded from the live dev stack by ``record.sh``
(``temporal workflow show -o json``): a pod that ran to completion, a pod deleted while Running, and a PodGroup
gang of two (gathered, one job, one member per node, both Succeeded). They were recorded with the current code
(binding, labelling and Events in one activity, session 11; one re-check timer kept across signals, session 15);
as ``timer_per_wait_*`` with a re-check timer started at each wait (session 14); as ``unfolded_*`` with immediate
allocation and separate activities (session 4); and as ``queued_*`` from the earlier code that always queued the
job and waited for its start signal: a workflow started by an older worker must still replay on the new code. The
``lost_*`` histories were recorded by ``record_crash.py`` after runs of the slurmctld crash test: a job lost before
it started (resubmitted), and a job lost while its pod ran (re-adopted at once on its node, or queued for it). A
code change that alters the commands the workflow issues for an existing history fails here; guard such a change
with ``workflow.patched()``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from slinky.clients.temporal import data_converter

with workflow.unsafe.imports_passed_through():
    from slinky.bridge.models.workload import PodsInput, PodStatesResult, WorkloadInput
    from workflows import retry
    from workflows.workload import WorkloadWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(f"replay-{path.stem}", path.read_text())


def calls(path: Path) -> list[str]:
    """The local activities (by name) and signals (``signal:kind``) of a recorded history, in order."""
    found = []
    for event in json.loads(path.read_text())["events"]:
        if event["eventType"] == "EVENT_TYPE_MARKER_RECORDED":
            details = event["markerRecordedEventAttributes"]["details"]
            if "data" not in details:
                continue  # a workflow.patched() marker
            data = details["data"]["payloads"][0]["data"]
            found.append(json.loads(base64.b64decode(data))["activity_type"])
        elif event["eventType"] == "EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED":
            attributes = event["workflowExecutionSignaledEventAttributes"]
            data = json.loads(base64.b64decode(attributes["input"]["payloads"][0]["data"]))
            items = data if isinstance(data, list) else [data]  # pod_events: a burst's events in one signal
            found.append(f"{attributes['signalName']}:{','.join(str(d.get('kind') or d.get('state')) for d in items)}")
    return found


KINDS = ("pod_happy_path", "pod_deleted_while_running", "podgroup_gang_of_two")
LOST = ("lost_pending_resubmitted", "lost_running_readopted", "lost_running_readopt_queued")
RESTART = ("podgroup_gang_restart_ended", "podgroup_gang_restart_next")
OLDER = ("timer_per_wait_", "unfolded_", "queued_")
"""Histories of older code: a re-check timer started at every wait and cancelled by the next signal
(``timer_per_wait_``, session 14), separate bind, label and finalizer activities (``unfolded_``, session 10), and
before that the job always queued (``queued_``)."""


def test_histories_were_recorded() -> None:
    names = {p.stem for p in HISTORIES}
    assert names == {*KINDS, *(f"{prefix}{kind}" for prefix in OLDER for kind in KINDS), *LOST, *RESTART}


def _signals(path: Path) -> list[dict[str, object]]:
    return [
        json.loads(base64.b64decode(e["workflowExecutionSignaledEventAttributes"]["input"]["payloads"][0]["data"]))
        for e in json.loads(path.read_text())["events"]
        if e["eventType"] == "EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED"
    ]


@pytest.mark.parametrize("name", LOST)
def test_crash_histories_show_the_recovery_their_names_say(name: str) -> None:
    """Each lost its job in a real kill -9 of slurmctld (the watcher's VANISHED carries the cause), kept its pod
    (no delete_pods) and submitted once more: before binding (resubmitted) or after it (re-adopted)."""
    path = HISTORIES[0].parent / f"{name}.json"
    found = calls(path)
    assert "delete_pods" not in found and found.count("submit_placeholder_job") == 2
    lost = [s for s in _signals(path) if s.get("state") == "VANISHED"]
    assert lost and lost[0]["cause"] == "controller restart"
    second = found.index("submit_placeholder_job", found.index("submit_placeholder_job") + 1)
    assert found.index("job_event:VANISHED") < second
    assert found.index("remove_finalizers") > second
    if name == "lost_pending_resubmitted":
        assert second < found.index("bind_pods")
    else:
        assert found.index("bind_pods") < found.index("job_event:VANISHED")


@pytest.mark.parametrize(
    "prefix", ["", "timer_per_wait_", "unfolded_", "queued_"], ids=["folded", "timer-per-wait", "unfolded", "queued"]
)
def test_histories_show_what_their_names_say(prefix: str) -> None:
    """The gang gathered its second member and bound both. The ``queued_`` histories (recorded before immediate
    allocation) waited for the job's start signal and labelled before binding; the others got their nodes from the
    submit and bound at once: the ``unfolded_`` ones then labelled in an activity of its own, the current ones bind,
    label and tell in one (place_pods) and remove the finalizers and tell in one (release_pods)."""
    histories = {kind: calls(HISTORIES[0].parent / f"{prefix}{kind}.json") for kind in KINDS}
    folded = prefix in ("", "timer_per_wait_")
    bind, release = ("place_pods", "release_pods") if folded else ("bind_pods", "remove_finalizers")
    for found in histories.values():
        assert {"build_job_spec", "submit_placeholder_job", bind, release} <= set(found)
        assert found.index("cancel_job") < found.index(release)
        if prefix == "queued_":
            assert found.index("label_pods") < found.index("job_event:RUNNING") < found.index("bind_pods")
        elif not folded:
            assert "job_event:RUNNING" not in found
            assert found.index("submit_placeholder_job") < found.index("bind_pods") < found.index("label_pods")
        else:
            assert "job_event:RUNNING" not in found
            assert not {"bind_pods", "label_pods", "remove_finalizers", "record_event"} & set(found)
            assert found.index("submit_placeholder_job") < found.index("place_pods")
    deleted = histories["pod_deleted_while_running"]
    assert deleted.index(bind) < deleted.index("pod_event:deleting") < deleted.index("pod_event:gone")
    assert deleted.index("pod_event:gone") < deleted.index("cancel_job")
    gang = histories["podgroup_gang_of_two"]
    assert gang.count("pod_event:added") == 2 and gang.count("submit_placeholder_job") == 1
    assert gang.index("pod_event:added", 1) < gang.index("submit_placeholder_job")
    assert gang.count("set_group_phase") == (3 if prefix == "queued_" else 2) and gang.count("pod_event:terminal") == 2


def _event_types(path: Path) -> list[str]:
    return [e["eventType"] for e in json.loads(path.read_text())["events"]]


@pytest.mark.parametrize("kind", KINDS)
def test_the_current_histories_keep_one_recheck_timer_across_signals(kind: str) -> None:
    """Recorded with one re-check timer per period: the signals (pods deleted, terminal, gang members added)
    cancel and start no timer. The same lifecycles recorded before did, at every signal."""
    now = _event_types(HISTORIES[0].parent / f"{kind}.json")
    before = _event_types(HISTORIES[0].parent / f"timer_per_wait_{kind}.json")
    assert now.count("EVENT_TYPE_TIMER_STARTED") == 1 and "EVENT_TYPE_TIMER_CANCELED" not in now
    assert before.count("EVENT_TYPE_TIMER_CANCELED") >= 1


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_recorded_history_replays_on_the_current_workflow(path: Path) -> None:
    replayer = Replayer(workflows=[WorkloadWorkflow], data_converter=data_converter)
    await replayer.replay_workflow(load(path))


async def test_all_histories_replay_in_one_pass() -> None:
    replayer = Replayer(workflows=[WorkloadWorkflow], data_converter=data_converter)

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
    results no longer fit the shifted calls: as a failed activation (a result that decodes to nothing the code
    can use) or as a command mismatch further on, depending on the history.
    """

    @workflow.run
    async def run(self, inp: WorkloadInput) -> str:
        await workflow.execute_local_activity(
            "get_pod_states",
            PodsInput(pods=[inp.pod]),
            result_type=PodStatesResult,
            start_to_close_timeout=retry.CALL_TIMEOUT,
        )
        return await super().run(inp)


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_a_new_command_fails_the_replay_as_nondeterminism(path: Path) -> None:
    """Proof that the replay test can fail: the changed workflow must not replay a recorded history."""
    replayer = Replayer(workflows=[PausedWorkloadWorkflow], data_converter=data_converter)
    with pytest.raises(NondeterminismError):
        await replayer.replay_workflow(load(path))


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_an_extra_local_activity_fails_the_replay(path: Path) -> None:
    replayer = Replayer(workflows=[ExtraCallWorkloadWorkflow], data_converter=data_converter)
    with pytest.raises((NondeterminismError, RuntimeError)):
        await replayer.replay_workflow(load(path))


def test_the_gang_restart_histories_hand_the_replacements_to_the_next_run() -> None:
    """Recorded by ``test_a_podgroup_member_deleted_restarts_the_gang_with_a_new_job`` (issue 29): the ended run
    continues as new with the replacements, linked to itself; the next run submits under the next number."""
    ended = json.loads((HISTORIES[0].parent / "podgroup_gang_restart_ended.json").read_text())["events"]
    following = json.loads((HISTORIES[0].parent / "podgroup_gang_restart_next.json").read_text())["events"]
    handed = ended[-1]["workflowExecutionContinuedAsNewEventAttributes"]
    given = WorkloadInput.model_validate_json(base64.b64decode(handed["input"]["payloads"][0]["data"]))
    started = following[0]["workflowExecutionStartedEventAttributes"]
    assert given.restart is not None and given.restart.submissions == 1 and given.members
    assert started["continuedExecutionRunId"] == given.restart.previous_run_id
    assert "was deleted" in given.restart.previous_result
    next_calls = calls(HISTORIES[0].parent / "podgroup_gang_restart_next.json")
    assert next_calls[:2] == ["set_group_phase", "build_job_spec"], next_calls
    assert "submit_placeholder_job" in next_calls and next_calls[-1] == "release_pods"
