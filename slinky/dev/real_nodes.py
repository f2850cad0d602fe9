"""Real Kubernetes nodes on the dev stack: kubelet, kube-proxy and containerd, one set per node, as on a cluster.

Each node is a network namespace of ours (``slinky-rnN``) on the bridge ``slkrn0`` (host side 10.226.24.1/24,
node N at 10.226.24.(10+N)), with a persistent mount namespace of its own (``/run/slinky-dev/mnt/rnN``, a slave
of the host's: the host's mounts are seen inside, the node's are never seen outside). Inside run:

* containerd (Debian's 1.6) with its root, state, socket and ``/run/containerd`` its own, runc, and the CNI
  ``bridge`` + ``host-local`` + ``portmap`` + ``loopback`` plugins (pod subnet 10.226.(63+N).0/24 on ``cni0``);
* kubelet v1.20.2 (built from the same Debian source as the apiserver) with the cgroup root ``/slinky-rnN``,
  its credentials a token of ``system:node:<name>`` (Node authorizer), webhook authentication and authorization of
  the apiserver's requests (logs, exec) against the stack's CA;
* kube-proxy v1.20.2 in iptables mode: its rules live in the node's network namespace, so the host's tables are
  never touched.

Pod traffic between nodes is routed, not NATed: each node routes the other nodes' pod subnets to their node
address over the bridge, and the host routes every pod subnet to its node (``kubectl port-forward``-free access
from tests). Pods reach the API server through the ``kubernetes`` Service (its Endpoints point at the host side of
the bridge, where ``apiserver-forward`` relays to the API server's loopback port) and cluster DNS at 10.226.24.1
(``cluster_dns``: Debian's dnsmasq fed from the API).

Stopping a node kills what runs in its namespaces, removes its network namespace and veth, releases its mount
namespace (every container mount and netns bind mount in it goes with it) and removes its cgroups.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from slinky import wellknown
from slinky.dev.procs import ProcessTable, kill_namespace, namespace_pids

BRIDGE: Final = "slkrn0"
NETWORK: Final = ipaddress.IPv4Network("10.226.24.0/24")
HOST_ADDRESS: Final = str(NETWORK[1])
"""The host's side of the nodes' bridge: the API server relay, cluster DNS and the image registry listen here."""
POD_NETWORK: Final = ipaddress.IPv4Network("10.226.64.0/18")
SERVICE_NETWORK: Final = ipaddress.IPv4Network("10.96.0.0/16")
CLUSTER_DOMAIN: Final = "cluster.local"
NODE_PREFIX: Final = "slinky-real"
CLUSTER_NODES_DEFAULT: Final = 4
"""The clusters' real nodes `dev up` starts unless told (`--real-nodes`): a NodeSet of four pods fits (one per node)."""
NETNS_PREFIX: Final = "slinky-rn"
MOUNT_DIR: Final = Path("/run/slinky-dev/mnt")
CNI_BIN: Final = Path("/usr/lib/cni")
PAUSE_IMAGE: Final = "localhost/pause:3.4"
TOOLBOX_IMAGE: Final = "localhost/busybox:1.35"
"""Debian's static busybox alone (``busybox httpd|wget|nslookup|nc|sh``): the stack's own test image, imported
like the pause image."""
BUSYBOX: Final = Path("/bin/busybox")
RUNTIME_PACKAGES: Final = {
    "containerd": "containerd",
    "runc": "runc",
    "iptables": "iptables",
    "conntrack": "conntrack",
    "dnsmasq": "dnsmasq-base",
    "busybox": "busybox-static",
    "docker-registry": "docker-registry",
    "skopeo": "skopeo",
}
"""Commands the real nodes need, and the Debian 12 package of each (the CNI plugins: ``containernetworking-plugins``,
checked by path)."""
COMPONENTS: Final = ("containerd", "kubelet", "kube-proxy")
REAL_KEY: Final = "node.slinky.slurm.net/real"
"""Every real node has this label (``kubectl get nodes -l node.slinky.slurm.net/real``), valued by its role:
``true`` (the Slurm clusters') or ``bridge``."""
NODE_LABEL: Final = f"{REAL_KEY}=true"
"""The Slurm clusters' real nodes (``kubectl get nodes -l node.slinky.slurm.net/real=true``): where the pods of a
namespace annotated with :func:`namespace_annotations` go (the operator's clusters)."""
BRIDGE_NODE_LABEL: Final = f"{REAL_KEY}=bridge"
"""The bridge's real nodes: also external Slurm nodes of the stack's Slurm (label
``scheduler.slinky.slurm.net/external-node``, partition :data:`BRIDGE_PARTITION`); only the bridge binds pods there."""
BRIDGE_NODES_FIRST: Final = 5
"""Node indexes 1-4 are the clusters' nodes, 5 and up the bridge's (``slinky-real-5``...)."""
BRIDGE_PARTITION: Final = "real-nodes"
"""The stack's Slurm partition of the bridge's real nodes (their ``external-node-partitions`` annotation)."""


