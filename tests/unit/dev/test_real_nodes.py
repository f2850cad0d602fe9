"""The real nodes' names, addresses and configuration files (pure builders)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from slinky.dev import real_nodes
from slinky.dev.real_nodes import RealNode


def test_each_node_has_its_own_address_pod_subnet_namespaces_and_cgroup_root() -> None:
    one, two = RealNode(1), RealNode(2)
    assert (one.name, one.address, one.pod_cidr) == ("slinky-real-1", "10.226.24.11", "10.226.64.0/24")
    assert (two.name, two.address, two.pod_cidr) == ("slinky-real-2", "10.226.24.12", "10.226.65.0/24")
    assert {one.netns, two.netns} == {"slinky-rn1", "slinky-rn2"} and one.cgroup_root == "/slinky-rn1"
    for node in (one, two):
        assert ipaddress.ip_address(node.address) in real_nodes.NETWORK
        assert ipaddress.ip_network(node.pod_cidr).subnet_of(real_nodes.POD_NETWORK)
        assert len(node.host_veth) <= 15  # the kernel's limit on an interface name
    assert not ipaddress.ip_network(one.pod_cidr).overlaps(ipaddress.ip_network(two.pod_cidr))


def test_containerd_config_is_the_nodes_own_with_the_pause_image_and_the_plain_http_registry(tmp_path: Path) -> None:
    text = real_nodes.containerd_config(tmp_path, "10.226.24.1:15000")
    assert f'root = "{tmp_path}/root"' in text and f'address = "{tmp_path}/containerd.sock"' in text
    assert 'sandbox_image = "localhost/pause:3.4"' in text and "restrict_oom_score_adj = true" in text
    assert 'endpoint = ["http://10.226.24.1:15000"]' in text


def test_the_stack_registry_stands_in_for_upstreams_image_host(tmp_path: Path) -> None:
    import tomllib

    conf = tomllib.loads(real_nodes.containerd_config(tmp_path, "10.226.24.1:15000"))
    mirrors = conf["plugins"]["io.containerd.grpc.v1.cri"]["registry"]["mirrors"]
    assert mirrors["ghcr.io"] == {"endpoint": ["http://10.226.24.1:15000"]}
    assert mirrors["docker.io"] == {"endpoint": ["http://10.226.24.1:15000"]}  # `image: nginx` of the examples
    assert mirrors["10.226.24.1:15000"] == {"endpoint": ["http://10.226.24.1:15000"]}


def test_a_namespace_annotated_for_real_nodes_selects_them_and_tolerates_their_taint() -> None:
    import json

    taint = {"key": "node.slinky.slurm.net/real", "value": "true", "effect": "NoSchedule"}
    annotations = real_nodes.namespace_annotations(taint)
    assert annotations["scheduler.alpha.kubernetes.io/node-selector"] == "node.slinky.slurm.net/real=true"
    tolerations = json.loads(annotations["scheduler.alpha.kubernetes.io/defaultTolerations"])
    assert tolerations == [{"key": "node.slinky.slurm.net/real", "operator": "Exists", "effect": "NoSchedule"}]


def test_kubelet_authenticates_the_apiserver_by_certificate_and_serves_on_the_node_address(tmp_path: Path) -> None:
    conf = real_nodes.kubelet_config(RealNode(2), tmp_path, tmp_path / "ca.crt")
    assert conf["address"] == "10.226.24.12" and conf["cgroupRoot"] == "/slinky-rn2"
    assert conf["authentication"] == {
        "anonymous": {"enabled": False},
        "webhook": {"enabled": True},
        "x509": {"clientCAFile": str(tmp_path / "ca.crt")},
    }
    assert conf["authorization"] == {"mode": "Webhook"} and conf["clusterDNS"] == [real_nodes.HOST_ADDRESS]


def test_cni_bridge_uses_the_nodes_pod_subnet_without_masquerade() -> None:
    [bridge, portmap] = real_nodes.cni_config(RealNode(1))["plugins"]  # type: ignore[misc]
    assert bridge["type"] == "bridge" and bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.226.64.0/24"}]]
    assert portmap["capabilities"] == {"portMappings": True}


def test_the_clusters_nodes_and_the_bridges_nodes_register_with_their_roles_label_and_taint(tmp_path: Path) -> None:
    stack = real_nodes.Stack(
        state=tmp_path,
        bin=tmp_path,
        ca=tmp_path / "ca.crt",
        api_server="https://10.226.24.1:6443",
        node_tokens={},
        proxy_token="t",
        registry="10.226.24.1:15000",
        logs=tmp_path,
    )
    cluster, bridge = RealNode(2), RealNode(real_nodes.BRIDGE_NODES_FIRST)
    assert (cluster.bridge, bridge.bridge, bridge.name) == (False, True, "slinky-real-5")
    kubelet = real_nodes.argv(stack, cluster, "kubelet")
    assert "--node-labels=node.slinky.slurm.net/real=true" in kubelet
    assert "--register-with-taints=node.slinky.slurm.net/real=true:NoSchedule" in kubelet
    kubelet = real_nodes.argv(stack, bridge, "kubelet")
    # The bridge registers it in Slurm (external-node label); it is born with the taint the bridge keeps on its nodes,
    # which the bridge's pods tolerate: a NoSchedule taint of ours would have the bridge exclude the node.
    labels = "node.slinky.slurm.net/real=bridge,scheduler.slinky.slurm.net/external-node=true"
    assert f"--node-labels={labels}" in kubelet
    assert "--register-with-taints=slinky.slurm.net/managed-node=slurm-bridge-scheduler:NoExecute" in kubelet
    assert bridge.pod_cidr not in {RealNode(i).pod_cidr for i in range(1, real_nodes.BRIDGE_NODES_FIRST)}
