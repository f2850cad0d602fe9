"""NodeSet pod builder: names, ordinals, slurmd arguments, limits, revision, scheduling rules."""

from __future__ import annotations

from typing import Any

import pytest

from slinky import wellknown
from slinky.operator import pods
from slinky.operator.api.controller import Controller
from slinky.operator.api.nodeset import NodeSet

CONTROLLER = Controller.model_validate(
    {
        "metadata": {"name": "slurm", "namespace": "hpc"},
        "spec": {"external": True, "externalConfig": {"host": "slurmctld.example", "port": 6817}},
    }
)


def nodeset(**spec: Any) -> NodeSet:
    return NodeSet.model_validate(
        {
            "metadata": {"name": "gpu", "namespace": "hpc", "uid": "u-1"},
            "spec": {"controllerRef": {"name": "slurm"}, **spec},
        }
    )


def test_names_and_ordinals() -> None:
    assert pods.pod_name("gpu", 3) == "gpu-3" and pods.pod_name("gpu", 3, 3) == "gpu-003"
    assert pods.ordinal_of("gpu", "gpu-007") == 7 and pods.ordinal_of("gpu", "gpux-1") is None
    assert pods.ordinal_of("gpu", "gpu-a") is None
    assert pods.free_ordinals({0, 2, 3}, 3) == [1, 4, 5] and pods.free_ordinals(set(), 0) == []


def test_slurmd_conf_keeps_the_nodeset_feature_first_class() -> None:
    ns = nodeset(extraConf="Weight=10 features=a100,nvlink feature=gpu")
    assert pods.slurmd_conf(ns) == "Features=a100,gpu,nvlink Weight=10"
    assert pods.slurmd_args(ns, CONTROLLER) == [
        "-Z",
        "--conf-server",
        "slurmctld.example:6817",
        "--conf",
        "Features=a100,gpu,nvlink Weight=10",
    ]
    with pytest.raises(ValueError, match="'oops'"):
        pods.parse_extra_conf("Weight=1 oops")


def test_in_cluster_controller_conf_server_is_its_service() -> None:
    inside = Controller.model_validate({"metadata": {"name": "slurm", "namespace": "hpc"}, "spec": {}})
    assert pods.conf_server(inside) == "slurm-controller.hpc:6817"


@pytest.mark.parametrize(("value", "cpus"), [("500m", 1), ("2", 2), (3, 3), ("1500m", 2), ("0.5", 1)])
def test_cpu_quantities_round_up(value: Any, cpus: int) -> None:
    assert pods.quantity_cpus(value) == cpus


