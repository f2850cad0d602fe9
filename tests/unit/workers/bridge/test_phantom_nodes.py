"""``workers.bridge.phantom_nodes``: phantom allocations found from the node and job views, counted busy, cleared."""

from __future__ import annotations

from typing import Any, cast

import pytest

from slinky.bridge.phantoms import CLEAR_REASON, down_reason
from slinky.clients.events import EventRecorder
from slinky.clients.slurm import FakeSlurmClient, JobDescMsg, JobWatcher, NodeUpdate
from tests.unit.slurm.helpers import NodeSnapshot, fake_cluster
from workers.bridge.capacity import FreeNodes
from workers.bridge.phantom_nodes import REASON_CLEARED, REASON_FOUND, PhantomNodes


class Events:
    def __init__(self) -> None:
        self.recorded: list[dict[str, Any]] = []

    def record(self, event: dict[str, Any]) -> None:
        self.recorded.append(event)

    def reasons(self) -> list[tuple[str, str]]:
        return [(e["reason"], e["involvedObject"]["name"]) for e in self.recorded]


class Blind:
    """A job watcher that sees running jobs only on ``seen`` (none by default) and is always caught up."""

    answered_since = float("inf")

    def __init__(self) -> None:
        self.seen: frozenset[str] = frozenset()

    def running_nodes(self) -> frozenset[str]:
        return self.seen


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _stack(
    nodes: int = 3, *, clear: bool = True
) -> tuple[FakeSlurmClient, JobWatcher, NodeSnapshot, Events, Clock, PhantomNodes]:
    fake = fake_cluster(nodes)
    watcher, view, events, clock = JobWatcher(fake), NodeSnapshot(fake), Events(), Clock()
    phantoms = PhantomNodes(fake, watcher, view, cast(EventRecorder, events), clear=clear, clock=clock)
    return fake, watcher, view, events, clock, phantoms


async def _check(phantoms: PhantomNodes, view: NodeSnapshot, watcher: JobWatcher, clock: Clock, at: float) -> None:
    """A node snapshot, then a job view asked after it, then the check at ``at`` seconds."""
    clock.now = 1000.0 + at
    await view.refresh()
    await watcher.poll_once()
    await phantoms.check_once()


def _job(name: str, node: str | None = None) -> JobDescMsg:
    return JobDescMsg(
        name=name, partition="p", flags=["EXTERNAL_JOB"], shared=["none"], required_nodes=[node] if node else None
    )


async def test_a_stranded_node_is_counted_busy_after_the_settle_time_then_cleared_and_usable_again() -> None:
    fake, watcher, view, events, clock, phantoms = await _stack()
    fake.strand_allocation("n-2")
    await _check(phantoms, view, watcher, clock, at=0)
    assert phantoms.held() == frozenset() and fake.calls.count("update_node") == 0, "one sighting proves nothing"
    capacity = FreeNodes(watcher, view, phantoms.held)
    assert capacity.may_start_now("p", 3), "before it is confirmed, the estimate still counts n-2 free"

    await _check(phantoms, view, watcher, clock, at=31)
    node = await fake.get_node("n-2")
    assert node.state[0] == "IDLE" and node.reason == "", "DOWN then RESUME"
    assert phantoms.cleared == 1 and phantoms.held() == frozenset()
    assert events.reasons() == [(REASON_FOUND, "n-2"), (REASON_CLEARED, "n-2")]
    assert events.recorded[0]["type"] == "Warning" and events.recorded[0]["involvedObject"]["kind"] == "Node"
    job_id = await fake.allocate_job(_job("after", "n-2"))
    assert (await fake.get_job(job_id)).is_running, "Slurm places jobs on it again"


async def test_with_clearing_off_the_node_is_only_counted_busy_and_reported_once() -> None:
    fake, watcher, view, events, clock, phantoms = await _stack(clear=False)
    fake.strand_allocation("n-2")
    capacity = FreeNodes(watcher, view, phantoms.held)
    for at in (0, 31, 45):
        await _check(phantoms, view, watcher, clock, at=at)
    assert phantoms.held() == {"n-2"}
    assert not capacity.may_start_now("p", 3) and capacity.may_start_now("p", 2)
    assert (await fake.get_node("n-2")).state[0] == "ALLOCATED"
    assert events.reasons() == [(REASON_FOUND, "n-2")], "one Event per confirmation, not per check"
    assert "not cleared" in events.recorded[0]["message"]


async def test_a_node_holding_a_running_job_is_never_touched() -> None:
    fake, watcher, view, events, clock, phantoms = await _stack()
    job_id = await fake.allocate_job(_job("real", "n-1"))
    for at in (0, 31, 62):
        await _check(phantoms, view, watcher, clock, at=at)
    assert (await fake.get_job(job_id)).is_running
    assert phantoms.held() == frozenset() and events.recorded == [] and "update_node" not in fake.calls


