"""slinky.bridge.phantoms: which nodes are phantom allocations, when one is confirmed, and how it is cleared."""

from __future__ import annotations

import pytest

from slinky.bridge.phantoms import (
    CLEAR_REASON,
    PhantomTracker,
    down_reason,
    is_half_cleared,
    is_suspect,
    may_clear,
    resume_steps,
)
from slinky.clients.slurm import Node


def _node(name: str, *states: str, alloc_cpus: int = 0, alloc_memory: int = 0, reason: str = "") -> Node:
    return Node(name=name, state=list(states), alloc_cpus=alloc_cpus, alloc_memory=alloc_memory, reason=reason)


@pytest.mark.parametrize(
    ("states", "running", "suspect"),
    [
        (("ALLOCATED", "EXTERNAL", "DYNAMIC_NORM"), set(), True),
        (("MIXED", "EXTERNAL"), set(), True),
        (("ALLOCATED", "EXTERNAL", "DRAIN"), set(), True),  # draining and stuck: never drained otherwise
        (("ALLOCATED", "EXTERNAL"), {"n-1"}, False),  # a job the watcher saw running is there
        (("ALLOCATED", "EXTERNAL", "COMPLETING"), set(), False),  # a job is ending: Slurm is on it
        (("ALLOCATED", "DYNAMIC_NORM"), set(), False),  # not an external node: slurmd's registration fixes it
        (("IDLE", "EXTERNAL"), set(), False),
        (("DOWN", "EXTERNAL"), set(), False),
    ],
)
def test_a_suspect_is_an_external_node_slurm_holds_with_no_running_job_on_it(
    states: tuple[str, ...], running: set[str], suspect: bool
) -> None:
    assert is_suspect(_node("n-1", *states), running) is suspect


def test_down_is_sent_only_when_slurm_counts_nothing_allocated_on_the_node() -> None:
    assert may_clear(_node("n-1", "ALLOCATED", "EXTERNAL"), set())
    assert not may_clear(_node("n-1", "ALLOCATED", "EXTERNAL", alloc_cpus=8, alloc_memory=16384), set()), (
        "Slurm counts CPUs there: a job the watcher has not seen may hold it, and DOWN would kill it"
    )
    assert not may_clear(_node("n-1", "ALLOCATED", "EXTERNAL", alloc_memory=1), set())
    assert not may_clear(_node("n-1", "ALLOCATED", "EXTERNAL"), {"n-1"})


def test_a_suspect_is_confirmed_only_after_every_check_for_the_settle_time_found_it() -> None:
    tracker = PhantomTracker(settle_seconds=30)
    stuck = {"n-1": _node("n-1", "ALLOCATED", "EXTERNAL"), "n-2": _node("n-2", "ALLOCATED", "EXTERNAL")}
    assert tracker.observe(stuck, set(), now=100) == frozenset()
    assert tracker.observe(stuck, {"n-2"}, now=120) == frozenset(), "n-2's job was seen: it starts over"
    assert tracker.observe(stuck, set(), now=129.9) == frozenset()
    assert tracker.observe(stuck, set(), now=130) == {"n-1"}
    assert tracker.observe(stuck, set(), now=150) == {"n-1"}, "n-2 suspect again since 129.9 only"
    assert tracker.observe(stuck, set(), now=160) == {"n-1", "n-2"}
    idle = {"n-1": _node("n-1", "IDLE", "EXTERNAL"), "n-2": stuck["n-2"]}
    assert tracker.observe(idle, set(), now=161) == {"n-2"}, "n-1 came back by itself"
    tracker.forget("n-2")
    assert tracker.confirmed(now=162) == frozenset()


def test_clearing_keeps_a_drain_reason_in_the_down_reason_and_puts_the_drain_back() -> None:
    plain = _node("n-1", "ALLOCATED", "EXTERNAL")
    assert down_reason(plain) == CLEAR_REASON
    assert CLEAR_REASON.startswith("slurm-bridge: ")
    assert [s.state for s in resume_steps(down_reason(plain))] == [["RESUME"]]
    draining = _node("n-1", "ALLOCATED", "EXTERNAL", "DRAIN", reason="slurm-bridge: Kubernetes node cordoned")
    steps = resume_steps(down_reason(draining))
    assert [(s.state, s.reason) for s in steps] == [
        (["RESUME"], None),
        (["DRAIN"], "slurm-bridge: Kubernetes node cordoned"),
    ]


def test_a_clearing_cut_after_its_down_is_told_by_the_node_alone() -> None:
    assert is_half_cleared(_node("n-1", "DOWN", "EXTERNAL", reason=CLEAR_REASON))
    assert is_half_cleared(_node("n-1", "DOWN", "EXTERNAL", "DRAIN", reason=down_reason(
        _node("n-1", "ALLOCATED", "DRAIN", reason="maintenance")
    )))  # fmt: skip
    assert not is_half_cleared(_node("n-1", "DOWN", "EXTERNAL", reason="admin: broken fan"))
    assert not is_half_cleared(_node("n-1", "IDLE", "EXTERNAL", reason=CLEAR_REASON))
