"""NodeSetScheduledUpdateWorkflow against scripted fakes on the time-skipping server: the reservation is made,
kept in step with the nodes, followed to its next occurrence when recurring, and deleted on cancel."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from slinky.operator import slurm_state
from slinky.operator.models import (
    ControllerKey,
    ReservationRef,
    ReservationSpec,
    ReservationView,
    ScheduledUpdateInput,
    ScheduledUpdateResult,
    ScheduledUpdateStatus,
)
from tests.workflows.conftest import eventually
from workflows.scheduled_update import NodeSetScheduledUpdateWorkflow

CTL = ControllerKey(namespace="hpc", name="slurm")
REF = ReservationRef(controller=CTL, name="SlurmOperatorMaint-gpu")


@dataclass
class FakeSlurm:
    """Slurm's reservation table as the window's activities see it."""

    reservation: ReservationView | None = None
    calls: list[str] = field(default_factory=list)
    refuse: str = ""
    next_start: int | None = None
    """When set, reading after the end answers a reservation moved to this start (a recurring one)..."""
    moves: int = 0
    """... this many times; then the reservation is gone (Slurm purged it)."""

    def activities(self) -> list[Any]:
        @activity.defn(name="nodeset_reserve")
        async def reserve(spec: ReservationSpec) -> ReservationView:
            self.calls.append("reserve" if spec.full else f"nodes {','.join(spec.nodes)}")
            if self.refuse:
                raise ApplicationError(self.refuse, type="ReservationRefused", non_retryable=True)
            old = self.reservation
            if spec.full or old is None:
                end = spec.start + spec.minutes * 60
                self.reservation = ReservationView(
                    name=spec.ref.name, start=spec.start, end=end, nodes=spec.nodes, flags=spec.flags
                )
            else:
                self.reservation = old.model_copy(update={"nodes": spec.nodes})
            return self.reservation

        @activity.defn(name="nodeset_read_reservation")
        async def read(ref: ReservationRef) -> ReservationView:
            self.calls.append("read")
            if self.reservation is None:
                return ReservationView(name=ref.name, exists=False)
            if self.next_start is None or self.moves <= 0:
                self.reservation = None
                return ReservationView(name=ref.name, exists=False)
            self.moves -= 1
            self.reservation = self.reservation.model_copy(update={"start": self.next_start})
            return self.reservation

        @activity.defn(name="nodeset_release_reservation")
        async def release(ref: ReservationRef) -> bool:
            self.calls.append("release")
            existed, self.reservation = self.reservation is not None, None
            return existed

        return [reserve, read, release]


Start = Callable[..., Awaitable[WorkflowHandle[Any, ScheduledUpdateResult]]]


@pytest.fixture
async def started(env: WorkflowEnvironment) -> AsyncIterator[tuple[FakeSlurm, Start]]:
    fake = FakeSlurm()
    queue = f"scheduled-{uuid.uuid4().hex[:6]}"
    async with Worker(
        env.client, task_queue=queue, workflows=[NodeSetScheduledUpdateWorkflow], activities=fake.activities()
    ):

        async def start(offset: float, minutes: int = 30, flags: tuple[str, ...] = ()) -> Any:
            now = int((await env.get_current_time()).timestamp())
            spec = ReservationSpec(
                ref=REF,
                start=now + int(offset),
                minutes=minutes,
                flags=["MAINT", "IGNORE_JOBS", *flags],
                nodes=["gpu-0"],
            )
            inp = ScheduledUpdateInput(namespace="hpc", nodeset="gpu", reservation=spec)
            return await env.client.start_workflow(
                NodeSetScheduledUpdateWorkflow.run,
                inp,
                id=f"nodeset-scheduledupdate/hpc/gpu/u/{uuid.uuid4().hex[:8]}",
                task_queue=queue,
            )

        yield fake, start


async def status(handle: WorkflowHandle[Any, Any]) -> ScheduledUpdateStatus:
    answer: ScheduledUpdateStatus = await handle.query(NodeSetScheduledUpdateWorkflow.status)
    return answer


async def phase_is(handle: WorkflowHandle[Any, Any], phase: str) -> None:
    """Wait for the `status` query to say `phase` (a query that lands while a run hands over to its next one,
    after a continue-as-new, may time out on the test server: asked again)."""
    last = ""
    for _ in range(200):
        try:
            last = (await status(handle)).phase
        except RPCError as err:
            last = str(err)
        if last == phase:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"phase {last}, not {phase}")


async def test_the_window_reserves_waits_opens_and_ends(
    env: WorkflowEnvironment, started: tuple[FakeSlurm, Start]
) -> None:
    fake, start = started
    handle = await start(600)
    await phase_is(handle, "waiting")
    assert fake.calls == ["reserve"] and fake.reservation is not None
    assert fake.reservation.flags == ["MAINT", "IGNORE_JOBS"]
    # A scale-out before the window: the node list follows.
    await handle.signal(NodeSetScheduledUpdateWorkflow.nodes, ["gpu-1", "gpu-0"])
    await eventually(lambda: "nodes gpu-0,gpu-1" in fake.calls, 5, "the node list updated")
    assert (await status(handle)).nodes == ["gpu-0", "gpu-1"]
    await env.sleep(timedelta(seconds=620))
    await phase_is(handle, "open")
    result = await handle.result()  # time skips to the end of the window
    assert result.phase == "ended" and "ended" in result.message
    assert fake.calls == ["reserve", "nodes gpu-0,gpu-1", "nodes gpu-0,gpu-1", "read"]  # Slurm removed it at its end
    assert fake.reservation is None


async def test_cancel_deletes_the_reservation(env: WorkflowEnvironment, started: tuple[FakeSlurm, Start]) -> None:
    fake, start = started
    handle = await start(60)
    await phase_is(handle, "waiting")
    await env.sleep(timedelta(seconds=90))
    await phase_is(handle, "open")
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    assert fake.calls[-1] == "release" and fake.reservation is None
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED


async def test_a_past_start_is_skipped_unless_force_start(started: tuple[FakeSlurm, Start]) -> None:
    fake, start = started
    skipped = await (await start(-60)).result()
    assert skipped.phase == "skipped" and "FORCE_START" in skipped.message
    assert fake.calls == []
    forced = await start(-60, flags=("FORCE_START",))
    await phase_is(forced, "open")
    assert fake.calls == ["reserve", "nodes gpu-0"]
    await forced.cancel()
    with pytest.raises(WorkflowFailureError):  # ended while its worker runs (a pending task stops time skipping)
        await forced.result()
    assert fake.calls[-1] == "release"


async def test_slurm_refusing_ends_the_window_with_its_words(started: tuple[FakeSlurm, Start]) -> None:
    fake, start = started
    fake.refuse = "Invalid reservation flag BOGUS"
    result = await (await start(600, flags=("BOGUS",))).result()
    assert result.phase == "refused" and "Invalid reservation flag BOGUS" in result.message
    assert fake.calls == ["reserve"]


async def test_a_recurring_reservation_is_followed_to_its_next_occurrence(started: tuple[FakeSlurm, Start]) -> None:
    fake, start = started
    handle = await start(60, minutes=10, flags=("DAILY",))
    await phase_is(handle, "waiting")
    first = (await status(handle)).start
    fake.next_start = first + 86400
    fake.moves = 1  # Slurm moves it once; after the second occurrence it is gone
    result = await handle.result()  # follows the continue-as-new run to its end (time skips a day)
    assert result.phase == "ended"
    assert slurm_state.utc_text(first + 86400) in result.message, "the second run kept Slurm's next start"
    assert fake.calls == ["reserve", "nodes gpu-0", "read", "reserve", "nodes gpu-0", "read"]
    assert fake.reservation is None
