"""Real nodes on the dev stack (issue 30, step 1): kubelet, kube-proxy and containerd run pods as containers.

Two real nodes, each in its own network namespace with its own containerd: a pod on each, traffic between them
by pod IP, through a ClusterIP Service by its DNS name, a NodePort from the host, a StatefulSet pod's own DNS name,
``kubectl logs`` and ``exec`` through the real kubelet, and a container's main process killed and restarted by its
kubelet. The image is the stack's toolbox (Debian's static busybox), imported on each node like the pause image.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slinky.dev import real_nodes, stack
from tests.integration import devstack
from tests.integration.waiting import eventually

pytestmark = pytest.mark.integration
NODES = [real_nodes.RealNode(1), real_nodes.RealNode(2)]


class Kubectl:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def __call__(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        return devstack.kubectl(self.env, *args, stdin=stdin, check=check)

    def json(self, *args: str) -> Any:
        return json.loads(self("get", "-o", "json", *args))


@pytest.fixture(scope="module")
def kubectl(dev_env: dict[str, str]) -> Kubectl:
    return Kubectl(dev_env)


@pytest.fixture(scope="module")
def ns(kubectl: Kubectl) -> Iterator[str]:
    name = f"real-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)
    # After a node's containerd was killed and restarted, its kubelet takes a while (about a minute) to stop the
    # last containers: the namespace goes meanwhile, while the next module runs; here only that it is going.
    eventually(lambda: "Terminating" in kubectl("get", "namespace", name, "--ignore-not-found"), 30, "going")


def pod(ns: str, name: str, node: real_nodes.RealNode, command: list[str], labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node.name},
            "tolerations": [{"key": "node.slinky.slurm.net/real", "operator": "Exists"}],
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "main", "image": real_nodes.TOOLBOX_IMAGE, "command": command}],
        },
    }


WEB = [
    "/bin/busybox",
    "sh",
    "-c",
    "mkdir -p /www && hostname > /www/index.html && exec busybox httpd -f -v -p 8080 -h /www",
]
SLEEP = ["/bin/busybox", "sleep", "3600"]


@pytest.fixture(scope="module")
def pods(kubectl: Kubectl, ns: str) -> dict[str, dict[str, Any]]:
    """``web`` on real node 1 behind Services ``web`` (ClusterIP, NodePort) and ``peers`` (headless, a
    StatefulSet-style hostname and subdomain); ``client`` on real node 2."""
    web = pod(ns, "web", NODES[0], WEB, {"app": "web"})
    web["spec"].update({"hostname": "web-0", "subdomain": "peers"})
    objects = [
        web,
        pod(ns, "client", NODES[1], SLEEP, {"app": "client"}),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {"type": "NodePort", "selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "peers", "namespace": ns},
            "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 8080}]},
        },
    ]
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))

    def running() -> dict[str, dict[str, Any]] | None:
        items = {p["metadata"]["name"]: p for p in kubectl.json("pods", "-n", ns)["items"]}
        items = {name: p for name, p in items.items() if name in ("web", "client")}  # not the orphan of pod GC
        ready = all(
            any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
            for p in items.values()
        )
        return items if len(items) == 2 and ready else None

    return eventually(running, 120, "web and client Running and Ready on the real nodes")


def exec_in(kubectl: Kubectl, ns: str, name: str, *command: str) -> str:
    return kubectl("exec", "-n", ns, name, "--", *command)


@pytest.fixture(scope="module")
def orphan(kubectl: Kubectl, ns: str) -> str:
    """A pod bound to a node that is then deleted, made when the module starts: pod GC takes a minute (a 40 s
    quarantine after it first sees the node missing, checks every 20 s), which the module's other tests cover."""
    node = f"gone-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "orphan", "namespace": ns},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": real_nodes.TOOLBOX_IMAGE}]},
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    kubectl("delete", "node", node)
    return "orphan"


def test_real_nodes_are_ready_with_containerd(kubectl: Kubectl, orphan: str) -> None:
    nodes = kubectl.json("nodes", "-l", real_nodes.NODE_LABEL)["items"]
    expected = [real_nodes.RealNode(i).name for i in range(1, real_nodes.CLUSTER_NODES_DEFAULT + 1)]
    assert sorted(n["metadata"]["name"] for n in nodes) == expected
    for node in nodes:
        assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://1.6")
        assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.20.2"
        addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
        assert addresses["InternalIP"] == real_nodes.RealNode(int(node["metadata"]["name"][-1])).address
        assert {"key": "node.slinky.slurm.net/real", "value": "true", "effect": "NoSchedule"} in node["spec"]["taints"]