async def test_a_snapshot_older_than_a_job_end_starts_nothing() -> None:
    """Right after a job ends the node list may still say ALLOCATED: the next snapshot says IDLE."""
    fake, watcher, view, events, clock, phantoms = await _stack()
    job_id = await fake.allocate_job(_job("short", "n-1"))
    await view.refresh()  # ALLOCATED
    await fake.cancel_job(job_id)
    await watcher.poll_once()  # the end seen after the snapshot
    clock.now = 1000.0
    await phantoms.check_once()
    await _check(phantoms, view, watcher, clock, at=31)  # the node list caught up
    assert phantoms.held() == frozenset() and events.recorded == [] and "update_node" not in fake.calls


async def test_down_is_never_sent_while_slurm_counts_resources_on_the_node() -> None:
    """A job the watcher missed (here: a watcher that saw none): the node is counted busy, and left alone."""
    fake, _, view, events, clock, _ = await _stack()
    job_id = await fake.allocate_job(_job("unseen", "n-1"))

    phantoms = PhantomNodes(fake, cast(JobWatcher, Blind()), view, cast(EventRecorder, events), clock=clock)
    for at in (0, 31, 45):
        clock.now = 1000.0 + at
        await view.refresh()
        await phantoms.check_once()
    assert phantoms.held() == {"n-1"}, "counted busy: Slurm holds it"
    assert "update_node" not in fake.calls and (await fake.get_job(job_id)).is_running


async def test_a_draining_phantom_is_cleared_and_drained_again_with_its_reason() -> None:
    fake, watcher, view, _, clock, phantoms = await _stack()
    await fake.drain_node("n-3", "slurm-bridge: Kubernetes node cordoned")
    fake.strand_allocation("n-3")
    await _check(phantoms, view, watcher, clock, at=0)
    await _check(phantoms, view, watcher, clock, at=31)
    node = await fake.get_node("n-3")
    assert node.state[0] == "IDLE" and node.is_drain and node.reason == "slurm-bridge: Kubernetes node cordoned"
    assert node.is_drained, "the node sync's drain now completes"


async def test_a_clearing_cut_after_its_down_is_finished_by_the_next_check() -> None:
    """The worker was killed between DOWN and RESUME: Slurm's node alone says what is left to do."""
    fake, watcher, view, _, clock, phantoms = await _stack()
    await fake.drain_node("n-1", "maintenance")
    reason = down_reason(await fake.get_node("n-1"))
    await fake.update_node("n-1", NodeUpdate(state=["DOWN"], reason=reason))
    await fake.update_node("n-2", NodeUpdate(state=["DOWN"], reason="admin: broken fan"))
    await _check(phantoms, view, watcher, clock, at=0)
    one, two = await fake.get_node("n-1"), await fake.get_node("n-2")
    assert one.state[0] == "IDLE" and one.reason == "maintenance" and one.is_drain
    assert two.state[0] == "DOWN" and two.reason == "admin: broken fan", "someone else's DOWN is left alone"
    assert reason.startswith(CLEAR_REASON) and phantoms.cleared == 1


async def test_a_node_that_came_back_in_between_starts_over() -> None:
    fake, watcher, view, _, clock, phantoms = await _stack(clear=False)
    fake.strand_allocation("n-2")
    await _check(phantoms, view, watcher, clock, at=0)
    await fake.update_node("n-2", NodeUpdate(state=["DOWN"], reason="admin"))
    await fake.update_node("n-2", NodeUpdate(state=["RESUME"]))
    await _check(phantoms, view, watcher, clock, at=20)  # no suspect at all in this check
    fake.strand_allocation("n-2")
    await _check(phantoms, view, watcher, clock, at=35)
    assert phantoms.held() == frozenset(), "suspect since 35 s only, not since 0"
    await _check(phantoms, view, watcher, clock, at=65)
    assert phantoms.held() == {"n-2"}


async def test_a_node_kept_for_its_allocated_cpus_is_logged_once_per_confirmation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake, _, view, events, clock, _ = await _stack()
    await fake.allocate_job(_job("unseen", "n-1"))
    blind = Blind()
    phantoms = PhantomNodes(fake, cast(JobWatcher, blind), view, cast(EventRecorder, events), clock=clock)

    async def checks(*ats: float) -> int:
        caplog.clear()
        for at in ats:
            clock.now = 1000.0 + at
            await view.refresh()
            await phantoms.check_once()
        return sum("not cleared" in r.getMessage() for r in caplog.records)

    assert await checks(0, 31, 45, 60) == 1, "once, not at every check"
    blind.seen = frozenset({"n-1"})  # the watcher sees the job now: no suspect
    assert await checks(70) == 0 and phantoms.held() == frozenset()
    blind.seen = frozenset()
    assert await checks(80, 111, 125) == 1, "confirmed again: told again"
