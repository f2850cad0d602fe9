"""Rolling updates: which old-revision pods are replaced now, within maxUnavailable."""

from __future__ import annotations

from typing import Any

from slinky import wellknown
from slinky.operator.api.nodeset import NodeSet
from slinky.operator.updates import update_victims
from tests.unit.operator.test_victims import names, pod

NEW = "new-rev"


def versioned(name: str, ordinal: int, revision: str = "old-rev", *, flight: bool = False, **kw: Any) -> dict[str, Any]:
    p = pod(name, ordinal, **kw)
    p["metadata"]["labels"][wellknown.LABEL_CONTROLLER_REVISION_HASH] = revision
    if flight:
        p["metadata"]["annotations"][wellknown.ANNOTATION_SCALE_IN_WORKFLOW] = f"nodeset-scalein/ns/{name}/uid"
    return p


def nodeset(strategy: dict[str, Any] | None = None) -> NodeSet:
    spec: dict[str, Any] = {"controllerRef": {"name": "slurm"}}
    if strategy is not None:
        spec["updateStrategy"] = strategy
    return NodeSet.model_validate({"metadata": {"name": "cpu", "namespace": "hpc"}, "spec": spec})


def test_one_at_a_time_by_default_for_four_pods_highest_ordinal_first() -> None:
    pods = [versioned(f"cpu-{i}", i) for i in range(4)]
    assert names(update_victims(nodeset(), pods, NEW, 4)) == ["cpu-3"]  # 25 % of 4 = 1


def test_a_pod_being_replaced_uses_the_budget_and_stays_condemned() -> None:
    pods = [versioned("cpu-0", 0), versioned("cpu-1", 1, flight=True), versioned("cpu-2", 2)]
    assert names(update_victims(nodeset(), pods, NEW, 3)) == ["cpu-1"]


def test_an_unready_new_pod_or_an_empty_slot_holds_the_update() -> None:
    fresh = versioned("cpu-0", 0, NEW, ready=False)
    assert update_victims(nodeset(), [fresh, versioned("cpu-1", 1)], NEW, 2) == []
    assert update_victims(nodeset(), [versioned("cpu-1", 1)], NEW, 2) == []  # cpu-0 is not there yet


def test_unhealthy_old_pods_go_outside_the_budget() -> None:
    pods = [versioned("cpu-0", 0, ready=False), versioned("cpu-1", 1, ready=False), versioned("cpu-2", 2)]
    assert names(update_victims(nodeset(), pods, NEW, 3)) == ["cpu-0", "cpu-1"]


def test_idle_nodes_are_updated_before_busy_ones() -> None:
    busy = versioned("cpu-3", 3, deadline="2026-11-25T10:00:00Z")
    pods = [versioned("cpu-0", 0), busy]
    strategy = {"rollingUpdate": {"maxUnavailable": 1}}
    assert names(update_victims(nodeset(strategy), pods, NEW, 2)) == ["cpu-0"]


def test_percent_and_number_budgets() -> None:
    pods = [versioned(f"cpu-{i}", i) for i in range(8)]
    assert len(update_victims(nodeset({"rollingUpdate": {"maxUnavailable": "50%"}}), pods, NEW, 8)) == 4
    assert len(update_victims(nodeset({"rollingUpdate": {"maxUnavailable": 3}}), pods, NEW, 8)) == 3


def test_on_delete_and_up_to_date_pods_replace_nothing() -> None:
    pods = [versioned("cpu-0", 0), versioned("cpu-1", 1)]
    assert update_victims(nodeset({"type": "OnDelete"}), pods, NEW, 2) == []
    assert update_victims(nodeset(), [versioned("cpu-0", 0, NEW)], NEW, 1) == []


def test_min_ready_seconds_counts_a_new_pod_unavailable_until_it_has_been_ready_that_long() -> None:
    import datetime as dt

    from slinky.operator.updates import available_in, is_available

    spec = nodeset()
    spec.spec.min_ready_seconds = 30
    fresh = versioned("cpu-0", 0, NEW, ready_at="2026-01-01T00:00:00Z")
    pods = [fresh, versioned("cpu-1", 1)]
    early = dt.datetime(2026, 1, 1, 0, 0, 20, tzinfo=dt.UTC)
    later = dt.datetime(2026, 1, 1, 0, 0, 31, tzinfo=dt.UTC)
    assert available_in(fresh, 30, early) == 10.0 and not is_available(fresh, 30, early)
    assert update_victims(spec, pods, NEW, 2, now=early) == [], "cpu-0 is not available yet: the budget is used"
    assert names(update_victims(spec, pods, NEW, 2, now=later)) == ["cpu-1"]
    assert available_in(versioned("cpu-2", 2, ready=False), 30, later) is None


SCHEDULED = {"type": "ScheduledUpdate", "scheduledUpdate": {"startTime": "2026-12-01T02:00:00Z"}}


def with_uid(p: dict[str, Any]) -> dict[str, Any]:
    p["metadata"]["uid"] = "u-" + p["metadata"]["name"]
    return p


def test_a_scheduled_update_replaces_old_pods_only_on_nodes_in_maintenance() -> None:
    pods = [with_uid(versioned(f"cpu-{i}", i)) for i in range(4)]
    pods[3]["metadata"]["labels"][wellknown.LABEL_CONTROLLER_REVISION_HASH] = NEW  # already new: never again
    strategy = nodeset(SCHEDULED)
    assert update_victims(strategy, pods, NEW, 4) == [], "outside the window nothing goes"
    in_window = frozenset({"u-cpu-0", "u-cpu-2", "u-cpu-3"})
    assert names(update_victims(strategy, pods, NEW, 4, maintenance=in_window)) == ["cpu-0", "cpu-2"], (
        "every old pod of the window at once: the drain, not a budget, protects the jobs"
    )


def test_a_scheduled_update_replaces_unready_and_held_old_pods_at_any_time() -> None:
    pods = [
        with_uid(versioned("cpu-0", 0, ready=False)),
        with_uid(versioned("cpu-1", 1, flight=True)),
        with_uid(versioned("cpu-2", 2)),
    ]
    assert names(update_victims(nodeset(SCHEDULED), pods, NEW, 3)) == ["cpu-0", "cpu-1"]
