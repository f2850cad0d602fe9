"""What the operator keeps on each NodeSet pod: deadline, protect label, SlurmNodeState conditions, cordon."""

from __future__ import annotations

from typing import Any

from slinky import wellknown
from slinky.operator import pod_sync
from slinky.operator.models import SlurmNodeView

NOW = "2026-11-25T01:00:00Z"
OWNED = "slurm-operator: Kubernetes node (kn-1) is cordoned"


def pod(annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None, **status: Any) -> Any:
    return {
        "metadata": {"name": "cpu-0", "namespace": "hpc", "annotations": annotations or {}, "labels": labels or {}},
        "status": status,
    }


def node(cordoned: bool, reason: str = "") -> dict[str, Any]:
    annotations = {wellknown.ANNOTATION_NODE_CORDON_REASON: reason} if reason else {}
    return {"metadata": {"name": "kn-1", "annotations": annotations}, "spec": {"unschedulable": cordoned}}


def test_a_busy_node_protects_the_pod_and_sets_its_deadline() -> None:
    view = SlurmNodeView(name="cpu-0", states=["ALLOCATED"], jobs=[7], deadline="2026-11-25T02:00:00Z")
    patch = pod_sync.metadata_patch(pod(), view)
    assert patch == {
        "metadata": {
            "annotations": {wellknown.ANNOTATION_POD_DEADLINE: "2026-11-25T02:00:00Z"},
            "labels": {wellknown.LABEL_NODESET_POD_PROTECT: "true"},
        }
    }
    current = pod(patch["metadata"]["annotations"], patch["metadata"]["labels"])
    assert pod_sync.metadata_patch(current, view) is None, "nothing to do once applied"
    idle = SlurmNodeView(name="cpu-0", states=["IDLE"])
    cleared = pod_sync.metadata_patch(current, idle)
    assert cleared == {
        "metadata": {
            "annotations": {wellknown.ANNOTATION_POD_DEADLINE: None},
            "labels": {wellknown.LABEL_NODESET_POD_PROTECT: None},
        }
    }


def test_conditions_are_written_when_the_state_changes_and_keep_their_times() -> None:
    view = SlurmNodeView(name="cpu-0", states=["IDLE", "DRAIN"], reason=OWNED)
    first = pod_sync.conditions_patch(pod(), view, NOW)
    assert first is not None and len(first) == 15
    by_type = {c["type"]: c for c in first}
    assert by_type["SlurmNodeStateIdle"]["status"] == "True"
    assert by_type["SlurmNodeStateDrain"]["message"] == OWNED
    assert pod_sync.conditions_patch(pod(conditions=first), view, "2026-11-25T01:05:00Z") is None
    busy = SlurmNodeView(name="cpu-0", states=["ALLOCATED", "DRAIN"], reason=OWNED)
    later = pod_sync.conditions_patch(pod(conditions=first), busy, "2026-11-25T01:05:00Z")
    assert later is not None
    times = {c["type"]: c["lastTransitionTime"] for c in later}
    assert times["SlurmNodeStateAllocated"] == "2026-11-25T01:05:00Z" and times["SlurmNodeStateDrain"] == NOW
    assert pod_sync.conditions_patch(pod(), SlurmNodeView(name="cpu-0", exists=False), NOW) is None


def test_a_cordoned_kubernetes_node_drains_with_its_reason_or_a_default() -> None:
    idle = SlurmNodeView(name="cpu-0", states=["IDLE"])
    action = pod_sync.cordon_action(pod(), idle, node(True, "disk\nfailing"))
    assert (action.kind, action.reason) == ("drain", "slurm-operator: disk failing")
    assert pod_sync.cordon_action(pod(), idle, node(True)).reason == OWNED
    drained = SlurmNodeView(name="cpu-0", states=["IDLE", "DRAIN"], reason=OWNED)
    assert pod_sync.cordon_action(pod(), drained, node(True)).kind == "none"


def test_uncordon_undrains_only_an_owned_reason() -> None:
    drained = SlurmNodeView(name="cpu-0", states=["IDLE", "DRAIN"], reason=OWNED)
    assert pod_sync.cordon_action(pod(), drained, node(False)).kind == "undrain"
    admin = SlurmNodeView(name="cpu-0", states=["IDLE", "DRAIN"], reason="bad dimm, ticket 42")
    assert pod_sync.cordon_action(pod(), admin, node(False)).kind == "none"
    assert pod_sync.cordon_action(pod(), admin, node(True)).kind == "none", "a foreign reason is never replaced"


def test_a_cordoned_pod_drains_and_a_down_unresponsive_node_is_left_alone() -> None:
    cordoned = pod({wellknown.ANNOTATION_POD_CORDON: "true"})
    action = pod_sync.cordon_action(cordoned, SlurmNodeView(name="cpu-0", states=["IDLE"]), None)
    assert (action.kind, action.reason) == ("drain", "slurm-operator: Pod (hpc/cpu-0) is cordoned")
    gone = SlurmNodeView(name="cpu-0", states=["DOWN", "NOT_RESPONDING"], reason="")
    assert pod_sync.cordon_action(cordoned, gone, node(True)).kind == "none"


def test_a_long_reason_is_bounded() -> None:
    reason = pod_sync.node_cordon_reason(node(True, "x" * 1000))
    assert len(reason) == pod_sync.REASON_MAX and reason.startswith(wellknown.OPERATOR_REASON_PREFIX)


def test_the_scale_in_condition_says_what_each_held_pod_waits_for() -> None:
    busy = SlurmNodeView(name="cpu-0", states=["MIXED", "DRAIN"], jobs=[7, 9], deadline="2026-11-25T02:00:00Z")
    idle = SlurmNodeView(name="cpu-1", states=["IDLE", "DRAIN"])
    type_, status, reason, message = pod_sync.scale_in_condition([("cpu-1", idle), ("cpu-0", busy)])
    assert (type_, status, reason) == ("ScaleInProgress", "True", "WaitingForJobs")
    assert message == (
        "cpu-0 waits for jobs [7, 9] on Slurm node cpu-0 (time limit reached 2026-11-25T02:00:00Z); cpu-1 is draining"
    )
    assert pod_sync.scale_in_condition([("cpu-1", idle)])[2] == "Draining"
    assert pod_sync.scale_in_condition([])[1:3] == ("False", "NoScaleIn")
