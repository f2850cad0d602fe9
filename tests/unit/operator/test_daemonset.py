"""DaemonSet mode: which nodes get a pod, the pod's name, hostname and pin."""

from __future__ import annotations

from typing import Any

from slinky import wellknown
from slinky.operator import daemonset
from slinky.operator.api.controller import Controller
from slinky.operator.api.nodeset import NodeSet
from slinky.operator.pods import build_daemon_pod


def nodeset(template_spec: dict[str, Any] | None = None) -> NodeSet:
    spec: dict[str, Any] = {"controllerRef": {"name": "slurm"}, "scalingMode": "DaemonSet"}
    if template_spec is not None:
        spec["template"] = {"spec": template_spec}
    return NodeSet.model_validate({"metadata": {"name": "gpu", "namespace": "hpc", "uid": "u"}, "spec": spec})


def node(name: str, labels: dict[str, str] | None = None, taints: list[Any] | None = None, **annotations: str) -> Any:
    return {
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations},
        "spec": {"taints": taints or []},
    }


def test_node_selector_affinity_and_taints_decide() -> None:
    ns = nodeset(
        {
            "nodeSelector": {"pool": "gpu"},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}
                        ]
                    }
                }
            },
        }
    )
    assert daemonset.eligible(ns, node("n1", {"pool": "gpu", "zone": "a"}))
    assert not daemonset.eligible(ns, node("n2", {"pool": "cpu"}))
    assert not daemonset.eligible(ns, node("n3", {"pool": "gpu", "zone": "b"}))
    tainted = node("n4", {"pool": "gpu"}, [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}])
    assert not daemonset.eligible(ns, tainted)
    worker = node("n5", {"pool": "gpu"}, [{"key": wellknown.TAINT_NODESET_WORKER, "effect": "NoExecute"}])
    assert daemonset.eligible(ns, worker), "NodeSet pods tolerate the worker taint"
    bridged = node("n7", {"pool": "gpu"}, [{"key": wellknown.TAINT_MANAGED_NODE, "value": "s", "effect": "NoExecute"}])
    assert daemonset.eligible(ns, bridged), "nor does the bridge's taint of a Slurm node make a node ineligible"
    cordoned = node("n6", {"pool": "gpu"}, [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}])
    assert daemonset.eligible(ns, cordoned), "a cordon drains Slurm instead"
    tolerant = nodeset({"tolerations": [{"key": "dedicated", "operator": "Exists"}]})
    assert daemonset.eligible(tolerant, tainted)


def test_plan_adds_missing_nodes_and_removes_extra_pods() -> None:
    ns = nodeset({"nodeSelector": {"pool": "gpu"}})
    nodes = [node("n1", {"pool": "gpu"}), node("n2", {"pool": "gpu"}), node("n3")]
    controller = Controller.model_validate({"metadata": {"name": "slurm"}, "spec": {}})
    on_n1 = build_daemon_pod(ns, controller, nodes[0], "r1")
    on_n3 = build_daemon_pod(ns, controller, nodes[2], "r1")
    twin = {
        **on_n1,
        "metadata": {**on_n1["metadata"], "name": "gpu-n1-twin", "creationTimestamp": "2099-01-01T00:00:00Z"},
    }
    missing, extra = daemonset.plan(ns, nodes, [on_n1, on_n3, twin])
    assert [n["metadata"]["name"] for n in missing] == ["n2"]
    assert [p["metadata"]["name"] for p in extra] == ["gpu-n3", "gpu-n1-twin"]


def test_the_pod_is_pinned_and_named_after_its_node() -> None:
    ns = nodeset(
        {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Exists"}]}]
                    }
                }
            }
        }
    )
    controller = Controller.model_validate({"metadata": {"name": "slurm"}, "spec": {}})
    kube_node = node("Worker_7.example.com", **{wellknown.ANNOTATION_NODE_HOSTNAME_OVERRIDE: "gpu07"})
    pod = build_daemon_pod(ns, controller, kube_node, "r1")
    assert pod["metadata"]["name"] == "gpu-worker-7"
    assert (
        pod["spec"]["hostname"] == "gpu07"
        and pod["metadata"]["labels"][wellknown.LABEL_NODESET_POD_HOSTNAME] == "gpu07"
    )
    assert wellknown.LABEL_NODESET_POD_INDEX not in pod["metadata"]["labels"]
    assert pod["metadata"]["labels"][wellknown.LABEL_NODESET_SCALING_MODE] == "DaemonSet"
    assert daemonset.target_node(pod) == "Worker_7.example.com"
    (term,) = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"] == [{"key": "a", "operator": "Exists"}], "the user's rule is kept beside the pin"
    assert "podAntiAffinity" not in pod["spec"]["affinity"]


def test_defunct_nodes_are_the_nodesets_own_with_no_pod_and_no_kubernetes_node() -> None:
    from slinky.operator.models import SlurmNodeView

    views = {
        "n1": SlurmNodeView(name="n1", states=["IDLE"], features=["gpu"]),  # its pod runs
        "n2": SlurmNodeView(name="n2", states=["DOWN"], features=["gpu"]),  # node n2 exists: its pod comes
        "n3": SlurmNodeView(name="n3", states=["IDLE", "NOT_RESPONDING"], features=["gpu"]),  # defunct
        "n4": SlurmNodeView(name="n4", states=["ALLOCATED"], features=["gpu"]),  # a job holds it: kept
        "n5": SlurmNodeView(name="n5", states=["DOWN"], features=["cpu"]),  # another NodeSet's
        "n6": SlurmNodeView(name="n6", exists=False, features=["gpu"]),
    }
    nodes = [{"metadata": {"name": "n1"}}, {"metadata": {"name": "n2"}}]
    assert daemonset.defunct_nodes("gpu", views, ["n1"], nodes) == ["n3"]