def test_pods_run_as_containers_on_two_nodes(pods: dict[str, dict[str, Any]]) -> None:
    assert pods["web"]["spec"]["nodeName"] == NODES[0].name and pods["client"]["spec"]["nodeName"] == NODES[1].name
    for p in pods.values():
        [status] = p["status"]["containerStatuses"]
        assert status["containerID"].startswith("containerd://")
        # The image's digest: bare when imported, with the registry's repository once it was also pulled from there.
        assert status["imageID"].startswith("sha256:") or "/slinky/busybox@sha256:" in status["imageID"]
    for name, node in (("web", NODES[0]), ("client", NODES[1])):
        assert ipaddress.ip_address(pods[name]["status"]["podIP"]) in ipaddress.ip_network(node.pod_cidr)


def test_pod_traffic_crosses_nodes_by_pod_ip_and_reaches_the_host(
    kubectl: Kubectl, ns: str, pods: dict[str, dict[str, Any]]
) -> None:
    web_ip = pods["web"]["status"]["podIP"]
    assert exec_in(kubectl, ns, "client", "busybox", "wget", "-qO-", f"http://{web_ip}:8080/").strip() == "web-0"
    with urllib.request.urlopen(f"http://{web_ip}:8080/", timeout=10) as resp:  # the host routes to the pod
        assert resp.read().decode().strip() == "web-0"


def resolve(kubectl: Kubectl, ns: str, name: str) -> list[str]:
    """The addresses cluster DNS gives a pod for ``name`` (busybox's own resolver: the image is a static busybox,
    whose glibc name service would need libraries the image does not carry)."""
    out = exec_in(kubectl, ns, "client", "busybox", "nslookup", name)
    answer = out.split("Name:", 1)[1] if "Name:" in out else ""
    return sorted(line.split()[-1] for line in answer.splitlines() if line.startswith("Address"))


def test_services_and_dns_names_work_from_pods_and_a_node_port_from_the_host(
    kubectl: Kubectl, ns: str, pods: dict[str, dict[str, Any]]
) -> None:
    web_ip = pods["web"]["status"]["podIP"]
    cluster_ip = kubectl.json("service", "-n", ns, "web")["spec"]["clusterIP"]
    addresses = eventually(lambda: resolve(kubectl, ns, f"web.{ns}.svc.cluster.local"), 60, "the Service's name")
    assert addresses == [cluster_ip]
    own = eventually(lambda: resolve(kubectl, ns, f"web-0.peers.{ns}.svc.cluster.local"), 60, "the pod's own name")
    assert own == [web_ip], "a pod's hostname under its headless Service"
    assert resolve(kubectl, ns, f"peers.{ns}.svc.cluster.local") == [web_ip], "a headless Service: its endpoints"
    resolv = exec_in(kubectl, ns, "client", "busybox", "cat", "/etc/resolv.conf")
    assert f"nameserver {real_nodes.HOST_ADDRESS}" in resolv
    assert f"search {ns}.svc.cluster.local svc.cluster.local cluster.local" in resolv
    # kube-proxy: the ClusterIP from the other node, and a NodePort of either node from the host.
    got = exec_in(kubectl, ns, "client", "busybox", "wget", "-qO-", f"http://{cluster_ip}:80/").strip()
    assert got == "web-0"
    port = kubectl.json("service", "-n", ns, "web")["spec"]["ports"][0]["nodePort"]

    def node_port(address: str) -> str:
        try:
            with urllib.request.urlopen(f"http://{address}:{port}/", timeout=10) as resp:
                return str(resp.read().decode().strip())
        except OSError:  # refused until that node's kube-proxy has written the NodePort's rules (its own sync)
            return ""

    for node in NODES:
        assert eventually(lambda a=node.address: node_port(a), 30, f"NodePort {port} on {node.name}") == "web-0"
    # The in-cluster `kubernetes` Service: kube-proxy -> the relay -> the API server, which answers plain HTTP on
    # its TLS port with 400 (busybox's wget speaks no TLS): the request got there.
    api = kubectl.json("service", "-n", "default", "kubernetes")["spec"]["clusterIP"]
    assert resolve(kubectl, ns, "kubernetes.default.svc.cluster.local") == [api]
    proc = subprocess.run(
        ["kubectl", "--kubeconfig", kubectl.env["KUBECONFIG"], "exec", "-n", ns, "client", "--", "busybox", "wget",
         "-qO-", f"http://{api}:443/"],
        text=True, capture_output=True, timeout=60,
    )  # fmt: skip
    assert "400 Bad Request" in proc.stderr, proc.stderr


def test_logs_and_exec_go_through_the_real_kubelet(kubectl: Kubectl, ns: str, pods: dict[str, dict[str, Any]]) -> None:
    exec_in(kubectl, ns, "client", "busybox", "wget", "-qO-", f"http://{pods['web']['status']['podIP']}:8080/")
    logs = eventually(lambda: kubectl("logs", "-n", ns, "web"), 30, "httpd's request log")
    assert "GET /" in logs or "response:200" in logs, logs
    assert exec_in(kubectl, ns, "web", "busybox", "hostname").strip() == "web-0"