@dataclass(frozen=True)
class RealNode:
    """Node ``index`` (1-based): its names and addresses, all derived from the index."""

    index: int

    @property
    def name(self) -> str:
        return f"{NODE_PREFIX}-{self.index}"

    @property
    def netns(self) -> str:
        return f"{NETNS_PREFIX}{self.index}"

    @property
    def address(self) -> str:
        return str(NETWORK[10 + self.index])

    @property
    def pod_cidr(self) -> str:
        return str(list(POD_NETWORK.subnets(new_prefix=24))[self.index - 1])

    @property
    def host_veth(self) -> str:
        return f"slkrh{self.index}"

    @property
    def mount_ns(self) -> Path:
        return MOUNT_DIR / f"rn{self.index}"

    @property
    def cgroup_root(self) -> str:
        return f"/{self.netns}"

    @property
    def bridge(self) -> bool:
        """One of the bridge's nodes (an external Slurm node), not a Slurm cluster's."""
        return self.index >= BRIDGE_NODES_FIRST

    @property
    def labels(self) -> list[str]:
        """What the kubelet registers the node with."""
        if self.bridge:
            return [BRIDGE_NODE_LABEL, f"{wellknown.LABEL_EXTERNAL_NODE}=true"]
        return [NODE_LABEL]

    @property
    def taint(self) -> str:
        """``key=value:Effect`` the node registers with, so that no pod lands there by chance: a clusters' node takes
        the pods of the namespaces that tolerate it (:func:`namespace_annotations`); a bridge's node is born with the
        taint the bridge keeps on its nodes (``slinky.slurm.net/managed-node``), as only the bridge binds pods there
        (a NoSchedule taint of ours would make the bridge exclude the node: its pods do not tolerate it)."""
        if self.bridge:
            return f"{wellknown.TAINT_MANAGED_NODE}={wellknown.SCHEDULER_NAME}:NoExecute"
        return f"{REAL_KEY}=true:NoSchedule"

    def process(self, component: str) -> str:
        """The ProcessTable name of one of its daemons: ``real-1-kubelet``."""
        return f"real-{self.index}-{component}"


def _run(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, text=True, capture_output=True, check=check)


def enter(node: RealNode) -> list[str]:
    """The prefix that runs a command inside the node: its network and mount namespaces."""
    return ["nsenter", f"--net=/run/netns/{node.netns}", f"--mount={node.mount_ns}", "--"]


# ------------------------------------------------------------------------------------------------ network
def ensure_bridge() -> None:
    if not Path(f"/sys/class/net/{BRIDGE}").exists():
        _run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    _run(["ip", "addr", "replace", f"{HOST_ADDRESS}/{NETWORK.prefixlen}", "dev", BRIDGE])
    _run(["ip", "link", "set", BRIDGE, "up"])


