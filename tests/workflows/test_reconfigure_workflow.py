"""ControllerReconfigureWorkflow against scripted fakes: parser check, write, reload or new pod, verify, roll back.

The five activities are fakes registered under the real names; each records its call (with the server's
clock: the activity's scheduled time, in the time-skipping server's skipped time) and answers from a small
model of the Controller's slurmctld pod that the test scripts.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from slinky.operator.reconfigure import (
    ConditionInput,
    ConfigCheck,
    ControllerRef,
    ControllerState,
    ReconfigureInput,
    ReconfigureResult,
    WriteConfigInput,
    workflow_id,
)
from tests.workflows.conftest import eventually
from workflows.reconfigure import SA_CONTROLLER, SA_NAMESPACE, SA_PHASE, ControllerReconfigureWorkflow

NS, NAME = "hpc", "slurm"
OLD_HASH, NEW_HASH = "old0000000000001", "new0000000000002"
OLD_FILES = {"slurm.conf": "ClusterName=hpc\nMaxJobCount=1000\n"}
NEW_FILES = {"slurm.conf": "ClusterName=hpc\nMaxJobCount=5000\n", "gres.conf": "Name=gpu File=/dev/null\n"}
PARSER_ERROR = (
    "scontrol: error: _parse_next_key: Parsing error at unrecognized key: NoSuchKey; "
    "scontrol: fatal: Unable to process configuration file"
)
SLURMCTLD_ERROR = "fatal: Invalid node names in partition debug"
Result = ReconfigureResult


@dataclass
class Call:
    name: str
    arg: Any
    at: float
    """The server's clock when the activity was scheduled (seconds since the epoch)."""


@dataclass
class FakeController:
    """Kubernetes and slurmctld as the reconfigure sees them.

    ``state`` answers ``controller_state``: it gets the fake and the number of the poll (0 for the first) so a
    test can script a sequence, or answer from what was written (``written``) and when (``calls``).
    """

    check: ConfigCheck = field(default_factory=lambda: ConfigCheck(ok=True))
    state: Callable[[FakeController, int], ControllerState] = field(
        default_factory=lambda: lambda fake, n: fake.healthy(fake.hash)
    )
    reload_fails: bool = False
    state_gate: asyncio.Event | None = None
    """When set, the second and later ``controller_state`` calls wait for it before they answer."""
    hash: str = OLD_HASH
    """What the ConfigMap holds (the last write)."""
    calls: list[Call] = field(default_factory=list)

    @staticmethod
    def healthy(pod_hash: str) -> ControllerState:
        return ControllerState(pod_exists=True, pod_uid="uid", pod_hash=pod_hash, ready=True, responding=True)

    def names(self) -> list[str]:
        return [c.name for c in self.calls]

    def args(self, name: str) -> list[Any]:
        return [c.arg for c in self.calls if c.name == name]

    def at(self, name: str, index: int = 0) -> float:
        return [c.at for c in self.calls if c.name == name][index]

    def _record(self, name: str, arg: Any) -> float:
        now = activity.info().current_attempt_scheduled_time.timestamp()
        self.calls.append(Call(name, arg, now))
        return now

    def activities(self) -> list[Any]:
        @activity.defn(name="check_slurm_config")
        async def check(files: dict[str, str]) -> ConfigCheck:
            self._record("check", files)
            return self.check

        @activity.defn(name="write_controller_config")
        async def write(inp: WriteConfigInput) -> None:
            self._record("write", inp)
            self.hash = inp.hash

        @activity.defn(name="controller_state")
        async def state(ref: ControllerRef) -> ControllerState:
            assert ref == ControllerRef(namespace=NS, name=NAME)
            self._record("state", ref)
            polls = len(self.args("state")) - 1
            if polls > 0 and self.state_gate is not None:
                await self.state_gate.wait()
            return self.state(self, polls)

        @activity.defn(name="reload_slurmctld")
        async def reload(ref: ControllerRef) -> float:
            assert ref == ControllerRef(namespace=NS, name=NAME)
            asked = self._record("reload", ref)
            if self.reload_fails:
                raise ApplicationError("slurmrestd: connection refused", non_retryable=True)
            return asked

        @activity.defn(name="set_controller_condition")
        async def condition(inp: ConditionInput) -> None:
            self._record("condition", inp)

        return [check, write, state, reload, condition]


