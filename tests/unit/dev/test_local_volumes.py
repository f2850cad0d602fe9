"""The local volume provisioner's decisions and the volumes it makes (pure)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slinky.dev import local_volumes as lv


def claim(**annotations: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "statesave-slurm-controller-0",
            "namespace": "slinky",
            "uid": "u-1",
            "annotations": {lv.ANNOTATION_PROVISIONER: lv.PROVISIONER, **annotations},
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "4Gi"}},
            "storageClassName": lv.STORAGE_CLASS,
        },
        "status": {"phase": "Pending"},
    }


def test_the_default_class_waits_for_the_first_pod_and_deletes_with_the_claim() -> None:
    sc = lv.storage_class()
    assert sc["metadata"]["annotations"] == {"storageclass.kubernetes.io/is-default-class": "true"}
    assert (sc["provisioner"], sc["reclaimPolicy"], sc["volumeBindingMode"]) == (
        lv.PROVISIONER,
        "Delete",
        "WaitForFirstConsumer",
    )


def test_only_a_pending_claim_of_ours_placed_on_a_node_gets_a_volume() -> None:
    assert not lv.wants_volume(claim())  # the scheduler has not placed its pod yet
    placed = claim(**{lv.ANNOTATION_SELECTED_NODE: "slinky-real-1"})
    assert lv.wants_volume(placed)
    other = claim(**{lv.ANNOTATION_SELECTED_NODE: "n"})
    other["metadata"]["annotations"][lv.ANNOTATION_PROVISIONER] = "ebs.csi.aws.com"
    assert not lv.wants_volume(other)
    bound = claim(**{lv.ANNOTATION_SELECTED_NODE: "n"})
    bound["status"]["phase"] = "Bound"
    assert not lv.wants_volume(bound)


def test_the_volume_is_prebound_sized_as_asked_and_pinned_to_the_selected_node(tmp_path: Path) -> None:
    pv = lv.persistent_volume(claim(**{lv.ANNOTATION_SELECTED_NODE: "slinky-real-2"}), tmp_path)
    spec = pv["spec"]
    assert pv["metadata"]["name"] == "pvc-u-1"
    assert spec["capacity"] == {"storage": "4Gi"} and spec["accessModes"] == ["ReadWriteOnce"]
    assert spec["claimRef"]["uid"] == "u-1" and spec["storageClassName"] == lv.STORAGE_CLASS
    assert spec["hostPath"]["path"] == str(tmp_path / "slinky_statesave-slurm-controller-0_u-1")
    term = spec["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert term == {"key": "kubernetes.io/hostname", "operator": "In", "values": ["slinky-real-2"]}


def test_a_released_volume_of_ours_is_reclaimed_only_inside_the_root(tmp_path: Path) -> None:
    pv = lv.persistent_volume(claim(**{lv.ANNOTATION_SELECTED_NODE: "n"}), tmp_path)
    assert not lv.reclaimable(pv)
    pv["status"] = {"phase": "Released"}
    assert lv.reclaimable(pv)
    assert lv.owned_path(tmp_path, pv) == (tmp_path / "slinky_statesave-slurm-controller-0_u-1").resolve()
    pv["spec"]["hostPath"]["path"] = "/etc"
    assert lv.owned_path(tmp_path, pv) is None
    pv["spec"]["hostPath"]["path"] = str(tmp_path / ".." / "elsewhere")
    assert lv.owned_path(tmp_path, pv) is None


def test_a_read_write_many_volume_is_shared_by_every_node(tmp_path: Path) -> None:
    shared = claim(**{lv.ANNOTATION_SELECTED_NODE: "slinky-real-2"})
    shared["spec"]["accessModes"] = ["ReadWriteMany"]
    pv = lv.persistent_volume(shared, tmp_path)
    assert pv["spec"]["accessModes"] == ["ReadWriteMany"] and "nodeAffinity" not in pv["spec"]
    assert pv["spec"]["hostPath"]["path"] == str(tmp_path / "slinky_statesave-slurm-controller-0_u-1")