def test_limits_come_from_slurmd_then_the_template() -> None:
    ns = nodeset(
        template={"spec": {"containers": [{"name": "side", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}},
        slurmd={"resources": {"limits": {"memory": "4Gi"}}},
    )
    assert pods.resource_limits(ns) == (1, 4096)
    assert pods.resource_limits(nodeset()) == (0, 0)


def test_pod_is_upstreams_shape() -> None:
    ns = nodeset(
        ordinalPadding=2,
        slurmd={"image": "slurmd:26.05", "env": [{"name": "EXTRA", "value": "1"}], "resources": {"limits": {"cpu": 2}}},
        template={"metadata": {"labels": {"team": "hpc"}}, "spec": {"nodeSelector": {"pool": "gpu"}}},
    )
    pod = pods.build_pod(ns, CONTROLLER, 4, "abc")
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == "gpu-04" and meta["namespace"] == "hpc"
    assert meta["labels"][wellknown.LABEL_NODESET_POD_HOSTNAME] == "gpu-04" == spec["hostname"]
    assert meta["labels"][wellknown.LABEL_NODESET_POD_INDEX] == "4"
    assert meta["labels"][wellknown.LABEL_CONTROLLER_REVISION_HASH] == "abc"
    assert meta["labels"]["team"] == "hpc" and meta["labels"][wellknown.LABEL_APP] == "slurmd"
    assert meta["ownerReferences"][0]["uid"] == "u-1" and meta["ownerReferences"][0]["controller"] is True
    (slurmd,) = spec["containers"]
    assert slurmd["name"] == "slurmd" and slurmd["image"] == "slurmd:26.05"
    env = {e["name"]: e["value"] for e in slurmd["env"]}
    assert env == {"POD_CPUS": "2", "POD_MEMORY": "0", "EXTRA": "1"}
    assert (
        "state=down reason='slurm-operator: Pod is terminating'" in slurmd["lifecycle"]["preStop"]["exec"]["command"][2]
    )
    assert spec["nodeSelector"] == {"pool": "gpu"}
    assert {"key": wellknown.TAINT_NODESET_WORKER, "operator": "Exists", "effect": "NoExecute"} in spec["tolerations"]
    assert {"key": wellknown.TAINT_MANAGED_NODE, "operator": "Exists", "effect": "NoExecute"} in spec["tolerations"], (
        "the bridge taints the node a slurmd pod makes a Slurm node: the pod must stay"
    )
    term = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["labelSelector"]["matchLabels"] == pods.selector_labels(ns)
    assert "affinity" not in pods.build_pod(nodeset(oversubscribeNode=True), CONTROLLER, 0, "abc")["spec"]


def test_template_hostname_is_a_prefix_of_the_ordinal_as_upstream() -> None:
    """Upstream's chart renders `hostname: slinky-`: the Slurm node names are `slinky-0`, ... (padded)."""
    ns = nodeset(ordinalPadding=2, template={"spec": {"hostname": "slinky-"}})
    pod = pods.build_pod(ns, CONTROLLER, 3, "abc")
    assert pod["metadata"]["name"] == "gpu-03" and pod["spec"]["hostname"] == "slinky-03"
    assert pod["metadata"]["labels"][wellknown.LABEL_NODESET_POD_HOSTNAME] == "slinky-03"
    assert pods.build_pod(nodeset(template={"spec": {"hostname": ""}}), CONTROLLER, 1, "abc")["spec"]["hostname"] == (
        "gpu-1"
    )


def test_revision_changes_with_the_template_only() -> None:
    a = pods.revision_hash(nodeset(replicas=1), "h:1")
    assert a == pods.revision_hash(nodeset(replicas=9), "h:1"), "scaling is not a new revision"
    assert a != pods.revision_hash(nodeset(extraConf="Weight=2"), "h:1")
    assert a != pods.revision_hash(nodeset(slurmd={"image": "x"}), "h:1")
    assert a != pods.revision_hash(nodeset(), "h:2")


def test_pin_to_node_remembers_each_ordinal_and_forgets_gone_nodes() -> None:
    from slinky.operator.api.nodeset import NodeSet
    from slinky.operator.pods import ordinal_to_node

    ns = NodeSet.model_validate(
        {"metadata": {"name": "cpu"}, "spec": {"controllerRef": {"name": "s"}, "pinToNode": True}}
    )
    live = [{"metadata": {"name": "cpu-1"}, "spec": {"nodeName": "w2"}}, {"metadata": {"name": "cpu-2"}, "spec": {}}]
    pins = ordinal_to_node(ns, live, {"0": "w1", "1": "old", "3": "gone"}, {"w1", "w2", "old"})
    assert pins == {"0": "w1", "1": "w2"}, "the live pod's node wins, a gone node is forgotten"


def test_a_pinned_pod_keeps_its_anti_affinity_and_gets_the_node() -> None:
    from slinky.operator.api.controller import Controller
    from slinky.operator.api.nodeset import NodeSet
    from slinky.operator.pods import build_pod

    ns = NodeSet.model_validate(
        {"metadata": {"name": "cpu", "namespace": "hpc"}, "spec": {"controllerRef": {"name": "s"}, "pinToNode": True}}
    )
    pod = build_pod(ns, Controller.model_validate({"metadata": {"name": "s"}, "spec": {}}), 0, "r", pin="w1")
    affinity = pod["spec"]["affinity"]
    (term,) = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["w1"]}]
    assert affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]