def ensure_network(node: RealNode) -> None:
    """The node's network namespace, veth on the bridge, address, default route; the host's route to its pods."""
    if node.netns not in _run(["ip", "netns", "list"]).stdout.split():
        _run(["ip", "netns", "add", node.netns])
    inside = ["ip", "netns", "exec", node.netns]
    if not Path(f"/sys/class/net/{node.host_veth}").exists():
        _run(["ip", "link", "add", node.host_veth, "type", "veth", "peer", "name", "eth0", "netns", node.netns])
    _run(["ip", "link", "set", node.host_veth, "master", BRIDGE])
    _run(["ip", "link", "set", node.host_veth, "up"])
    for cmd in (
        ["ip", "addr", "replace", f"{node.address}/{NETWORK.prefixlen}", "dev", "eth0"],
        ["ip", "link", "set", "eth0", "up"],
        ["ip", "link", "set", "lo", "up"],
        ["ip", "route", "replace", "default", "via", HOST_ADDRESS],
        ["sysctl", "-qw", "net.ipv4.ip_forward=1"],
    ):
        _run([*inside, *cmd])
    _run(["ip", "route", "replace", node.pod_cidr, "via", node.address])


def route_between(nodes: list[RealNode]) -> None:
    """Each node reaches the others' pod subnets directly over the bridge (no NAT, no host forwarding)."""
    for node in nodes:
        for other in nodes:
            if other != node:
                _run(
                    ["ip", "netns", "exec", node.netns, "ip", "route", "replace", other.pod_cidr, "via", other.address]
                )


PRIVATE_PATHS: Final = ("/var/log/pods", "/var/log/containers", "/var/lib/cni")
"""Fixed paths a node writes and would share with the others on one host: the kubelet's pod logs (each kubelet
removes the log directories of pods it does not know) and host-local IPAM's reservations. Each node gets its own,
bound from its directory inside its mount namespace."""


def ensure_mount_namespace(node: RealNode, directory: Path) -> None:
    """A mount namespace that outlives the node's processes (a restarted kubelet joins the same one), a slave of
    the host's; ``/run/containerd`` in it is the node's own tmpfs (the runc shim's fixed paths), and each of
    ``PRIVATE_PATHS`` the node's own directory."""
    if not MOUNT_DIR.is_dir() or not _is_mountpoint(MOUNT_DIR):
        MOUNT_DIR.mkdir(parents=True, exist_ok=True)
        _run(["mount", "--bind", str(MOUNT_DIR), str(MOUNT_DIR)])
        _run(["mount", "--make-private", str(MOUNT_DIR)])
    if _is_mountpoint(node.mount_ns):
        return
    node.mount_ns.touch()
    _run(["unshare", f"--mount={node.mount_ns}", "--propagation", "slave", "true"])
    script = ["mkdir -p /run/containerd && mount -t tmpfs -o mode=0711 tmpfs /run/containerd"]
    for path in PRIVATE_PATHS:
        own = directory / "host" / path.lstrip("/")
        own.mkdir(parents=True, exist_ok=True)
        script.append(f"mkdir -p {path} && mount --bind {own} {path}")
    _run(["nsenter", f"--mount={node.mount_ns}", "--", "sh", "-c", " && ".join(script)])


def _is_mountpoint(path: Path) -> bool:
    try:
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return False
    return any(line.split()[4] == str(path) for line in mounts)


# ------------------------------------------------------------------------------------------------ configuration
MIRRORED_REGISTRIES: Final = ("ghcr.io", "docker.io")
"""Registries the stack's registry stands in for, as an air-gapped cluster's mirror does: upstream's manifests
name ``ghcr.io/slinkyproject/<image>:<tag>`` (the bridge's examples ``nginx``: docker.io's ``library/nginx``), and
a node pulls ``<image>:<tag>`` from the stack's registry, where ``slinky dev up`` pushed the images built here
(docs/images.md). Nothing is fetched from the host itself.
"""