def reconfigure_input(**overrides: Any) -> ReconfigureInput:
    values: dict[str, Any] = {
        "namespace": NS,
        "name": NAME,
        "hash": NEW_HASH,
        "files": NEW_FILES,
        "previous_hash": OLD_HASH,
        "previous_files": OLD_FILES,
        "inplace": False,
        "verify_seconds": 180.0,
        "propagation_seconds": 2.0,
    }
    values.update(overrides)
    return ReconfigureInput(**values)


Start = Callable[..., Awaitable[WorkflowHandle[Any, ReconfigureResult]]]


@pytest.fixture(scope="module")
async def search_attributes(env: WorkflowEnvironment) -> None:
    """The session's server knows SlinkyNamespace and SlinkyPhase (tests/workflows/conftest.py); this workflow
    also upserts SlinkyController, and an unknown search attribute fails every workflow task."""
    try:
        await env.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=env.client.namespace,
                search_attributes={SA_CONTROLLER.name: IndexedValueType.ValueType(SA_CONTROLLER.indexed_value_type)},
            )
        )
    except RPCError:  # already registered by an earlier run of this module in the session
        pass


@pytest.fixture
async def started(env: WorkflowEnvironment, search_attributes: None) -> AsyncIterator[tuple[FakeController, Start]]:
    fake = FakeController()
    queue = f"reconfigure-{uuid.uuid4().hex[:8]}"
    handles: list[WorkflowHandle[Any, ReconfigureResult]] = []
    async with Worker(
        env.client,
        task_queue=queue,
        workflows=[ControllerReconfigureWorkflow],
        activities=fake.activities(),
        # A sandbox or determinism bug fails the test at once instead of retrying the task forever.
        workflow_failure_exception_types=[Exception],
    ):

        async def start(**overrides: Any) -> WorkflowHandle[Any, ReconfigureResult]:
            handle = await env.client.start_workflow(
                ControllerReconfigureWorkflow.run,
                reconfigure_input(**overrides),
                id=workflow_id(NS, NAME, f"{NEW_HASH}-{uuid.uuid4().hex[:8]}"),
                task_queue=queue,
            )
            handles.append(handle)
            return handle

        try:
            yield fake, start
        finally:
            # A workflow a failed test leaves running holds the shared time-skipping server's clock still.
            for handle in handles:
                if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                    await handle.terminate("test ended")


def written(fake: FakeController) -> list[tuple[str, dict[str, str], str, bool]]:
    """(hash, files, rejected hash, roll pod) of every write, in order."""
    return [(w.hash, w.files, w.rejected_hash, w.roll_pod) for w in fake.args("write")]


def conditions(fake: FakeController) -> list[tuple[str, str, str]]:
    return [(c.status, c.reason, c.event) for c in fake.args("condition")]


def collapse(names: list[str]) -> list[str]:
    """The call names with repeated polls shown once (``state`` x3 -> ``state``)."""
    out: list[str] = []
    for name in names:
        if not out or out[-1] != name:
            out.append(name)
    return out