def test_a_killed_container_is_restarted_by_its_kubelet(
    kubectl: Kubectl, ns: str, pods: dict[str, dict[str, Any]]
) -> None:
    victims = [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and _cmdline(int(p.name)) == ["/bin/busybox", "sleep", "3600"]
    ]
    assert victims, "the client container's process"
    for pid in victims:
        os.kill(pid, signal.SIGKILL)

    def restarted() -> bool:
        [status] = kubectl.json("pod", "-n", ns, "client")["status"]["containerStatuses"]
        return bool(status["restartCount"] >= 1 and status["ready"])

    eventually(restarted, 60, "the container restarted by the kubelet")


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def test_a_pod_pulls_its_image_from_the_stacks_registry(kubectl: Kubectl, ns: str) -> None:
    """The nodes pull from the stack's registry as a user's cluster pulls from theirs (imagePullPolicy Always:
    no copy the node imported is used)."""
    image = f"{stack.registry_address()}/slinky/busybox:1.35"
    pulled = pod(ns, "pulled", NODES[1], SLEEP, {"app": "pulled"})
    pulled["spec"]["containers"][0].update({"image": image, "imagePullPolicy": "Always"})
    kubectl("apply", "-f", "-", stdin=json.dumps(pulled))

    def running() -> dict[str, Any] | None:
        statuses = kubectl.json("pod", "-n", ns, "pulled")["status"].get("containerStatuses") or []
        return statuses[0] if statuses and statuses[0].get("ready") else None

    status = eventually(running, 60, "the pod Running from the pulled image")
    assert status["image"] == image and status["imageID"].startswith(f"{image.rsplit(':', 1)[0]}@sha256:")
    events = kubectl("get", "events", "-n", ns, "--field-selector", "involvedObject.name=pulled")
    assert "Pulled" in events and image in events


def test_an_image_the_registry_lacks_is_err_image_pull_where_the_user_looks(kubectl: Kubectl, ns: str) -> None:
    image = f"{stack.registry_address()}/slinky/no-such-image:1"
    missing = pod(ns, "missing", NODES[0], SLEEP, {"app": "missing"})
    missing["spec"]["containers"][0]["image"] = image
    kubectl("apply", "-f", "-", stdin=json.dumps(missing))

    def waiting() -> str | None:
        statuses = kubectl.json("pod", "-n", ns, "missing")["status"].get("containerStatuses") or []
        reason = ((statuses[0].get("state") or {}).get("waiting") or {}).get("reason") if statuses else None
        return str(reason) if reason in ("ErrImagePull", "ImagePullBackOff") else None

    eventually(waiting, 60, "ErrImagePull or ImagePullBackOff")
    described = kubectl("describe", "pod", "-n", ns, "missing")
    assert "Failed to pull image" in described and image in described
    kubectl("delete", "pod", "-n", ns, "missing", "--wait=false")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("component", ["kubelet", "containerd"])
def test_kill_9_of_a_nodes_daemon_leaves_its_containers_running(
    kubectl: Kubectl, ns: str, pods: dict[str, dict[str, Any]], component: str, dev_env: dict[str, str]
) -> None:
    """As on a cluster, where systemd restarts them: the containers outlive their kubelet and containerd (runc's
    shims hold them), and the restarted daemon takes them back; here `slinky dev up` is the restarter."""
    node = pods["web"]["spec"]["nodeName"]
    index = int(node.rsplit("-", 1)[1])
    before = {c["name"]: c["containerID"] for c in kubectl.json("pod", "-n", ns, "web")["status"]["containerStatuses"]}
    assert stack.kill(f"real-{index}-{component}") is not None
    # The pod still answers while its node's daemon is down.
    out = exec_in(kubectl, ns, "client", "busybox", "wget", "-qO-", f"http://{pods['web']['status']['podIP']}:8080/")
    assert out.strip() == "web-0", out
    devstack.slinky("dev", "up", env=dev_env, timeout=180)

    def back() -> bool:
        node_obj = kubectl.json("node", node)
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node_obj["status"]["conditions"])
        statuses = kubectl.json("pod", "-n", ns, "web")["status"]["containerStatuses"]
        return ready and all(s["ready"] for s in statuses)

    eventually(back, 120, f"{node} Ready again with web ready")
    after = {c["name"]: c["containerID"] for c in kubectl.json("pod", "-n", ns, "web")["status"]["containerStatuses"]}
    assert after == before, "the same containers, not new ones"
    out = exec_in(kubectl, ns, "client", "busybox", "wget", "-qO-", f"http://{pods['web']['status']['podIP']}:8080/")
    assert out.strip() == "web-0", out


def test_pod_gc_removes_a_pod_whose_node_was_deleted(kubectl: Kubectl, ns: str, orphan: str) -> None:
    """kube-controller-manager runs what a cluster runs: a pod bound to a node that no longer exists (a
    benchmark's simulated node, deleted) is removed by pod GC, not left Terminating for good. (Last in the module:
    the orphan was made when it started.)"""
    eventually(lambda: not kubectl("get", "pod", "-n", ns, orphan, "--ignore-not-found"), 120, "the orphan gone")