def test_the_users_slurmd_args_come_after_ours_and_an_empty_list_changes_nothing() -> None:
    """Upstream's chart renders `slurmd.args: []`: the pod must still get `-Z --conf-server ...`."""
    base = {"name": "slurmd", "args": ["-Z", "--conf-server", "c:6817"], "env": [{"name": "A", "value": "1"}]}
    assert pods._merge_container(base, {"args": [], "env": []})["args"] == ["-Z", "--conf-server", "c:6817"]
    merged = pods._merge_container(base, {"args": ["-vvv"], "image": "i"})
    assert merged["args"] == ["-Z", "--conf-server", "c:6817", "-vvv"] and merged["image"] == "i"


DATA_TEMPLATE = {
    "metadata": {"name": "scratch", "labels": {"tier": "fast"}},
    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
}


def test_volume_claim_templates_make_one_claim_per_pod_named_as_a_statefulsets() -> None:
    ns = nodeset(
        volumeClaimTemplates=[DATA_TEMPLATE], template={"spec": {"volumes": [{"name": "scratch", "emptyDir": {}}]}}
    )
    (claim,) = pods.build_claims(ns, "gpu-3")
    assert claim["metadata"]["name"] == "scratch-gpu-3" and claim["metadata"]["namespace"] == "hpc"
    assert claim["metadata"]["labels"] == {
        "tier": "fast",
        **pods.selector_labels(ns),
        wellknown.LABEL_NODESET_POD_NAME: "gpu-3",
    }
    assert claim["spec"] == DATA_TEMPLATE["spec"]
    assert "ownerReferences" not in claim["metadata"], (
        "whenDeleted: Retain (the default): the claim outlives the NodeSet"
    )
    pod = pods.build_pod(ns, CONTROLLER, 3, "abc")
    scratch = [v for v in pod["spec"]["volumes"] if v["name"] == "scratch"]
    assert scratch == [{"name": "scratch", "persistentVolumeClaim": {"claimName": "scratch-gpu-3"}}], (
        "the template's volume replaces the template's own of that name"
    )


def test_when_deleted_delete_makes_the_nodeset_own_its_claims() -> None:
    ns = nodeset(volumeClaimTemplates=[DATA_TEMPLATE], persistentVolumeClaimRetentionPolicy={"whenDeleted": "Delete"})
    (claim,) = pods.build_claims(ns, "gpu-0")
    (owner,) = claim["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("NodeSet", "gpu", "u-1", False)
    assert pods.build_claims(nodeset(), "gpu-0") == []


def test_ssh_enabled_runs_sshd_beside_slurmd_with_upstreams_config() -> None:
    ns = nodeset(
        ssh={"enabled": True, "extraSshdConfig": "MaxSessions 4", "sssdConfRef": {"name": "sssd", "key": "conf"}}
    )
    pod = pods.build_pod(ns, CONTROLLER, 0, "abc")
    (slurmd,) = pod["spec"]["containers"]
    assert {"name": "SSHD", "value": "1"} in slurmd["env"]
    assert {"name": "ssh", "containerPort": 22, "protocol": "TCP"} in slurmd["ports"]
    mounts = {m["mountPath"]: m for m in slurmd["volumeMounts"]}
    assert (
        mounts["/etc/ssh/sshd_config"]["name"] == "ssh-config" and mounts["/etc/sssd/sssd.conf"]["name"] == "sssd-conf"
    )
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["ssh-config"]["projected"]["sources"][0]["configMap"]["name"] == "gpu-ssh-config"
    assert volumes["sssd-conf"]["projected"]["sources"][0]["secret"] == {
        "name": "sssd",
        "items": [{"key": "conf", "path": "sssd.conf", "mode": 0o600}],
    }
    config = pods.ssh_config(ns)
    assert config["metadata"]["name"] == "gpu-ssh-config"
    lines = config["data"]["sshd_config"].splitlines()
    assert "AuthenticationMethods publickey password" in lines and lines[-1] == "MaxSessions 4"
    plain = pods.build_pod(nodeset(), CONTROLLER, 0, "abc")
    assert "SSHD" not in {e["name"] for e in plain["spec"]["containers"][0]["env"]}