def containerd_config(state: Path, registry: str) -> str:
    """containerd 1.6's configuration for one node (paths its own; CRI with the pause image, the CNI plugins of
    Debian's package, the stack's registry over plain HTTP, which also mirrors :data:`MIRRORED_REGISTRIES`).
    ``restrict_oom_score_adj``: this VM refuses a lower OOM score even to root, and runc fails every sandbox
    without it (``../shared/reference/containers.md``)."""
    mirrors = "".join(
        f'  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."{host}"]\n    endpoint = ["http://{registry}"]\n'
        for host in MIRRORED_REGISTRIES
    )
    return f"""version = 2
root = "{state / "root"}"
state = "{state / "state"}"
[grpc]
  address = "{state / "containerd.sock"}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{state / "cni"}"
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."{registry}"]
    endpoint = ["http://{registry}"]
{mirrors}"""


def host_service(namespace: str, name: str, port: int, host_port: int) -> list[dict[str, object]]:
    """A Service without a selector and its Endpoints: ``name.namespace.svc:port`` reaches the host's
    ``HOST_ADDRESS:host_port`` through kube-proxy (a service of the stack that runs outside the cluster)."""
    meta = {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "slinky-dev"}}
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta,
            "spec": {"ports": [{"name": "tcp", "port": port, "targetPort": host_port, "protocol": "TCP"}]},
        },
        {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": meta,
            "subsets": [
                {"addresses": [{"ip": HOST_ADDRESS}], "ports": [{"name": "tcp", "port": host_port, "protocol": "TCP"}]}
            ],
        },
    ]


def namespace_annotations(taint: dict[str, str]) -> dict[str, str]:
    """What sends a namespace's pods to the real nodes, through the API server's PodNodeSelector and
    PodTolerationRestriction admission plugins: the real nodes' label as every pod's node selector, and a
    toleration of their taint added to every pod."""
    toleration = {"key": taint["key"], "operator": "Exists", "effect": taint["effect"]}
    return {
        "scheduler.alpha.kubernetes.io/node-selector": NODE_LABEL,
        "scheduler.alpha.kubernetes.io/defaultTolerations": json.dumps([toleration]),
    }