async def test_restart_mode_writes_the_new_config_and_waits_for_the_new_pod(started: Any) -> None:
    fake, start = started
    script = [
        fake.healthy(OLD_HASH),  # the StatefulSet has not made the new pod yet
        ControllerState(pod_exists=True, pod_uid="u2", pod_hash=NEW_HASH, ready=False, responding=None),
        ControllerState(pod_exists=True, pod_uid="u2", pod_hash=NEW_HASH, ready=True, responding=False),
        fake.healthy(NEW_HASH),
    ]
    fake.state = lambda f, n: script[min(n, len(script) - 1)]
    handle = await start()
    result = await handle.result()

    assert fake.names() == ["check", "write", "state", "state", "state", "state", "condition"]
    assert fake.args("check") == [NEW_FILES], "Slurm's parser is asked about the new files"
    (write,) = fake.args("write")
    assert write == WriteConfigInput(
        namespace=NS, name=NAME, hash=NEW_HASH, files=NEW_FILES, workflow_id=handle.id, rejected_hash="", roll_pod=True
    )
    (condition,) = fake.args("condition")
    assert (condition.namespace, condition.name) == (NS, NAME)
    assert (condition.status, condition.reason, condition.event) == ("True", "Applied", "Normal")
    assert NEW_HASH in condition.message and "new slurmctld pod" in condition.message
    assert result == ReconfigureResult(outcome="applied", hash=NEW_HASH, message=condition.message, restarted_pod=True)
    assert "reload" not in fake.names(), "restart mode never asks for scontrol reconfigure"
    assert fake.at("state", 3) - fake.at("state", 0) >= 3, "the polls are a second apart"


async def test_restart_mode_leaves_its_phase_in_a_search_attribute_and_the_query(started: Any) -> None:
    fake, start = started
    fake.state = lambda f, n: f.healthy(f.hash)
    handle = await start()
    assert (await handle.result()).outcome == "applied"
    described = await handle.describe()
    attrs = described.typed_search_attributes
    assert attrs.get(SA_PHASE) == "applied"
    assert attrs.get(SA_CONTROLLER) == NAME and attrs.get(SA_NAMESPACE) == NS
    assert (await handle.query(ControllerReconfigureWorkflow.status))["phase"] == "applied"


async def test_in_place_sleeps_then_reconfigures_and_waits_until_slurmctld_reread_its_config(started: Any) -> None:
    fake, start = started

    def reread(f: FakeController, n: int) -> ControllerState:
        asked = f.at("reload")
        # Two polls still see the config read before the request (beyond the 2 s slack), then the re-read.
        loaded = asked - 5 if n < 2 else asked + 0.5
        return ControllerState(pod_exists=True, pod_hash=OLD_HASH, ready=True, responding=True, loaded_since=loaded)

    fake.state = reread
    handle = await start(inplace=True, propagation_seconds=7)
    result = await handle.result()

    assert fake.names() == ["check", "write", "reload", "state", "state", "state", "condition"]
    (write,) = fake.args("write")
    assert (write.hash, write.files, write.rejected_hash, write.roll_pod) == (NEW_HASH, NEW_FILES, "", False)
    assert fake.at("reload") - fake.at("write") >= 7, "the files get propagation_seconds to reach the pod"
    assert fake.args("reload") == [ControllerRef(namespace=NS, name=NAME)]
    assert len(fake.args("state")) == 3, "a config read before the request kept it waiting"
    assert conditions(fake) == [("True", "Applied", "Normal")]
    assert "in place" in fake.args("condition")[0].message
    assert result.outcome == "applied" and result.restarted_pod is False and result.hash == NEW_HASH


async def test_in_place_a_slurmctld_that_does_not_answer_is_not_verified(started: Any) -> None:
    fake, start = started

    def silent_then_answers(f: FakeController, n: int) -> ControllerState:
        loaded = f.at("reload") + 1
        return ControllerState(pod_exists=True, pod_hash=OLD_HASH, ready=True, responding=n >= 2, loaded_since=loaded)

    fake.state = silent_then_answers
    result = await (await start(inplace=True)).result()
    assert result.outcome == "applied"
    assert len(fake.args("state")) == 3, "responding=False keeps it waiting even with a fresh loaded_since"


