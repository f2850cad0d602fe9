"""The ScheduledUpdate's pure parts: the reservation a NodeSet asks for, its window's ID, the nodes in its
maintenance, and the ReservationCreated condition."""

from __future__ import annotations

from typing import Any

import pytest

from slinky.operator import scheduled_update as su
from slinky.operator.api.nodeset import NodeSet
from slinky.operator.models import ControllerKey, ScheduledUpdateStatus, SlurmNodeView


def nodeset(**scheduled: Any) -> NodeSet:
    spec = {"startTime": "2026-12-01T02:00:00Z", **scheduled}
    return NodeSet.model_validate(
        {
            "metadata": {"name": "gpu", "namespace": "hpc", "uid": "u1"},
            "spec": {
                "controllerRef": {"name": "slurm"},
                "updateStrategy": {"type": "ScheduledUpdate", "scheduledUpdate": spec},
            },
        }
    )


def test_the_reservation_upstream_makes() -> None:
    spec = su.spec_for(nodeset(), ControllerKey(namespace="hpc", name="slurm"), ["gpu-1", "gpu-0", "gpu-1"])
    assert spec.ref.name == "SlurmOperatorMaint-gpu"
    assert spec.start == 1796090400  # 2026-12-01T02:00:00Z
    assert spec.minutes == 30, "duration defaults to 30m"
    assert spec.flags == ["MAINT", "IGNORE_JOBS"]
    assert spec.nodes == ["gpu-0", "gpu-1"]


@pytest.mark.parametrize(("duration", "minutes"), [("1m", 1), ("90s", 2), ("1h30m", 90), ("2h", 120)])
def test_duration_in_whole_minutes_rounded_up(duration: str, minutes: int) -> None:
    assert su.minutes_of(nodeset(duration=duration)) == minutes


def test_user_flags_follow_the_operators_once_each() -> None:
    assert su.flags_of(nodeset(flags=["daily", "MAINT", "FORCE_START"])) == [
        "MAINT",
        "IGNORE_JOBS",
        "DAILY",
        "FORCE_START",
    ]


def test_a_changed_schedule_is_another_window() -> None:
    base = su.schedule_key(nodeset())
    assert su.schedule_key(nodeset()) == base
    assert su.schedule_key(nodeset(startTime="2026-12-02T02:00:00Z")) != base
    assert su.schedule_key(nodeset(duration="1h")) != base
    assert su.schedule_key(nodeset(flags=["DAILY"])) != base
    assert su.workflow_id("hpc", "gpu", "u1", base) == f"nodeset-scheduledupdate/hpc/gpu/u1/{base}"


def test_nodes_in_maintenance_are_those_slurm_marks_for_this_reservation() -> None:
    views = {
        "gpu-0": SlurmNodeView(
            name="gpu-0", states=["IDLE", "RESERVED", "MAINTENANCE"], reservation="SlurmOperatorMaint-gpu"
        ),
        "gpu-1": SlurmNodeView(name="gpu-1", states=["IDLE", "RESERVED"], reservation="SlurmOperatorMaint-gpu"),
        "gpu-2": SlurmNodeView(name="gpu-2", states=["IDLE", "MAINTENANCE"], reservation="admin-maint"),
        "gpu-3": SlurmNodeView(name="gpu-3", states=["IDLE"]),
    }
    assert su.under_maintenance(views, "SlurmOperatorMaint-gpu") == {"gpu-0"}


def status(phase: str, message: str = "") -> ScheduledUpdateStatus:
    return ScheduledUpdateStatus(
        phase=phase,
        reservation="SlurmOperatorMaint-gpu",
        start=1796090400,
        end=1796092200,
        nodes=["gpu-0"],
        message=message,
    )


@pytest.mark.parametrize(
    ("phase", "expected"),
    [
        ("reserving", ("False", "Creating")),
        ("waiting", ("True", "Created")),
        ("open", ("True", "Created")),
        ("ended", ("False", "NotExists")),
        ("released", ("False", "NotExists")),
        ("skipped", ("False", "StartTimePassed")),
        ("refused", ("False", "Refused")),
    ],
)
def test_reservation_created_follows_the_window(phase: str, expected: tuple[str, str]) -> None:
    type_, state, reason, message = su.condition(status(phase, "why"), "SlurmOperatorMaint-gpu")
    assert (type_, state, reason) == ("ReservationCreated", *expected)
    assert message
    if phase == "waiting":
        assert "2026-12-01T02:00:00Z" in message and "2026-12-01T02:30:00Z" in message and "gpu-0" in message


def test_no_window_yet_waits_for_a_registered_node() -> None:
    assert su.condition(None, "SlurmOperatorMaint-gpu")[1:3] == ("False", "WaitingForNodes")