def cni_config(node: RealNode) -> dict[str, object]:
    """A bridge network on ``cni0`` with the node's pod subnet, hostPort mapping, routed to the rest by the node."""
    return {
        "cniVersion": "0.4.0",
        "name": "slinky",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": node.pod_cidr}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_config(node: RealNode, state: Path, ca: Path) -> dict[str, object]:
    """KubeletConfiguration v1beta1: what the flags said in ``containers.md``, plus authentication of the
    apiserver's requests by client certificate (its kubelet client certificate) and webhook authorization."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node.address,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup_root,
        "failSwapOn": False,
        "clusterDNS": [HOST_ADDRESS],
        "clusterDomain": CLUSTER_DOMAIN,
        "staticPodPath": "",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "Webhook"},
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "resolvConf": str(state / "resolv.conf"),
        "maxPods": 110,
        "nodeStatusUpdateFrequency": "10s",
        "volumePluginDir": str(state / "volume-plugins"),
    }


def kube_proxy_config(node: RealNode, kubeconfig: Path) -> dict[str, object]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clusterCIDR": str(POD_NETWORK),
        "hostnameOverride": node.name,
        "bindAddress": node.address,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        # The stack's machine has its own conntrack limits; kube-proxy would try to raise them (read-only here).
        "conntrack": {"maxPerCore": 0, "min": 0},
    }


def kubeconfig(server: str, ca: Path, token: str, user: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "slinky-dev", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "slinky-dev", "context": {"cluster": "slinky-dev", "user": user}}],
        "current-context": "slinky-dev",
    }


# ------------------------------------------------------------------------------------------------ lifecycle
@dataclass(frozen=True)
class Stack:
    """What the real nodes need from the rest of the dev stack."""

    state: Path
    """``.slinky-dev/real-nodes``: one directory per node."""
    bin: Path
    """kubelet, kube-proxy and pause."""
    ca: Path
    api_server: str
    """``https://HOST:PORT`` as the nodes reach it."""
    node_tokens: dict[str, str]
    """Token per node name (user ``system:node:<name>``, group ``system:nodes``)."""
    proxy_token: str
    """Token of ``system:kube-proxy``."""
    registry: str
    """``HOST:PORT`` of the stack's image registry (plain HTTP)."""
    logs: Path


def node_dir(stack: Stack, node: RealNode) -> Path:
    return stack.state / node.name


def write_files(stack: Stack, node: RealNode) -> bool:
    """The node's configuration files; True when containerd's changed (a running containerd must restart)."""
    d = node_dir(stack, node)
    for sub in ("cni", "kubelet", "volume-plugins", "certs"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    containerd_toml = d / "containerd.toml"
    text = containerd_config(d, stack.registry)
    changed = containerd_toml.is_file() and containerd_toml.read_text() != text
    containerd_toml.write_text(text)
    (d / "cni" / "10-slinky.conflist").write_text(json.dumps(cni_config(node), indent=2))
    (d / "resolv.conf").write_text("nameserver 127.0.0.1\n")  # pods use cluster DNS; nothing resolves upstream
    kubelet_conf = kubelet_config(node, d, stack.ca)
    (d / "kubelet.yaml").write_text(json.dumps(kubelet_conf, indent=2))
    node_kubeconfig = kubeconfig(stack.api_server, stack.ca, stack.node_tokens[node.name], f"system:node:{node.name}")
    (d / "kubelet.kubeconfig").write_text(json.dumps(node_kubeconfig))
    proxy_kubeconfig = kubeconfig(stack.api_server, stack.ca, stack.proxy_token, "system:kube-proxy")
    (d / "kube-proxy.kubeconfig").write_text(json.dumps(proxy_kubeconfig))
    (d / "kube-proxy.yaml").write_text(json.dumps(kube_proxy_config(node, d / "kube-proxy.kubeconfig"), indent=2))
    for f in ("kubelet.kubeconfig", "kube-proxy.kubeconfig"):
        (d / f).chmod(0o600)
    return changed


def argv(stack: Stack, node: RealNode, component: str) -> list[str]:
    d = node_dir(stack, node)
    if component == "containerd":
        return [*enter(node), "containerd", "--config", str(d / "containerd.toml")]
    if component == "kubelet":
        return [
            *enter(node),
            str(stack.bin / "kubelet"),
            f"--config={d / 'kubelet.yaml'}",
            f"--kubeconfig={d / 'kubelet.kubeconfig'}",
            "--container-runtime=remote",
            f"--container-runtime-endpoint=unix://{d / 'containerd.sock'}",
            f"--root-dir={d / 'kubelet'}",
            f"--cert-dir={d / 'certs'}",
            f"--hostname-override={node.name}",
            f"--node-ip={node.address}",
            f"--pod-infra-container-image={PAUSE_IMAGE}",
            f"--node-labels={','.join(node.labels)}",
            f"--register-with-taints={node.taint}",
            "--v=1",
        ]
    if component == "kube-proxy":
        return [*enter(node), str(stack.bin / "kube-proxy"), f"--config={d / 'kube-proxy.yaml'}", "--v=1"]
    raise ValueError(component)


def start(procs: ProcessTable, stack: Stack, nodes: list[RealNode], log: Callable[[str], None]) -> None:
    """These real nodes, idempotently: what runs is left running, what is missing is started."""
    ensure_bridge()
    reconfigured: set[str] = set()
    for node in nodes:
        if not any(procs.running(node.process(c)) for c in COMPONENTS) and _is_mountpoint(node.mount_ns):
            # Left by a stack whose processes were all killed (a machine handed on, a stack of another checkout):
            # its containers' mounts and addresses belong to no running node; this one starts clean.
            _tear_down(node, log)
        ensure_network(node)
        ensure_mount_namespace(node, node_dir(stack, node))
        ensure_cgroups(node.cgroup_root)
        if write_files(stack, node):
            reconfigured.add(node.name)
    route_between(nodes)
    for node in nodes:
        for component in COMPONENTS:
            name = node.process(component)
            if component == "containerd" and node.name in reconfigured and procs.stop(name):
                log(f"{name}: configuration changed, restarted (its containers keep running)")
            if procs.running(name) is None:
                procs.start(name, argv(stack, node, component), log=stack.logs / f"{name}.log")
            if component == "containerd":  # the sandbox image before the kubelet asks for a sandbox
                _wait_for(functools.partial(_answers, stack, node), 30, name)
                import_images(stack, node)
        role = "the bridge's" if node.bridge else "clusters'"
        log(f"real node {node.name} up ({role}; {node.address}, pods {node.pod_cidr})")


def _wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready in {timeout:.0f} s")
        time.sleep(0.2)


def _answers(stack: Stack, node: RealNode) -> bool:
    return _run(ctr(stack, node, "version"), check=False).returncode == 0


def ctr(stack: Stack, node: RealNode, *args: str) -> list[str]:
    return [*enter(node), "ctr", "--address", str(node_dir(stack, node) / "containerd.sock"), "-n", "k8s.io", *args]


def import_images(stack: Stack, node: RealNode) -> None:
    """The pause image (from the pause binary the build made) and the toolbox image (Debian's static busybox),
    imported into the node's containerd: the sandbox image is never pulled, and neither needs the registry."""
    from slinky.dev import oci

    listed = _run(ctr(stack, node, "images", "list", "-q"), check=False).stdout.split()
    for image, binary, path in ((PAUSE_IMAGE, stack.bin / "pause", "/pause"), (TOOLBOX_IMAGE, BUSYBOX, "/bin/busybox")):
        if image in listed:
            continue
        archive = stack.state / f"{path.rsplit('/', 1)[1]}.oci.tar"
        if not archive.is_file():
            oci.single_binary_image(binary, path, image, archive)
        _run(ctr(stack, node, "images", "import", str(archive)))


def forget_images(stack: Stack, node: RealNode, names: list[str]) -> None:
    """Drop ``names`` from the node's containerd (an image made again under the same tag: the next pod pulls it;
    running containers keep theirs)."""
    if names:
        _run(ctr(stack, node, "images", "rm", *names), check=False)


def stop(procs: ProcessTable, log: Callable[[str], None]) -> None:
    """Stop every real node this stack made: its daemons (kube-proxy, kubelet, then containerd), whatever still
    runs in its network namespace (containers), then the namespaces, veths, routes, cgroups and the bridge."""
    indexes = sorted(
        {int(n.split("-")[1]) for n in procs.names() if n.startswith("real-") and n.split("-")[1].isdigit()}
        | {int(p.name[2:]) for p in MOUNT_DIR.glob("rn*") if p.name[2:].isdigit()}
        | {
            int(n[len(NETNS_PREFIX) :])
            for n in _run(["ip", "netns", "list"], check=False).stdout.split()
            if n.startswith(NETNS_PREFIX) and n[len(NETNS_PREFIX) :].isdigit()
        }
        | {  # containers outlive everything else: their cgroups name the node
            int(p.name[len(NETNS_PREFIX) :])
            for p in Path("/sys/fs/cgroup/pids").glob(f"{NETNS_PREFIX}*")
            if p.name[len(NETNS_PREFIX) :].isdigit()
        }
    )
    for index in indexes:
        node = RealNode(index)
        for component in reversed(COMPONENTS):
            procs.stop(node.process(component))
        _tear_down(node, log)
    remove_stale_cni_netns()
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        _run(["ip", "link", "delete", BRIDGE], check=False)
    if _is_mountpoint(MOUNT_DIR) and not any(MOUNT_DIR.iterdir()):
        _run(["umount", str(MOUNT_DIR)], check=False)


def _tear_down(node: RealNode, log: Callable[[str], None]) -> None:
    """What is left of a node once its daemons are stopped (or were killed): containers, namespaces, veth, route,
    cgroups."""
    killed = len(namespace_pids(node.netns))
    kill_namespace(node.netns)
    # Containers run in their pods' network namespaces, under the node's cgroup root: they outlive a stopped
    # containerd (runc's shims and their processes), so they are killed by cgroup.
    killed += kill_cgroup_tree(node.cgroup_root)
    if _is_mountpoint(node.mount_ns):
        _run(["umount", str(node.mount_ns)], check=False)
    node.mount_ns.unlink(missing_ok=True)
    if node.netns in _run(["ip", "netns", "list"], check=False).stdout.split():
        _run(["ip", "netns", "delete", node.netns], check=False)
    # The namespace itself may outlive its file for minutes (a killed daemon's orphaned TCP sockets hold it
    # while they retransmit): its veth goes now, from this side.
    if Path(f"/sys/class/net/{node.host_veth}").exists():
        _run(["ip", "link", "delete", node.host_veth], check=False)
    _run(["ip", "route", "del", node.pod_cidr], check=False)
    _remove_cgroups(node.cgroup_root)
    log(f"stopped real node {node.name}" + (f" ({killed} container processes killed)" if killed else ""))


def ensure_cgroups(root: str) -> None:
    """The node's cgroup root in every v1 hierarchy (the kubelet refuses a ``cgroupRoot`` that does not exist);
    a new cpuset gets its parent's CPUs and memory nodes, as one made by a runtime does."""
    base = Path("/sys/fs/cgroup")
    for hierarchy in base.iterdir() if base.is_dir() else []:
        if not hierarchy.is_dir() or hierarchy.is_symlink() or not (hierarchy / "cgroup.procs").exists():
            continue
        top = hierarchy / root.lstrip("/")
        top.mkdir(exist_ok=True)
        for knob in ("cpuset.cpus", "cpuset.mems"):
            if (top / knob).exists() and not (top / knob).read_text().strip():
                (top / knob).write_text((hierarchy / knob).read_text())


def cgroup_pids(root: str) -> set[int]:
    """Every process in the cgroup tree ``root`` of any v1 hierarchy."""
    base = Path("/sys/fs/cgroup")
    pids: set[int] = set()
    for hierarchy in base.iterdir() if base.is_dir() else []:
        top = hierarchy / root.lstrip("/")
        if not top.is_dir():
            continue
        for procs in top.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in procs.read_text().split())
    return pids


def kill_cgroup_tree(root: str, timeout: float = 10.0) -> int:
    """SIGKILL every process in the node's cgroup tree until none is left; how many there were."""
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    while (pids := cgroup_pids(root)) and time.monotonic() < deadline:
        seen |= pids
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    return len(seen)


def remove_stale_cni_netns() -> None:
    """``/run/netns/cni-*`` files that are no longer namespaces: containerd made them (bind mounts inside a node's
    mount namespace, which went with it); on the host only the empty files remain."""
    netns = Path("/run/netns")
    for path in netns.glob("cni-*") if netns.is_dir() else []:
        if not _is_mountpoint(path):
            path.unlink(missing_ok=True)


def _remove_cgroups(root: str) -> None:
    """rmdir the node's cgroup tree in every v1 hierarchy, deepest first (empty once its processes are gone)."""
    base = Path("/sys/fs/cgroup")
    for hierarchy in base.iterdir() if base.is_dir() else []:
        top = hierarchy / root.lstrip("/")
        if not top.is_dir():
            continue
        for _ in range(50):
            dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
            for d in [*dirs, top]:
                with contextlib.suppress(OSError):
                    d.rmdir()
            if not top.exists():
                break
            time.sleep(0.1)