async def test_in_place_a_failed_reconfigure_request_waits_for_a_reread_after_the_write(started: Any) -> None:
    """slurmrestd away: no request time; slurmctld must have read its config since the files were written."""
    fake, start = started
    fake.reload_fails = True

    def restarted(f: FakeController, n: int) -> ControllerState:
        loaded = f.at("write") - 60 if n == 0 else f.at("write") + 3
        return ControllerState(pod_exists=True, pod_hash=OLD_HASH, ready=True, responding=True, loaded_since=loaded)

    fake.state = restarted
    result = await (await start(inplace=True)).result()
    assert fake.names() == ["check", "write", "reload", "state", "state", "condition"]
    assert result.outcome == "applied" and conditions(fake) == [("True", "Applied", "Normal")]


@pytest.mark.parametrize("inplace", [False, True])
async def test_a_config_slurms_parser_refuses_never_reaches_the_configmap(started: Any, inplace: bool) -> None:
    fake, start = started
    fake.check = ConfigCheck(ok=False, error=PARSER_ERROR)
    result = await (await start(inplace=inplace)).result()

    assert fake.names() == ["check", "write", "condition"]
    assert written(fake) == [(OLD_HASH, OLD_FILES, NEW_HASH, not inplace)]
    assert all(w.hash != NEW_HASH and w.files != NEW_FILES for w in fake.args("write")), "the new files never written"
    (condition,) = fake.args("condition")
    assert (condition.status, condition.reason, condition.event) == ("False", "SlurmConfigRejected", "Warning")
    assert PARSER_ERROR in condition.message
    assert NEW_HASH in condition.message and OLD_HASH in condition.message
    assert result == ReconfigureResult(outcome="rejected", hash=NEW_HASH, message=condition.message)


async def test_an_unchecked_config_goes_ahead(started: Any) -> None:
    """No Slurm tools where the operator runs: checked=False, ok=True is not a rejection."""
    fake, start = started
    fake.check = ConfigCheck(ok=True, checked=False, error="no scontrol where the operator runs: not checked")
    fake.state = lambda f, n: f.healthy(f.hash)
    result = await (await start()).result()
    assert result.outcome == "applied" and written(fake) == [(NEW_HASH, NEW_FILES, "", True)]


async def test_slurmctld_exiting_on_the_new_config_rolls_back(started: Any) -> None:
    fake, start = started

    def crash_loop(f: FakeController, n: int) -> ControllerState:
        if f.hash == NEW_HASH:  # the new pod's slurmctld ends on the new config, restartPolicy brings it back
            return ControllerState(
                pod_exists=True,
                pod_hash=NEW_HASH,
                ready=False,
                restarts=1,
                last_exit_at=f.at("write") + 1,
                last_error=SLURMCTLD_ERROR,
                responding=False,
            )
        return f.healthy(f.hash)  # the pod made again from the last good config, no exit yet

    fake.state = crash_loop
    result = await (await start()).result()

    assert fake.names() == ["check", "write", "state", "write", "condition", "state"]
    assert written(fake) == [(NEW_HASH, NEW_FILES, "", True), (OLD_HASH, OLD_FILES, NEW_HASH, True)]
    (condition,) = fake.args("condition")
    assert (condition.status, condition.reason, condition.event) == ("False", "SlurmctldRejected", "Warning")
    assert SLURMCTLD_ERROR in condition.message
    assert NEW_HASH in condition.message and OLD_HASH in condition.message
    assert result == ReconfigureResult(outcome="rolled-back", hash=NEW_HASH, message=condition.message)
    assert result.restarted_pod is False


async def test_in_place_slurmctld_exiting_on_the_new_config_rolls_back_and_reconfigures_again(started: Any) -> None:
    fake, start = started

    def crashed(f: FakeController, n: int) -> ControllerState:
        if f.hash == NEW_HASH:
            return ControllerState(
                pod_exists=True, ready=False, last_exit_at=f.at("reload") + 1, last_error=SLURMCTLD_ERROR
            )
        return ControllerState(pod_exists=True, ready=True, responding=True, loaded_since=f.at("reload", -1) + 1)

    fake.state = crashed
    result = await (await start(inplace=True)).result()

    assert fake.names() == ["check", "write", "reload", "state", "write", "condition", "reload", "state"]
    assert written(fake) == [(NEW_HASH, NEW_FILES, "", False), (OLD_HASH, OLD_FILES, NEW_HASH, False)]
    assert conditions(fake) == [("False", "SlurmctldRejected", "Warning")]
    assert SLURMCTLD_ERROR in fake.args("condition")[0].message
    assert result.outcome == "rolled-back"


