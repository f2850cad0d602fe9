"""bench/chaos.py's late-lifecycle count: from the pods' creation (a gang: its last member's) to the first start
of their lifecycle, as ``temporal workflow list -o json`` gives it."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace
from typing import Any

from bench.chaos import lifecycle_start_delays
from slinky import wellknown

T0 = dt.datetime(2026, 11, 26, 12, 0, 0, tzinfo=dt.UTC)


def _pod(name: str, uid: str, created: float, group: str | None = None) -> Any:
    labels = {wellknown.LABEL_POD_GROUP: group} if group else {}
    meta = SimpleNamespace(name=name, uid=uid, labels=labels, creation_timestamp=T0 + dt.timedelta(seconds=created))
    return SimpleNamespace(metadata=meta)


def _run(workflow_id: str, started: float) -> dict[str, Any]:
    at = (T0 + dt.timedelta(seconds=started)).isoformat().replace("+00:00", "Z")
    return {"execution": {"workflowId": workflow_id}, "startTime": at}


def test_a_gang_is_timed_from_its_last_member_and_a_lifecycle_from_its_first_run() -> None:
    pods = [
        _pod("pod-000", "u0", 0.0),
        _pod("gang-001-0", "u1", 1.0, "gang-001"),
        _pod("gang-001-1", "u2", 2.0, "gang-001"),
        _pod("pod-002", "u3", 3.0),
        _pod("gang-010-0", "u4", 3.0, "gang-010"),
    ]
    runs = [
        _run("workload/ns/u0", 0.4),
        _run("workload/ns/podgroup/gang-001/pg1", 1.2),  # started by the first member: before the last came
        _run("workload/ns/u3", 500.0),  # a second run, after a terminate
        _run("workload/ns/u3", 423.5),
        _run("workload/ns/podgroup/gang-0100/pg9", 4.0),  # another gang whose name starts alike
    ]
    delays = {name: round(d, 3) for name, d in lifecycle_start_delays(pods, runs).items()}
    assert delays == {"pod-000": 0.4, "gang-001-0": 0.0, "gang-001-1": 0.0, "pod-002": 420.5}, (
        "gang-010 has no lifecycle: left out"
    )