async def test_an_exit_before_the_apply_does_not_count_against_the_new_config(started: Any) -> None:
    fake, start = started

    def old_exit(f: FakeController, n: int) -> ControllerState:
        state = f.healthy(f.hash if n > 0 else OLD_HASH)
        return state.model_copy(update={"last_exit_at": f.at("write") - 3600, "last_error": "an old crash"})

    fake.state = old_exit
    result = await (await start()).result()
    assert result.outcome == "applied" and conditions(fake) == [("True", "Applied", "Normal")]
    assert len(fake.args("write")) == 1


async def test_a_config_never_verified_in_time_is_rolled_back(started: Any) -> None:
    fake, start = started
    # The StatefulSet never makes the new pod (the old one keeps running): never verified.
    fake.state = lambda f, n: f.healthy(OLD_HASH)
    result = await (await start(verify_seconds=30)).result()

    names = collapse(fake.names())
    assert names == ["check", "write", "state", "write", "condition", "state"]
    first_write, rollback = fake.at("write", 0), fake.at("write", 1)
    assert rollback - first_write >= 30, "no rollback before verify_seconds"
    assert rollback - first_write < 40, "rolled back soon after verify_seconds"
    polls = [c for c in fake.calls if c.name == "state" and c.at < rollback]
    assert 30 <= len(polls) <= 32, f"polled about once a second for 30 s: {len(polls)}"
    assert written(fake)[1] == (OLD_HASH, OLD_FILES, NEW_HASH, True)
    (condition,) = fake.args("condition")
    assert (condition.status, condition.reason) == ("False", "SlurmctldRejected")
    assert "did not run it in time" in condition.message
    assert result.outcome == "rolled-back" and result.message == condition.message


async def test_the_status_query_answers_the_phase_while_verifying(started: Any) -> None:
    fake, start = started
    fake.state_gate = asyncio.Event()
    script = [
        ControllerState(pod_exists=True, pod_hash=NEW_HASH, ready=False, responding=False, last_error=""),
        fake.healthy(NEW_HASH),
    ]
    fake.state = lambda f, n: script[min(n, 1)]
    handle = await start()
    await eventually(lambda: len(fake.args("state")) >= 2, 10, "the second poll")
    status = await handle.query(ControllerReconfigureWorkflow.status)
    assert status == {"phase": "verifying", "ready": False, "responding": False, "last_error": ""}
    assert (await handle.describe()).typed_search_attributes.get(SA_PHASE) == "verifying"
    fake.state_gate.set()
    assert (await asyncio.wait_for(handle.result(), 30)).outcome == "applied"
    status = await handle.query(ControllerReconfigureWorkflow.status)
    assert status == {"phase": "applied", "ready": True, "responding": True, "last_error": ""}


async def test_the_status_query_names_slurmctlds_error_after_a_rollback(started: Any) -> None:
    fake, start = started
    fake.state = lambda f, n: ControllerState(
        pod_exists=True, pod_hash=f.hash, ready=False, last_exit_at=f.at("write", -1) + 1, last_error=SLURMCTLD_ERROR
    )
    handle = await start()
    assert (await handle.result()).outcome == "rolled-back"
    status = await handle.query(ControllerReconfigureWorkflow.status)
    assert status["phase"] == "rolled-back" and status["last_error"] == SLURMCTLD_ERROR
    assert (await handle.describe()).typed_search_attributes.get(SA_PHASE) == "rolled-back"
