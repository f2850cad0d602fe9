"""The local development stack: real etcd + kube-apiserver + controller-manager, Slurm 26.05, Temporal.

Everything listens on 127.0.0.0/8. Slow artefacts (the Kubernetes binaries, the Slurm rootfs) are cached
outside the repository in ``$SLINKY_CACHE_DIR`` (default ``~/.cache/slinky-temporal``); run-time state lives
in ``<repo>/.slinky-dev/`` (gitignored). ``up`` is idempotent; ``down`` stops exactly the processes that
``up`` started (by PID and start time) and unmounts exactly what it mounted.
See docs/dev-stack.md for the why of each step and the measured costs.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from slinky import wellknown
from slinky.dev import aggregation, images, local_volumes, real_nodes
from slinky.dev import webhook as dev_webhook
from slinky.dev.procs import ProcessTable

REPO = Path(__file__).resolve().parents[2]
STATE = Path(os.environ.get("SLINKY_DEV_DIR", REPO / ".slinky-dev"))
CACHE = Path(os.environ.get("SLINKY_CACHE_DIR", Path.home() / ".cache" / "slinky-temporal"))
KUBE_BIN = CACHE / "kube-v1.20.2" / "bin"
SLURM_TARBALL = CACHE / "slurm" / "rootfs-forky.tar.zst"
DEPLOY_DEV = REPO / "deploy" / "dev"

HOST_PACKAGES = {
    "go": "golang-go",
    "etcd": "etcd-server",
    "etcdctl": "etcd-client",
    "rsync": "rsync",
    "debootstrap": "debootstrap",
    "zstd": "zstd",
    "openssl": "openssl",
    "kubectl": "kubernetes-client",
    "mariadbd": "mariadb-server",
    "mariadb-install-db": "mariadb-server",
    "mariadb": "mariadb-client",
    "podman": "podman",
    "ssh": "openssh-client",  # the tests and users ssh into login pods
    "ssh-keyscan": "openssh-client",
    **real_nodes.RUNTIME_PACKAGES,
}
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
REFLECT2_DIR = Path("/usr/share/gocode/src/github.com/modern-go/reflect2")


@dataclass(frozen=True)
class Ports:
    """Loopback ports of the stack; chosen away from the usual defaults so a real cluster can coexist."""

    etcd_client: int = 23790
    etcd_peer: int = 23800
    apiserver: int = 16443
    kube_scheduler: int = 16451
    """kube-scheduler's insecure healthz and metrics (http)."""
    temporal: int = 17233
    temporal_ui: int = 18233
    temporal_http: int = 17243
    temporal_metrics: int = 17253
    slurmctld: int = 18817
    slurmd: int = 18818
    slurmrestd: int = 18820
    bridge_metrics: int = 17300
    """The bridge worker's metrics; the Temporal SDK's are on the next port."""
    mariadb: int = 13306
    """MariaDB on loopback and the real nodes' host address (``real_nodes.HOST_ADDRESS``)."""
    registry: int = 15000
    """The image registry (Debian's docker-registry), on the real nodes' bridge address (plain HTTP)."""


PORTS = Ports()
SLURM_CTL_HOST = "slinkyctl"
NODE_PREFIX = "slinky-node"
NODE_CPUS = 8
NODE_MEMORY_MIB = 16384
WORKER_PREFIX = "slinky-worker"
"""Simulated nodes for the pods kube-scheduler places outside the real nodes' namespaces: never registered in Slurm,
so the bridge neither registers nor taints them."""
WORKER_CPUS = 4
WORKER_MEMORY = "8Gi"
NODESET_PARTITION = "nodesets"
"""The stack's partition of NodeSet pods' Slurm nodes: those registering with the feature :data:`POD_FEATURE`
(a NodeSet's ``extraConf: Features=nodeset-pod``), which this partition's NodeSet selects, as an external
slurmctld's admin maps NodeSets to partitions. Not ``Nodes=ALL``: that would put the bridge's external nodes in it
too."""
POD_FEATURE = "nodeset-pod"
OPERATOR_NAMESPACE = "slurm"
"""The namespace of the stack's own Controller `slurm`, the one the dev stack's operator watches."""
DEMO_NAMESPACE = "slinky"
"""The namespace of the demo's managed cluster (deploy/examples/slurm-cluster.yaml); the stack's operator
watches it too."""
ADMIN_TOKEN_FILE = "admin-token"


def log(msg: str) -> None:
    print(f"[dev] {msg}", flush=True)


class StackError(RuntimeError):
    """A step of the stack failed; the message says what to do."""


def _run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=True, text=True, capture_output=True, **kw)  # type: ignore[call-overload, no-any-return]


def _with_progress(label: str, argv: list[str]) -> None:
    """Run a slow step, echoing its output and an elapsed-time ticker every 15 s."""
    start = time.monotonic()
    done = threading.Event()

    def tick() -> None:
        while not done.wait(15):
            log(f"{label}: still working, {time.monotonic() - start:.0f}s elapsed")

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        proc = subprocess.run(argv, text=True)
    finally:
        done.set()
    if proc.returncode != 0:
        raise StackError(f"{label} failed (exit {proc.returncode}); see the output above")
    log(f"{label}: done in {time.monotonic() - start:.0f}s")


def _wait(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:
            pass
        time.sleep(0.1)
    raise StackError(f"{what} not ready after {timeout:.0f}s; see {STATE / 'logs'}")


def _still_alive(procs: ProcessTable, name: str, seconds: float = 1.0) -> None:
    """Catch a process that dies at start (a bad flag, a port in use) before anything depends on it."""
    time.sleep(seconds)
    if procs.running(name) is None:
        raise StackError(f"{name} exited right after start; see {STATE / 'logs' / (name + '.log')}")


# --------------------------------------------------------------------------------------------- preflight
def preflight() -> None:
    if os.geteuid() != 0:
        raise StackError("slinky dev up needs root (it mounts a Slurm chroot): run it as root, e.g. sudo -E")
    if shutil.which("apt-get") is None:
        raise StackError("apt-get not found: the dev stack needs a Debian 12 machine (apt-get install ...)")
    missing = list(dict.fromkeys(pkg for tool, pkg in HOST_PACKAGES.items() if shutil.which(tool) is None))
    if not REFLECT2_DIR.is_dir():
        missing.append("golang-github-modern-go-reflect2-dev")
    if not (real_nodes.CNI_BIN / "bridge").is_file():
        missing.append("containernetworking-plugins")
    if missing:
        log(f"installing host packages: {' '.join(missing)}")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        if subprocess.run(["apt-get", "update", "-qq"], env=env).returncode != 0:
            raise StackError("apt-get update failed: check that the Debian archive is reachable")
        with _services_held():
            installed = subprocess.run(["apt-get", "install", "-y", "-qq", *missing], env=env).returncode == 0
        if not installed:
            raise StackError(f"apt-get install {' '.join(missing)} failed")
        if "mariadb-server" in missing:
            _disable_system_mariadb()


@contextlib.contextmanager
def _services_held() -> Iterator[None]:
    """No package starts its system service while installed (etcd-server's, mariadb-server's): a temporary
    ``policy-rc.d`` that exits 101. One already there (a container's) is left as it is, and kept afterwards."""
    created = False
    if not POLICY_RC_D.exists():
        POLICY_RC_D.write_text(
            "#!/bin/sh\n# Written by `slinky dev up` for the time of an apt-get install.\nexit 101\n"
        )
        POLICY_RC_D.chmod(0o755)
        created = True
    try:
        yield
    finally:
        if created:
            POLICY_RC_D.unlink(missing_ok=True)


def _disable_system_mariadb() -> None:
    """Undo the boot-time enabling of the mariadb-server package we just installed (``policy-rc.d`` only kept
    it from starting now): the stack runs its own mariadbd. Never called for an installation made by others."""
    if shutil.which("systemctl"):
        subprocess.run(["systemctl", "disable", "--quiet", "mariadb.service"], capture_output=True, check=False)
    if shutil.which("update-rc.d"):
        subprocess.run(["update-rc.d", "mariadb", "disable"], capture_output=True, check=False)
    log("mariadb-server installed; its system service was neither started nor left enabled")


def promtool() -> Path:
    return CACHE / "bin" / "promtool"


def ensure_promtool() -> Path:
    """promtool from Debian's ``prometheus`` package, extracted, not installed: installing the package would
    start a Prometheus server listening on every address."""
    path = promtool()
    if path.is_file():
        return path
    work = CACHE / "promtool-deb"
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run(["apt-get", "download", "prometheus"], cwd=work, check=True, capture_output=True)
    deb = next(work.glob("prometheus_*.deb"))
    _run(["dpkg-deb", "-x", str(deb), str(work / "root")])
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(work / "root" / "usr" / "bin" / "promtool", path)
    shutil.rmtree(work)
    return path


def build_id(script: str) -> str:
    """The id of what ``deploy/dev/<script>`` builds now (its ``build_id=`` line). A cache stamped with another
    id (built before a fix of the script) is rebuilt, never reused silently."""
    for line in (DEPLOY_DEV / script).read_text().splitlines():
        if line.startswith("build_id="):
            return line.split("=", 1)[1].strip().strip('"')
    raise StackError(f"deploy/dev/{script} has no build_id= line")


def _cached_id(stamp: Path) -> str:
    return stamp.read_text().strip() if stamp.is_file() else ""


def ensure_artifacts() -> None:
    ensure_promtool()
    if not all(
        (KUBE_BIN / b).is_file() for b in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
    ) or _cached_id(KUBE_BIN / "BUILD_ID") != build_id("build-kubernetes.sh"):
        log("building kube-apiserver, kube-controller-manager, kube-scheduler v1.20.2 (once; ~6-10 min)")
        _with_progress("kubernetes build", ["bash", str(DEPLOY_DEV / "build-kubernetes.sh"), str(KUBE_BIN)])
    if not all((KUBE_BIN / b).is_file() for b in ("kubelet", "kube-proxy", "pause")) or _cached_id(
        KUBE_BIN / "BUILD_ID.node"
    ) != build_id("build-kubernetes.sh"):
        log("building kubelet, kube-proxy v1.20.2 and the pause binary (once; ~4-6 min)")
        _with_progress(
            "kubernetes node build", ["bash", str(DEPLOY_DEV / "build-kubernetes.sh"), str(KUBE_BIN), "node"]
        )
    if not SLURM_TARBALL.is_file() or _cached_id(SLURM_TARBALL.with_name(SLURM_TARBALL.name + ".id")) != build_id(
        "build-slurm-rootfs.sh"
    ):
        log("building the Slurm 26.05 rootfs with debootstrap (once; ~2 min)")
        _with_progress("slurm rootfs", ["bash", str(DEPLOY_DEV / "build-slurm-rootfs.sh"), str(SLURM_TARBALL)])


# --------------------------------------------------------------------------------------------- kubernetes
def _kube_dir() -> Path:
    return STATE / "kube"


def _write_certs() -> None:
    d = _kube_dir()
    if (d / "apiserver.crt").is_file():
        return
    d.mkdir(parents=True, exist_ok=True)
    _run(["openssl", "genrsa", "-out", str(d / "ca.key"), "2048"])
    _run(
        [
            "openssl",
            "req",
            "-x509",
            "-new",
            "-key",
            str(d / "ca.key"),
            "-subj",
            "/CN=slinky-dev-ca",
            "-days",
            "3650",
            "-out",
            str(d / "ca.crt"),
        ]
    )
    aggregation.sign(d, "apiserver", "kube-apiserver", "ca", APISERVER_SANS)
    _run(["openssl", "genrsa", "-out", str(d / "sa.key"), "2048"])
    _run(["openssl", "rsa", "-in", str(d / "sa.key"), "-pubout", "-out", str(d / "sa.pub")])
    token = secrets.token_hex(24)
    (d / ADMIN_TOKEN_FILE).write_text(token + "\n")
    (d / "tokens.csv").write_text(f'{token},admin,admin,"system:masters"\n')
    for f in d.iterdir():
        f.chmod(0o600)
    ca = base64.b64encode((d / "ca.crt").read_bytes()).decode()
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "slinky-dev",
                "cluster": {
                    "server": f"https://127.0.0.1:{PORTS.apiserver}",
                    "certificate-authority-data": ca,
                },
            }
        ],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [{"name": "slinky-dev", "context": {"cluster": "slinky-dev", "user": "admin"}}],
        "current-context": "slinky-dev",
    }
    (d / "kubeconfig").write_text(json.dumps(kubeconfig, indent=2))
    (d / "kubeconfig").chmod(0o600)


APISERVER_SANS = (
    f"subjectAltName=IP:127.0.0.1,IP:{real_nodes.HOST_ADDRESS},IP:{real_nodes.SERVICE_NETWORK[1]},DNS:localhost,"
    "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,"
    f"DNS:kubernetes.default.svc.{real_nodes.CLUSTER_DOMAIN}\n"
)
"""What the apiserver's certificate names: loopback for the host, the bridge address where the real nodes reach
it (through the relay), and the ``kubernetes`` Service's ClusterIP and names for pods (in-cluster config)."""
REAL_NODES_MAX = real_nodes.BRIDGE_NODES_FIRST - 1
"""The clusters' real nodes the credentials are made for (``slinky dev up --real-nodes N``, N up to this)."""
REAL_BRIDGE_NODES_MAX = 2
"""The bridge's real nodes (``--real-bridge-nodes B``, B up to this): a 2-pod gang needs two."""
KUBE_PROXY_USER = "system:kube-proxy"


def _ensure_node_credentials() -> bool:
    """Re-sign the apiserver's certificate when its names are not ``APISERVER_SANS`` (a stack made before the
    real nodes), the apiserver's kubelet client certificate, and a token per real node (``system:node:NAME`` in
    ``system:nodes``: the Node authorizer's identity) and for kube-proxy. True when the apiserver must restart to
    read them."""
    d = _kube_dir()
    changed = False
    made_with = (d / "apiserver.ext").read_text() if (d / "apiserver.ext").is_file() else ""
    if made_with != APISERVER_SANS:
        aggregation.sign(d, "apiserver", "kube-apiserver", "ca", APISERVER_SANS, new_key=False)
        changed = True
    if not (d / "kubelet-client.crt").is_file():
        # O=system:masters: the kubelets' webhook authorization allows the apiserver's logs and exec.
        aggregation.sign(
            d, "kubelet-client", "kube-apiserver-kubelet-client", "ca", "extendedKeyUsage=clientAuth\n",
            org="system:masters",
        )  # fmt: skip
        changed = True
    tokens = _node_tokens()
    lines = (d / "tokens.csv").read_text().splitlines()
    users = {line.split(",")[1] for line in lines if line.count(",") >= 2}
    for user, token in tokens.items():
        if user not in users:
            group = "system:nodes" if user.startswith("system:node:") else ""
            lines.append(f'{token},{user},{user},"{group}"' if group else f"{token},{user},{user}")
            changed = True
    (d / "tokens.csv").write_text("\n".join(lines) + "\n")
    return changed


def _node_tokens() -> dict[str, str]:
    """The real nodes' and kube-proxy's tokens by user, made once and kept in ``kube/node-tokens.json``."""
    path = _kube_dir() / "node-tokens.json"
    tokens: dict[str, str] = json.loads(path.read_text()) if path.is_file() else {}
    wanted = [f"system:node:{node.name}" for node in _real_nodes(REAL_NODES_MAX, REAL_BRIDGE_NODES_MAX)]
    wanted.append(KUBE_PROXY_USER)
    for user in wanted:
        tokens.setdefault(user, secrets.token_hex(24))
    path.write_text(json.dumps(tokens, indent=2))
    path.chmod(0o600)
    return tokens


def _apiserver_ready() -> bool:
    import ssl

    d = _kube_dir()
    ctx = ssl.create_default_context(cafile=str(d / "ca.crt"))
    token = (d / ADMIN_TOKEN_FILE).read_text().strip()
    req = urllib.request.Request(
        f"https://127.0.0.1:{PORTS.apiserver}/readyz", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(req, context=ctx, timeout=2) as resp:
        return bool(resp.status == 200)


def start_kubernetes(procs: ProcessTable) -> None:
    _write_certs()
    aggregation.ensure_certs(_kube_dir())
    if _ensure_node_credentials() and procs.stop("kube-apiserver"):
        log("kube-apiserver restarted to read the real nodes' credentials")
    d = _kube_dir()
    logs = STATE / "logs"
    if procs.running("etcd") is None:
        (STATE / "etcd").mkdir(parents=True, exist_ok=True)
        procs.start(
            "etcd",
            [
                "etcd",
                "--name",
                "slinky-dev",
                "--data-dir",
                str(STATE / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{PORTS.etcd_client}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{PORTS.etcd_client}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{PORTS.etcd_peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{PORTS.etcd_peer}",
                "--initial-cluster",
                f"slinky-dev=http://127.0.0.1:{PORTS.etcd_peer}",
                "--quota-backend-bytes",
                str(4 * 1024**3),
            ],
            log=logs / "etcd.log",
        )
        log("etcd started")
    else:
        log("etcd already running")
    apiserver_argv = [
        str(KUBE_BIN / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{PORTS.etcd_client}",
        # The node agent's nodes are at 127.0.0.1 (InternalIP); their names resolve nowhere, and the
        # apiserver reaches a kubelet (kubectl logs) at the first address type it finds.
        "--kubelet-preferred-address-types=InternalIP,Hostname,InternalDNS,ExternalDNS,ExternalIP",
        f"--secure-port={PORTS.apiserver}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--cert-dir={d}",
        f"--tls-cert-file={d / 'apiserver.crt'}",
        f"--tls-private-key-file={d / 'apiserver.key'}",
        f"--client-ca-file={d / 'ca.crt'}",
        "--authorization-mode=Node,RBAC",
        # Presented to the real nodes' kubelets (logs, exec, port-forward): system:masters.
        f"--kubelet-client-certificate={d / 'kubelet-client.crt'}",
        f"--kubelet-client-key={d / 'kubelet-client.key'}",
        f"--token-auth-file={d / 'tokens.csv'}",
        "--endpoint-reconciler-type=none",
        "--service-account-issuer=https://kubernetes.default.svc",
        f"--service-account-key-file={d / 'sa.pub'}",
        f"--service-account-signing-key-file={d / 'sa.key'}",
        "--api-audiences=api",
        "--service-cluster-ip-range=10.96.0.0/16",
        "--disable-admission-plugins=ServiceAccount",
        # A namespace's annotations give its pods a node selector and tolerations: how the stack sends
        # the demo cluster's pods to the real nodes (docs/dev-stack.md, "Real nodes").
        "--enable-admission-plugins=PodNodeSelector,PodTolerationRestriction",
        "--allow-privileged=true",
        "--max-requests-inflight=800",
        "--max-mutating-requests-inflight=400",
        # minReplicas: 0 for a HorizontalPodAutoscaler of a NodeSet (alpha in 1.20).
        "--feature-gates=HPAScaleToZero=true",
        *aggregation.apiserver_flags(d),
    ]
    _run_with(procs, "kube-apiserver", apiserver_argv, logs)
    _wait("kube-apiserver", _apiserver_ready, timeout=90)
    aggregation.register(d / "kubeconfig", d)
    argv = [
        str(KUBE_BIN / "kube-controller-manager"),
        f"--kubeconfig={d / 'kubeconfig'}",
        # What a cluster runs, but the cloud's (route, service, cloud-node-lifecycle), node IPAM (the real
        # nodes' pod subnets are fixed) and CSR signing/approval (node credentials are tokens).
        f"--controllers={','.join(CONTROLLERS)}",
        f"--service-account-private-key-file={d / 'sa.key'}",
        f"--root-ca-file={d / 'ca.crt'}",
        "--feature-gates=HPAScaleToZero=true",
        # Kubernetes' default is 15 s; the stack's autoscaling demo and tests would wait 3x longer.
        "--horizontal-pod-autoscaler-sync-period=5s",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        "--secure-port=0",
        "--port=0",
        "--kube-api-qps=200",
        "--kube-api-burst=400",
    ]
    if _run_with(procs, "kube-controller-manager", argv, logs):
        _still_alive(procs, "kube-controller-manager")
    start_kube_scheduler(procs)


def _run_with(procs: ProcessTable, name: str, argv: list[str], logs: Path) -> bool:
    """``name`` running with exactly ``argv``: started, or restarted when it runs with other arguments (a flag
    the stack's code added since); True when it was (re)started."""
    pid = procs.running(name)
    if pid is not None and _cmdline(pid) != argv:
        log(f"{name} running with other arguments: restarting it")
        procs.stop(name)
        pid = None
    if pid is not None:
        log(f"{name} already running")
        return False
    procs.start(name, argv, log=logs / f"{name}.log")
    log(f"{name} started")
    return True


CONTROLLERS = (
    "attachdetach", "clusterrole-aggregation", "cronjob", "csrcleaner", "daemonset", "deployment", "disruption",
    "endpoint", "endpointslice", "endpointslicemirroring", "ephemeral-volume", "garbagecollector",
    "horizontalpodautoscaling", "job", "namespace", "nodelifecycle", "persistentvolume-binder",
    "persistentvolume-expander", "podgc", "pv-protection", "pvc-protection", "replicaset", "replicationcontroller",
    "resourcequota", "root-ca-cert-publisher", "serviceaccount", "serviceaccount-token", "statefulset", "ttl",
    "ttl-after-finished",
)  # fmt: skip
"""kube-controller-manager's controllers: node lifecycle and pod GC among them (a pod bound to a node that was
deleted is removed, as on a cluster)."""


def _scheduler_config() -> str:
    """kube-scheduler v1.20's configuration: the default profile, the admin kubeconfig, no leader election."""
    return (
        "apiVersion: kubescheduler.config.k8s.io/v1beta1\nkind: KubeSchedulerConfiguration\n"
        f"clientConnection:\n  kubeconfig: {_kube_dir() / 'kubeconfig'}\n  qps: 200\n  burst: 400\n"
        "leaderElection:\n  leaderElect: false\n"
        # Loopback only: v1.20 ignores --port with --config and would serve on 0.0.0.0:10251.
        f"healthzBindAddress: 127.0.0.1:{PORTS.kube_scheduler}\nmetricsBindAddress: 127.0.0.1:{PORTS.kube_scheduler}\n"
        "profiles:\n- schedulerName: default-scheduler\n"
    )


def start_kube_scheduler(procs: ProcessTable) -> None:
    """The default scheduler: places pods the bridge does not schedule (namespaces it does not manage).

    Its healthz and metrics are on a loopback port of ours: by default v1.20 serves them on every address, on
    the port the bridge benchmark's own kube-scheduler takes (``--port`` does not apply with ``--config``).
    ``--secure-port=0``: no HTTPS endpoint."""
    if procs.running("kube-scheduler") is not None:
        log("kube-scheduler already running")
        return
    config = _kube_dir() / "scheduler.yaml"
    config.write_text(_scheduler_config())
    procs.start(
        "kube-scheduler",
        [str(KUBE_BIN / "kube-scheduler"), f"--config={config}", "--secure-port=0"],
        log=STATE / "logs" / "kube-scheduler.log",
    )
    _wait("kube-scheduler", _scheduler_ready, timeout=30)
    log("kube-scheduler started (default-scheduler)")


def _scheduler_ready() -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{PORTS.kube_scheduler}/healthz", timeout=2) as resp:
        return bool(resp.status == 200)


CRD_DIRS = (REPO / "deploy" / "crds" / "third-party", REPO / "deploy" / "crds" / "slinky")


def install_crds() -> None:
    """Apply the CRDs the bridge reads (PodGroup, LeaderWorkerSet, JobSet) and ours (slinky.slurm.net); idempotent."""
    kubeconfig = str(_kube_dir() / "kubeconfig")
    for directory in CRD_DIRS:
        proc = subprocess.run(
            ["kubectl", "--kubeconfig", kubeconfig, "apply", "-f", str(directory)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise StackError(f"kubectl apply -f {directory} failed: {proc.stderr.strip()[:500]}")
    subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, "wait", "--for=condition=Established", "--timeout=30s", "crd", "--all"],
        capture_output=True,
        text=True,
        check=False,
    )


def _node_agent_argv(nodes: int, worker_nodes: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "slinky.dev.node_agent",
        "--kubeconfig",
        str(_kube_dir() / "kubeconfig"),
        "--nodes",
        str(nodes),
        "--prefix",
        NODE_PREFIX,
        "--cpu",
        str(NODE_CPUS),
        "--memory",
        f"{NODE_MEMORY_MIB}Mi",
        "--worker-nodes",
        str(worker_nodes),
        "--worker-prefix",
        WORKER_PREFIX,
        "--worker-cpu",
        str(WORKER_CPUS),
        "--worker-memory",
        WORKER_MEMORY,
    ]


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().split("\0")[:-1]
    except OSError:
        return []


def start_node_agent(procs: ProcessTable, nodes: int, worker_nodes: int = 0) -> None:
    """The simulated nodes' agent; restarted when its arguments changed."""
    argv = _node_agent_argv(nodes, worker_nodes)
    pid = procs.running("node-agent")
    if pid is not None and _cmdline(pid) == argv:
        log("node agent already running")
        return
    if pid is not None:
        log("node agent running with other arguments: restarting it")
        procs.stop("node-agent")
    procs.start("node-agent", argv, log=STATE / "logs" / "node-agent.log", cwd=REPO)
    _still_alive(procs, "node-agent")
    log(f"node agent started with {nodes} nodes and {worker_nodes} worker nodes")


# --------------------------------------------------------------------------------------------- mariadb
MARIADB_USER = "slinky"
"""The stack's MariaDB account: every privilege, WITH GRANT OPTION, from any address (pods and loopback)."""
MARIADB_SNAPSHOT_OPTION = "innodb-snapshot-isolation"
"""Off for slurmdbd (docs/slurm.md, Accounting); passed only to a server that knows it (10.11.8 and later)."""
SOCKET_PATH_MAX = 107
"""The longest path a unix socket may have (``sun_path`` is 108 bytes with the NUL)."""


def _mariadb_dir() -> Path:
    return STATE / "mariadb"


def mariadb_password_file() -> Path:
    return _mariadb_dir() / "password"


def _mariadb_socket() -> Path:
    return _mariadb_dir() / "mariadbd.sock"


def _mariadb_log() -> Path:
    return STATE / "logs" / "mariadb.log"


def mariadb_bind_address() -> str:
    """Loopback and the real nodes' host address, where their pods reach the host."""
    return f"127.0.0.1,{real_nodes.HOST_ADDRESS}"


def mariadbd_argv(
    binary: str, datadir: Path, socket: Path, pid_file: Path, *, port: int, bind: str, snapshot_isolation_off: bool
) -> list[str]:
    """Our mariadbd in the foreground: no option file of the system's (``--no-defaults`` must come first), our
    datadir, socket and port, no reverse DNS of clients (pods' addresses have no names; grants are by address)."""
    argv = [
        binary,
        "--no-defaults",
        f"--datadir={datadir}",
        f"--socket={socket}",
        f"--pid-file={pid_file}",
        f"--port={port}",
        f"--bind-address={bind}",
        "--user=root",
        "--skip-name-resolve",
    ]
    if snapshot_isolation_off:
        argv.append(f"--{MARIADB_SNAPSHOT_OPTION}=OFF")
    return argv


def mariadb_install_db_argv(binary: str, datadir: Path) -> list[str]:
    """Initialise a datadir once: root@localhost authenticates by unix socket (we run as root), no test db."""
    return [
        binary,
        "--no-defaults",
        f"--datadir={datadir}",
        "--user=root",
        "--auth-root-authentication-method=socket",
        "--skip-test-db",
    ]


def mariadb_user_sql(user: str, password: str) -> str:
    """Create or update the stack's user (idempotent): it may create databases and grant, from any address."""
    for value in (user, password):
        if not value or not value.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"unsafe MariaDB identifier or password: {value!r}")
    account = f"'{user}'@'%'"
    return (
        f"CREATE USER IF NOT EXISTS {account} IDENTIFIED BY '{password}';\n"
        f"ALTER USER {account} IDENTIFIED BY '{password}';\n"
        f"GRANT ALL PRIVILEGES ON *.* TO {account} WITH GRANT OPTION;\n"
    )


def mariadb_env_values(state: Path) -> dict[str, str]:
    """The env file's MariaDB keys; the host is the bridge's address, which both pods and the host reach."""
    return {
        "SLINKY_DEV_MARIADB_HOST": real_nodes.HOST_ADDRESS,
        "SLINKY_DEV_MARIADB_PORT": str(PORTS.mariadb),
        "SLINKY_DEV_MARIADB_USER": MARIADB_USER,
        "SLINKY_DEV_MARIADB_PASSWORD_FILE": str(state / "mariadb" / "password"),
    }


def _mariadb_binary(*names: str) -> str:
    for name in names:
        found = shutil.which(name) or (f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").is_file() else None)
        if found:
            return found
    raise StackError(f"MariaDB: {' or '.join(names)} not found; apt-get install mariadb-server")


def _mariadbd_accepts(binary: str, option: str) -> bool:
    """Whether this mariadbd knows ``option`` (its ``--help --verbose`` table of variables lists it)."""
    out = subprocess.run(
        [binary, "--no-defaults", "--help", "--verbose"], capture_output=True, text=True, timeout=30
    ).stdout
    return any(line.split(maxsplit=1)[:1] == [option] for line in out.splitlines())


def first_mariadb_error(text: str) -> str | None:
    """The first ``[ERROR]`` line of mariadbd's log text: the cause (the last line is only "Aborting")."""
    return next((line.strip()[:200] for line in text.splitlines() if "[ERROR]" in line), None)


def _mariadb_log_size() -> int:
    try:
        return _mariadb_log().stat().st_size
    except OSError:
        return 0


def _mariadb_error(what: str, log_from: int | None = None) -> StackError:
    """A StackError naming MariaDB and its log, quoting the log's first error since offset ``log_from`` (else
    its last line)."""
    log_file = _mariadb_log()
    error = None
    if log_from is not None:
        try:
            with log_file.open("rb") as f:
                f.seek(log_from)
                error = first_mariadb_error(f.read().decode(errors="replace"))
        except OSError:
            pass
    quoted = f"error: {error}" if error else f"last log line: {_last_line(log_file)}"
    return StackError(f"MariaDB {what} ({quoted}); see {log_file}")


def _mariadb_root(sql: str) -> subprocess.CompletedProcess[str]:
    """Run SQL as MariaDB's root over our unix socket (socket authentication: we are root)."""
    client = _mariadb_binary("mariadb", "mysql")
    return subprocess.run(
        [client, "--no-defaults", f"--socket={_mariadb_socket()}", "--user=root", "--batch"],
        input=sql,
        capture_output=True,
        text=True,
        timeout=30,
    )


def _mariadb_ping() -> bool:
    admin = _mariadb_binary("mariadb-admin", "mysqladmin")
    argv = [admin, "--no-defaults", f"--socket={_mariadb_socket()}", "--connect-timeout=2", "ping"]
    return subprocess.run(argv, capture_output=True, timeout=10).returncode == 0


def _mariadb_ready() -> bool:
    """``SELECT 1`` as the stack's user over TCP at the address the env file gives (the bridge's)."""
    env = mariadb_env_values(STATE)
    password = Path(env["SLINKY_DEV_MARIADB_PASSWORD_FILE"]).read_text().strip()
    proc = subprocess.run(
        [
            _mariadb_binary("mariadb", "mysql"),
            "--no-defaults",
            "--protocol=TCP",
            f"--host={env['SLINKY_DEV_MARIADB_HOST']}",
            f"--port={env['SLINKY_DEV_MARIADB_PORT']}",
            f"--user={env['SLINKY_DEV_MARIADB_USER']}",
            "--connect-timeout=2",
            "--batch",
            "--skip-column-names",
            "--execute=SELECT 1",
        ],
        env={**os.environ, "MYSQL_PWD": password},  # not in argv, where `ps` would show it
        capture_output=True,
        text=True,
        timeout=10,
    )
    return proc.returncode == 0 and proc.stdout.strip() == "1"


def _init_mariadb_datadir(datadir: Path) -> None:
    """``mariadb-install-db`` once, into a scratch directory renamed when complete: a failed or interrupted
    initialisation never leaves a half datadir that a later ``up`` would take for a good one."""
    if (datadir / "mysql").is_dir():
        return
    scratch = datadir.with_name(datadir.name + ".init")
    shutil.rmtree(scratch, ignore_errors=True)
    log_file = _mariadb_log()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log_from = _mariadb_log_size()
    with log_file.open("a") as out:
        proc = subprocess.run(
            mariadb_install_db_argv(_mariadb_binary("mariadb-install-db", "mysql_install_db"), scratch),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=_mariadb_dir(),
        )
    if proc.returncode != 0:
        raise _mariadb_error(f"datadir initialisation (mariadb-install-db) failed, exit {proc.returncode}", log_from)
    shutil.rmtree(datadir, ignore_errors=True)  # empty or partial: it has no mysql/ schema
    scratch.rename(datadir)
    log(f"MariaDB datadir initialised in {datadir}")


def _ensure_mariadb_user() -> None:
    path = mariadb_password_file()
    if not path.is_file():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(24) + "\n")
    path.chmod(0o600)
    proc = _mariadb_root(mariadb_user_sql(MARIADB_USER, path.read_text().strip()))
    if proc.returncode != 0:
        raise _mariadb_error(f"user {MARIADB_USER!r} could not be created: {proc.stderr.strip()[:300]}")


def start_mariadb(procs: ProcessTable) -> None:
    """Our own mariadbd (datadir, socket, port of ours; the system's service, if any, is left alone) and the
    stack's user. The real nodes' bridge must exist first: mariadbd listens on its address too."""
    directory = _mariadb_dir()
    pid = procs.running("mariadb")
    if pid is not None and f"--bind-address={mariadb_bind_address()}" not in _cmdline(pid):
        log("MariaDB listens on other addresses (an older stack's): restarting it, data kept")
        procs.stop("mariadb")
    if procs.running("mariadb") is None:
        socket = _mariadb_socket()
        if len(str(socket)) > SOCKET_PATH_MAX:
            raise StackError(f"MariaDB: socket path {socket} is too long; set SLINKY_DEV_DIR to a shorter path")
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)
        datadir = directory / "data"
        _init_mariadb_datadir(datadir)
        binary = _mariadb_binary("mariadbd", "mysqld")
        argv = mariadbd_argv(
            binary,
            datadir,
            socket,
            directory / "mariadbd.pid",
            port=PORTS.mariadb,
            bind=mariadb_bind_address(),
            snapshot_isolation_off=_mariadbd_accepts(binary, MARIADB_SNAPSHOT_OPTION),
        )
        log_from: int | None = _mariadb_log_size()
        procs.start("mariadb", argv, log=_mariadb_log())
        started = True
    else:
        log_from, started = None, False
    deadline = time.monotonic() + 60
    while not _mariadb_ping():
        if procs.running("mariadb") is None:
            raise _mariadb_error("(mariadbd) exited right after start", log_from)
        if time.monotonic() > deadline:
            raise _mariadb_error(f"not answering on {_mariadb_socket()} after 60s", log_from)
        time.sleep(0.2)
    _ensure_mariadb_user()
    try:
        _wait("MariaDB", _mariadb_ready, timeout=15)
    except StackError:
        raise _mariadb_error(
            f"does not accept user {MARIADB_USER!r} over TCP at {real_nodes.HOST_ADDRESS}:{PORTS.mariadb}"
        ) from None
    where = f"{real_nodes.HOST_ADDRESS}:{PORTS.mariadb} and 127.0.0.1:{PORTS.mariadb}"
    log(f"MariaDB {'up' if started else 'already running'} on {where} (user {MARIADB_USER})")


# --------------------------------------------------------------------------------------------- slurm
def _slurm_root() -> Path:
    return STATE / "slurm" / "root"


def slurm_root() -> Path:
    """The Slurm rootfs the stack's own Slurm daemons (and the tools run against them) run in."""
    return _slurm_root()


def _mounts_file() -> Path:
    return STATE / "slurm" / "mounts"


def _node_addr(i: int) -> str:
    return f"127.26.{i // 250}.{i % 250 + 1}"


def _slurm_conf() -> str:
    return f"""# Written by slinky dev up. Tuned for fast external-job scheduling (docs/dev-stack.md).
ClusterName=slinky
SlurmctldHost={SLURM_CTL_HOST}({real_nodes.HOST_ADDRESS})
SlurmctldPort={PORTS.slurmctld}
SlurmdPort={PORTS.slurmd}
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/slurm
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key
CredType=cred/slurm
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmctldPidFile=/run/slurmctld.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MaxNodeCount=2100
ReturnToService=2
SchedulerType=sched/backfill
SlurmctldParameters=enable_configless
SlurmdParameters=config_overrides
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=1,bf_interval=1,bf_continue,default_queue_depth=1000
MinJobAge=60
KillWait=5
CompleteWait=0
MessageTimeout=10
SlurmdTimeout=30
InactiveLimit=0
Waittime=0
MaxJobCount=100000
NodeSet=bridgens Feature={wellknown.DEFAULT_PARTITION}
NodeSet=realns Feature=real
NodeSet=podns Feature={POD_FEATURE}
PartitionName={wellknown.DEFAULT_PARTITION} Nodes=bridgens Default=YES State=UP MaxTime=INFINITE
PartitionName=real Nodes=realns State=UP MaxTime=INFINITE
NodeSet=realbridgens Feature={real_nodes.BRIDGE_PARTITION}
PartitionName={real_nodes.BRIDGE_PARTITION} Nodes=realbridgens State=UP MaxTime=INFINITE
PartitionName={NODESET_PARTITION} Nodes=podns State=UP MaxTime=INFINITE
"""


def _chroot(*argv: str, user: str | None = None) -> list[str]:
    base = ["chroot"]
    if user:
        base.append(f"--userspec={user}:{user}")
    return [*base, str(_slurm_root()), "/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", *argv]


def _rootfs_extracted(root: Path) -> bool:
    """Whether the chroot holds Slurm. ``usr/sbin/slurmctld`` is an absolute symlink into the chroot's
    /etc/alternatives, which does not resolve from the host: test the link itself, never its target (following
    it once made ``up`` extract the tarball again over a live root)."""
    return os.path.lexists(root / "usr" / "sbin" / "slurmctld") and _cached_id(
        root / "etc" / "slinky-rootfs-id"
    ) == build_id("build-slurm-rootfs.sh")


def _write_slurm_conf() -> bool:
    """Write slurm.conf; True when its content changed (a running slurmctld must then reconfigure)."""
    path = _slurm_root() / "etc" / "slurm" / "slurm.conf"
    path.parent.mkdir(exist_ok=True)
    wanted = _slurm_conf()
    try:
        if path.read_text() == wanted:
            return False
    except OSError:
        pass
    path.write_text(wanted)
    return True


def _reconfigure_slurmctld() -> None:
    """``scontrol reconfigure``: slurmctld re-execs itself in place (same PID, foreground), keeping its state."""
    _run(_chroot("/usr/bin/scontrol", "reconfigure"))
    _wait("slurmctld after reconfigure", lambda: "UP" in _run(_chroot("/usr/bin/scontrol", "ping")).stdout, 30)
    log("slurm.conf changed: slurmctld reconfigured")


def _prepare_slurm_root(nodes: int) -> bool:
    """Extract the chroot if needed and write its configuration; True when slurm.conf changed."""
    root = _slurm_root()
    if not _rootfs_extracted(root):
        log("extracting the cached Slurm rootfs")
        root.mkdir(parents=True, exist_ok=True)
        _run(["tar", "-C", str(root), "-I", "zstd", "-xf", str(SLURM_TARBALL)])
    etc = root / "etc"
    conf_changed = _write_slurm_conf()
    (etc / "slurm" / "cgroup.conf").write_text("CgroupPlugin=disabled\n")
    key = etc / "slurm" / "jwt_hs256.key"
    if not key.is_file():
        key.write_bytes(secrets.token_bytes(32))
    slurm_key = etc / "slurm" / "slurm.key"
    if not slurm_key.is_file():
        slurm_key.write_bytes(secrets.token_bytes(SLURM_KEY_BYTES))
    _slurm_user_uid_401(root)
    hosts = [f"127.0.0.1 localhost {SLURM_CTL_HOST}"]
    # Every node name must resolve inside the chroot, or each allocation stalls slurmctld ~10 s per node.
    hosts += [f"{_node_addr(i)} {NODE_PREFIX}-{i}" for i in range(1, max(nodes, 64) + 1)]
    (etc / "hosts").write_text("\n".join(hosts) + "\n")
    (etc / "nsswitch.conf").write_text("passwd: files\ngroup: files\nshadow: files\nhosts: files\n")
    (etc / "resolv.conf").write_text("")
    passwd = (etc / "passwd").read_text()
    if "slurmrest:" not in passwd:
        _run(["chroot", str(root), "/usr/sbin/useradd", "--system", "--no-create-home", "slurmrest"])
    for sub in ("var/spool/slurmctld", "var/log/slurm", "var/spool/slurmd"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    _run(
        [
            "chroot",
            str(root),
            "/bin/chown",
            "-R",
            "slurm:slurm",
            "/var/spool/slurmctld",
            "/var/log/slurm",
            "/etc/slurm/jwt_hs256.key",
        ]
    )
    key.chmod(0o600)
    # slurmctld (SlurmUser) and slurmrestd (slurmrest) read the key; nobody else.
    _run(["chroot", str(root), "/bin/chown", "slurm:slurmrest", "/etc/slurm/slurm.key"])
    slurm_key.chmod(0o640)
    return conf_changed


SLURM_KEY_BYTES = 1024
"""The stack's slurm.key (auth/slurm), random bytes as upstream's chart makes one."""

SLURM_UID = 401
"""The SlurmUser's uid and gid in upstream's images and ours (docs/images.md): the chroot's `slurm` moves there
too, since slurmd in a NodeSet pod accepts slurmctld's messages only from its own SlurmUser's uid."""


def _slurm_user_uid_401(root: Path) -> None:
    """Move the chroot's ``slurm`` user and group to :data:`SLURM_UID` (Debian gives it 64030), with its files,
    as deploy/images/build-slurm.sh does for the images. Only while slurmctld is stopped; idempotent."""
    entry = next((line for line in (root / "etc" / "passwd").read_text().splitlines() if line.startswith("slurm:")), "")
    fields = entry.split(":")
    if len(fields) < 4 or fields[2] == str(SLURM_UID):
        return
    old_uid, old_gid = fields[2], fields[3]
    log(f"moving the chroot's SlurmUser slurm from uid {old_uid} to {SLURM_UID}, as in the images")
    _run(["chroot", str(root), "/usr/sbin/groupmod", "--gid", str(SLURM_UID), "slurm"])
    _run(["chroot", str(root), "/usr/sbin/usermod", "--uid", str(SLURM_UID), "--gid", str(SLURM_UID), "slurm"])
    _run(["find", str(root), "-xdev", "-uid", old_uid, "-exec", "chown", "-h", str(SLURM_UID), "{}", "+"])
    _run(["find", str(root), "-xdev", "-gid", old_gid, "-exec", "chgrp", "-h", str(SLURM_UID), "{}", "+"])


def _mount_slurm_root() -> None:
    root = _slurm_root()
    recorded = _mounts_file().read_text().split() if _mounts_file().is_file() else []
    active = Path("/proc/mounts").read_text()
    wanted = [
        ("proc", ["-t", "proc", "proc"]),
        ("sys", ["-t", "sysfs", "-o", "ro", "sysfs"]),
        ("dev", ["--bind", "/dev"]),
        ("run", ["-t", "tmpfs", "-o", "mode=0755", "tmpfs"]),
    ]
    for sub, args in wanted:
        target = root / sub
        target.mkdir(exist_ok=True)
        if f" {target} " in active:
            continue
        _run(["mount", *args, str(target)])
        recorded.append(str(target))
    _mounts_file().write_text("\n".join(dict.fromkeys(recorded)) + "\n")


def _unmount_slurm_root() -> None:
    if not _mounts_file().is_file():
        return
    active = Path("/proc/mounts").read_text()
    for target in reversed(_mounts_file().read_text().split()):
        if f" {target} " in active:
            subprocess.run(["umount", "-l", target], check=False)
    _mounts_file().unlink()


def _rest_ready() -> bool:
    """slurmrestd answers; a JWT ping (auth included) is checked by the tests, not here."""
    jwt = STATE / "slurm" / "jwt"
    headers = {"X-SLURM-USER-NAME": "slurm"}
    if jwt.is_file():
        headers["X-SLURM-USER-TOKEN"] = jwt.read_text().strip()
    req = urllib.request.Request(f"http://127.0.0.1:{PORTS.slurmrestd}/slurm/v0.0.44/ping", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=2) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError as err:  # 401 before a token exists still means "serving"
        return not jwt.is_file() and err.code == 401


SLURM_DAEMONS = ("slurmctld", "slurmrestd")


RESTART_KEYS = ("AuthType", "CredType", "SlurmctldHost")
"""slurm.conf keys whose change a reconfigure does not apply: slurmctld restarts (docs/dev-stack.md)."""


def _restart_needed() -> bool:
    """Whether the chroot's slurm.conf differs from the one to write in a key of :data:`RESTART_KEYS` (a stack
    started by an older checkout)."""
    path = _slurm_root() / "etc" / "slurm" / "slurm.conf"
    if not path.is_file():
        return False

    def lines(text: str) -> set[str]:
        return {line for line in text.splitlines() if line.split("=", 1)[0] in RESTART_KEYS}

    return lines(path.read_text()) != lines(_slurm_conf())


def start_slurm(procs: ProcessTable, nodes: int) -> None:
    """Start whichever of slurmctld and slurmrestd is not running, in that order, and leave the others alone:
    slurmctld's saved state (StateSaveLocation) and the chroot are kept, as a supervisor would."""
    if procs.running("munged") is not None or (procs.running("slurmctld") is not None and _restart_needed()):
        # An authentication or address change needs a restart (a reconfigure keeps the old plugin), and the
        # SlurmUser's uid moves while slurmctld is stopped. munged: a stack from before auth/slurm.
        log(f"slurm.conf changed in {', '.join(RESTART_KEYS)}: restarting slurmctld and slurmrestd")
        for name in ("slurmrestd", "slurmctld", "munged"):
            procs.stop(name)
    missing = [n for n in SLURM_DAEMONS if procs.running(n) is None]
    if not missing:
        log("Slurm already running")
        if _write_slurm_conf():
            _reconfigure_slurmctld()
        _ensure_slurm_nodes(nodes)
        if not (STATE / "slurm" / "jwt").is_file():
            _mint_jwt()
        return
    conf_changed = _prepare_slurm_root(nodes)
    _mount_slurm_root()
    if "slurmctld" in missing:
        start_slurmctld(procs)
    if "slurmrestd" in missing:
        _start_slurmrestd(procs)
    if conf_changed and "slurmctld" not in missing:
        _reconfigure_slurmctld()
    _ensure_slurm_nodes(nodes)
    if not (STATE / "slurm" / "jwt").is_file():
        _mint_jwt()
    log(f"Slurm up ({', '.join(missing)} started): slurmrestd on 127.0.0.1:{PORTS.slurmrestd}, {nodes} external nodes")


def _start_slurmrestd(procs: ProcessTable) -> None:
    rest = _chroot(
        "/usr/sbin/slurmrestd",
        "-a",
        "rest_auth/jwt",
        "-s",
        "openapi/slurmctld",
        f"127.0.0.1:{PORTS.slurmrestd}",
        user="slurmrest",
    )
    rest.insert(rest.index("PATH=/usr/sbin:/usr/bin:/sbin:/bin"), "SLURM_JWT=daemon")
    procs.start("slurmrestd", rest, log=STATE / "logs" / "slurmrestd.log")
    _wait("slurmrestd", _rest_ready, timeout=30)


def start_slurmctld(procs: ProcessTable) -> None:
    """slurmctld in the foreground, keeping its saved state (jobs, dynamic nodes) across restarts."""
    # unshare --uts gives slurmctld the hostname that matches SlurmctldHost; exec keeps the PID.
    procs.start(
        "slurmctld",
        [
            "unshare",
            "--uts",
            "--",
            "sh",
            "-c",
            f'hostname {SLURM_CTL_HOST} && exec "$@"',
            "sh",
            *_chroot("/usr/sbin/slurmctld", "-D", "-i"),
        ],
        log=STATE / "logs" / "slurmctld.log",
    )
    _wait("slurmctld", lambda: _run(_chroot("/usr/bin/scontrol", "ping")).stdout.count("UP") > 0, timeout=30)


def _restart(name: str, start: Callable[[ProcessTable], None], kill: bool, down_seconds: float) -> None:
    procs = ProcessTable(STATE / "pids")
    pid = procs.running(name)
    if pid is not None and kill:
        os.kill(pid, 9)
    procs.stop(name)
    time.sleep(down_seconds)
    start(procs)


def restart_slurmctld(*, kill: bool = False, down_seconds: float = 0.0) -> None:
    """Stop slurmctld (SIGTERM, or SIGKILL to simulate a crash), wait, start it again (tests of outages)."""
    _restart("slurmctld", start_slurmctld, kill, down_seconds)


def restart_temporal(*, kill: bool = False, down_seconds: float = 0.0) -> None:
    """Stop the Temporal server (SIGKILL: a crash), wait, start it again on the same SQLite file."""
    _restart("temporal", start_temporal, kill, down_seconds)


def _ensure_slurm_nodes(nodes: int) -> None:
    """One Slurm external node per Kubernetes node, same CPUs and memory, in the bridge partition."""
    out = _run(_chroot("/usr/bin/sinfo", "-h", "-N", "-o", "%N")).stdout.split()
    existing = set(out)
    for i in range(1, nodes + 1):
        name = f"{NODE_PREFIX}-{i}"
        if name in existing:
            continue
        _run(
            _chroot(
                "/usr/bin/scontrol",
                "create",
                f"NodeName={name}",
                f"NodeAddr={_node_addr(i)}",
                "State=EXTERNAL",
                "Sockets=1",
                f"CoresPerSocket={NODE_CPUS}",
                "ThreadsPerCore=1",
                f"CPUs={NODE_CPUS}",
                f"RealMemory={NODE_MEMORY_MIB}",
                f"Feature={wellknown.DEFAULT_PARTITION}",
            )
        )


def _mint_jwt() -> None:
    out = _run(_chroot("/usr/bin/scontrol", "token", "username=slurm", "lifespan=31536000")).stdout.strip()
    token = out.split("=", 1)[1] if out.startswith("SLURM_JWT=") else out
    path = STATE / "slurm" / "jwt"
    path.write_text(token + "\n")
    path.chmod(0o600)


def _netns_file() -> Path:
    return STATE / "slurm" / "netns"


def _slurmd_addrs(i: int) -> tuple[str, str]:
    """(host side, node side) of node i's /30 on its veth pair."""
    return f"10.226.27.{4 * i + 1}", f"10.226.27.{4 * i + 2}"


def start_slurmd(procs: ProcessTable, count: int) -> None:
    """M real slurmd daemons (dynamic nodes dynN, partition ``real``), each in a network namespace of ours.

    Why namespaces: ``slurmd -Z`` nodes cannot set a port, so two on one network stack would collide on
    SlurmdPort. Each gets a veth pair with a /30 in 10.226.27.0/24, its own hostname, and a private mount
    of /etc/hosts that points ``slinkyctl`` at the host side of its veth (slurmctld listens on all
    addresses of the host namespace).
    """
    root = _slurm_root()
    made = _netns_file().read_text().split() if _netns_file().is_file() else []
    for i in range(1, count + 1):
        name = f"slurmd-{i}"
        if procs.running(name) is not None:
            continue
        ns, host_if, node_if = f"slinky-d{i}", f"slkh{i}", f"slkn{i}"
        host_ip, node_ip = _slurmd_addrs(i)
        if ns not in _run(["ip", "netns", "list"]).stdout.split():
            _run(["ip", "netns", "add", ns])
            made.append(ns)
            _run(["ip", "link", "add", host_if, "type", "veth", "peer", "name", node_if])
            _run(["ip", "link", "set", node_if, "netns", ns])
            _run(["ip", "addr", "add", f"{host_ip}/30", "dev", host_if])
            _run(["ip", "link", "set", host_if, "up"])
            for cmd in (
                ["ip", "addr", "add", f"{node_ip}/30", "dev", node_if],
                ["ip", "link", "set", node_if, "up"],
                ["ip", "link", "set", "lo", "up"],
            ):
                _run(["ip", "netns", "exec", ns, *cmd])
        # slurmctld's address (SlurmctldHost) is the real nodes' host address, reached through the host.
        _run(["ip", "netns", "exec", ns, "ip", "route", "replace", "default", "via", host_ip])
        _netns_file().write_text("\n".join(dict.fromkeys(made)) + "\n")
        hosts = STATE / "slurm" / f"hosts-dyn{i}"
        hosts.write_text(f"127.0.0.1 localhost\n{host_ip} {SLURM_CTL_HOST}\n{node_ip} dyn{i}\n")
        (root / "var" / "spool" / "slurmd").mkdir(parents=True, exist_ok=True)
        conf = f"CPUs=2 RealMemory=1000 Feature=real NodeAddr={node_ip}"
        script = f'mount --bind "$1" "$2/etc/hosts" && hostname dyn{i} && shift 2 && exec "$@"'
        procs.start(
            name,
            [
                "ip",
                "netns",
                "exec",
                ns,
                "unshare",
                "--mount",
                "--uts",
                "--",
                "sh",
                "-c",
                script,
                "sh",
                str(hosts),
                str(root),
                *_chroot("/usr/sbin/slurmd", "-D", "-Z", "--conf", conf),
            ],
            log=STATE / "logs" / f"{name}.log",
        )
    if count:
        names = {f"dyn{i}" for i in range(1, count + 1)}
        _wait(
            f"{count} slurmd nodes",
            lambda: (
                names
                <= set(
                    _run(_chroot("/usr/bin/sinfo", "-h", "-N", "-p", "real", "-t", "idle", "-o", "%N")).stdout.split()
                )
            ),
            timeout=30,
        )
        log(f"{count} real slurmd nodes idle in partition 'real'")


def forget_stale_slurmd_nodes(procs: ProcessTable) -> None:
    """Delete dynamic ``dynN`` nodes whose slurmd no longer runs (slurmctld keeps them in its saved state
    across ``down``/``up``). Left in place, slurmctld keeps pinging their addresses, which no namespace of
    ours holds any more, so the pings would leave the machine."""
    sinfo = _chroot("/usr/bin/sinfo", "-h", "-N", "-p", "real", "-o", "%N")
    listed = subprocess.run(sinfo, text=True, capture_output=True, check=False).stdout.split()
    stale = [n for n in dict.fromkeys(listed) if n.startswith("dyn") and procs.running(f"slurmd-{n[3:]}") is None]
    for name in stale:
        subprocess.run(_chroot("/usr/bin/scontrol", "delete", f"nodename={name}"), capture_output=True, check=False)
    if stale:
        log(f"forgot {len(stale)} slurmd node(s) whose daemon is gone: {', '.join(stale)}")


def _delete_netns() -> None:
    if not _netns_file().is_file():
        return
    existing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    for ns in _netns_file().read_text().split():
        if ns in existing:
            subprocess.run(["ip", "netns", "delete", ns], check=False)  # also removes its veth pair
    _netns_file().unlink()


# --------------------------------------------------------------------------------------------- real nodes
REAL_NODE_TAINT = {"key": "node.slinky.slurm.net/real", "value": "true", "effect": "NoSchedule"}
"""Real nodes take only the pods that tolerate this (the images' pods); every other pod lands on a simulated node
as before, where no image needs to exist."""


def real_nodes_state() -> Path:
    return STATE / "real-nodes"


def _real_stack() -> real_nodes.Stack:
    tokens = _node_tokens()
    return real_nodes.Stack(
        state=real_nodes_state(),
        bin=KUBE_BIN,
        ca=_kube_dir() / "ca.crt",
        api_server=f"https://{real_nodes.HOST_ADDRESS}:{PORTS.apiserver}",
        node_tokens={u.removeprefix("system:node:"): t for u, t in tokens.items() if u.startswith("system:node:")},
        proxy_token=tokens[KUBE_PROXY_USER],
        registry=registry_address(),
        logs=STATE / "logs",
    )


def _real_nodes(count: int, bridge: int) -> list[real_nodes.RealNode]:
    """The clusters' real nodes 1..count and the bridge's ``BRIDGE_NODES_FIRST``.. (``bridge`` of them)."""
    first = real_nodes.BRIDGE_NODES_FIRST
    return [real_nodes.RealNode(i) for i in range(1, count + 1)] + [
        real_nodes.RealNode(i) for i in range(first, first + bridge)
    ]


def _cluster_services() -> None:
    """What the real nodes' pods reach through kube-proxy: the ``kubernetes`` Service's endpoints (the apiserver
    reconciles none: ``--endpoint-reconciler-type=none``) at the relay on the bridge."""
    endpoints = {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": "kubernetes", "namespace": "default"},
        "subsets": [
            {
                "addresses": [{"ip": real_nodes.HOST_ADDRESS}],
                "ports": [{"name": "https", "port": PORTS.apiserver, "protocol": "TCP"}],
            }
        ],
    }
    with dev_webhook.KubeSync(_kube_dir() / "kubeconfig") as kube:
        kube.apply("/api/v1/namespaces/default/endpoints", endpoints)
        for namespace, name, port, target in HOST_SERVICES:
            kube.label_namespace(namespace, {}, create=True)
            for obj in real_nodes.host_service(namespace, name, port, target):
                kind = "services" if obj["kind"] == "Service" else "endpoints"
                kube.apply(f"/api/v1/namespaces/{namespace}/{kind}", obj)


HOST_SERVICES = (
    ("temporal", "temporal-frontend", 7233, PORTS.temporal),
    ("slinky-dev", "slurmrestd", 6820, PORTS.slurmrestd),
)
"""(namespace, Service, port, host port): the stack's Temporal and slurmrestd as in-cluster Services, through the
host relay on the bridge, so the charts' workers reach them from a real node as on a cluster
(``temporal-frontend.temporal.svc:7233`` is the charts' default Temporal address)."""


def start_cluster_network(procs: ProcessTable) -> None:
    """The bridge of the real nodes, the API server's relay on it, and cluster DNS (dnsmasq + its feeder)."""
    real_nodes.ensure_bridge()
    relay = f"{real_nodes.HOST_ADDRESS}:{PORTS.apiserver}"
    if procs.running("apiserver-relay") is None:
        procs.start(
            "apiserver-relay",
            [sys.executable, "-m", "slinky.dev.tcp_relay", relay, f"127.0.0.1:{PORTS.apiserver}"],
            log=STATE / "logs" / "apiserver-relay.log",
            cwd=REPO,
        )
        _still_alive(procs, "apiserver-relay")
    pairs = sorted({(f"{real_nodes.HOST_ADDRESS}:{t}", f"127.0.0.1:{t}") for *_, t in HOST_SERVICES})
    if procs.running("host-relay") is None:
        procs.start(
            "host-relay",
            [sys.executable, "-m", "slinky.dev.tcp_relay", *(a for pair in pairs for a in pair)],
            log=STATE / "logs" / "host-relay.log",
            cwd=REPO,
        )
        _still_alive(procs, "host-relay")
    _cluster_services()
    dns = STATE / "dns"
    dns.mkdir(parents=True, exist_ok=True)
    hosts = dns / "hosts"
    if not hosts.exists():
        hosts.write_text("")
    if procs.running("dnsmasq") is None:
        procs.start(
            "dnsmasq",
            [
                "dnsmasq",
                "--keep-in-foreground",
                "--log-facility=-",
                f"--pid-file={dns / 'dnsmasq.pid'}",
                f"--listen-address={real_nodes.HOST_ADDRESS}",
                "--bind-interfaces",
                "--except-interface=lo",
                "--no-resolv",
                "--no-hosts",
                f"--addn-hosts={hosts}",
                f"--local=/{real_nodes.CLUSTER_DOMAIN}/",
                "--local-ttl=5",
                "--user=root",
            ],
            log=STATE / "logs" / "dnsmasq.log",
        )
        _still_alive(procs, "dnsmasq")
    if procs.running("cluster-dns") is None:
        procs.start(
            "cluster-dns",
            [
                sys.executable,
                "-m",
                "slinky.dev.cluster_dns",
                "--kubeconfig",
                str(_kube_dir() / "kubeconfig"),
                "--hosts",
                str(hosts),
                "--dnsmasq-pid-file",
                str(dns / "dnsmasq.pid"),
            ],
            log=STATE / "logs" / "cluster-dns.log",
            cwd=REPO,
        )
        _still_alive(procs, "cluster-dns")
    start_registry(procs)
    start_local_volumes(procs)
    log(f"cluster network: API server relay, DNS and the image registry on {real_nodes.HOST_ADDRESS}")


VOLUMES_DIR = STATE / "volumes"
"""Where the local volume provisioner makes the real nodes' PersistentVolumes (one directory per claim)."""


def start_local_volumes(procs: ProcessTable) -> None:
    """The default StorageClass ``slinky-local-path`` and its provisioner (``slinky.dev.local_volumes``):
    a claim gets a host-path volume on the node its pod was scheduled to, as a small cluster's
    local-path-provisioner gives."""
    with dev_webhook.KubeSync(_kube_dir() / "kubeconfig") as kube:
        kube.apply("/apis/storage.k8s.io/v1/storageclasses", local_volumes.storage_class())
    if procs.running("local-volumes") is None:
        procs.start(
            "local-volumes",
            [
                sys.executable,
                "-m",
                "slinky.dev.local_volumes",
                "--kubeconfig",
                str(_kube_dir() / "kubeconfig"),
                "--root",
                str(VOLUMES_DIR),
            ],
            log=STATE / "logs" / "local-volumes.log",
            cwd=REPO,
        )
        _still_alive(procs, "local-volumes")


REGISTRY_DIR = CACHE / "registry"
"""The registry's storage: outside the repository and the stack's state, so built images outlive ``dev down``."""


def registry_address() -> str:
    """``HOST:PORT`` of the stack's image registry, as the nodes pull from it and ``make images`` pushes to it."""
    return f"{real_nodes.HOST_ADDRESS}:{PORTS.registry}"


def start_registry(procs: ProcessTable) -> None:
    """Debian's docker-registry (distribution 2.8) on the nodes' bridge, plain HTTP, no authentication: the
    registry a user's cluster pulls from, here. Its storage is cached beside the build cache."""
    if procs.running("registry") is not None:
        return
    REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
    config = STATE / "registry.yml"
    config.write_text(
        json.dumps(
            {
                "version": 0.1,
                "log": {"level": "warn", "fields": {"service": "registry"}},
                "storage": {"filesystem": {"rootdirectory": str(REGISTRY_DIR)}, "delete": {"enabled": True}},
                "http": {"addr": registry_address(), "headers": {"X-Content-Type-Options": ["nosniff"]}},
            }
        )
    )
    procs.start("registry", ["docker-registry", "serve", str(config)], log=STATE / "logs" / "registry.log")
    _wait("the image registry", _registry_ready, timeout=30)


def push_images(nodes: list[real_nodes.RealNode]) -> None:
    """The images the real nodes pull, in the stack's registry (``slinky.dev.images``): the nodes' small images
    (``slinky/busybox``, ``slinky/pause``) and the Slurm images, built first when missing or out of date (then
    the ``nodes`` forget the old ones they pulled under the same tags)."""
    state = real_nodes_state()
    archives = [
        (state / "busybox.oci.tar", real_nodes.TOOLBOX_IMAGE),
        (state / "pause.oci.tar", real_nodes.PAUSE_IMAGE),
    ]
    registry = registry_address()
    images.push_archives(registry, ((path, f"slinky/{image.rsplit('/', 1)[1]}") for path, image in archives), log)
    rootfs_id = _cached_id(SLURM_TARBALL.with_name(SLURM_TARBALL.name + ".id"))
    if images.ensure_slurm_images(registry, REGISTRY_DIR / "slurm-images.id", rootfs_id, log):
        names = images.pulled_names(registry, images.slurm_pushes())
        for node in nodes:
            real_nodes.forget_images(_real_stack(), node, names)
    images.ensure_nginx_image(registry, REGISTRY_DIR / "nginx-image.id", log)


def _registry_ready() -> bool:
    return images.registry_ready(registry_address())


def build_images(*, push: bool) -> int:
    """``make images``: every image built again (the Slurm images, the project's), then pushed to the running
    stack's registry, replacing what it had. Returns the exit status."""
    try:
        images.build_slurm_images(log)
        images.build_nginx_image(log)
        log("building the project's image (deploy/images/build.sh)")
        subprocess.run(["bash", str(REPO / "deploy" / "images" / "build.sh")], check=True)
    except (StackError, RuntimeError, subprocess.CalledProcessError) as err:
        log(f"image build failed: {err}")
        return 1
    if not push:
        return 0
    registry = registry_address()
    if not images.registry_ready(registry):
        log(f"built; not pushed: the stack's registry ({registry}) is not running (`make dev-up` starts it)")
        return 1
    rootfs_id = _cached_id(SLURM_TARBALL.with_name(SLURM_TARBALL.name + ".id"))
    images.push(registry, images.slurm_pushes(), log, force=True)
    (REGISTRY_DIR / "slurm-images.id").write_text(images.slurm_sources_id(rootfs_id) + "\n")
    images.push(registry, images.nginx_pushes(), log, force=True)
    (REGISTRY_DIR / "nginx-image.id").write_text(images.nginx_sources_id() + "\n")
    images.push(registry, [images.project_push(images.project_version())], log, force=True)
    log(f"project image: {images.ensure_project_image(registry, log)}")
    return 0


REAL_NAMESPACES = (DEMO_NAMESPACE,)
"""Namespaces whose pods all run on the real nodes (docs/dev-stack.md, "Real nodes"): the demo cluster's, where
deploy/examples/slurm-cluster.yaml applies unchanged."""


def ensure_real_namespaces() -> None:
    """Each of :data:`REAL_NAMESPACES` exists with ``real_nodes.namespace_annotations`` (created, or annotated
    in place: a ``kubectl apply`` of a manifest's Namespace keeps them). One still terminating is left alone."""
    annotations = real_nodes.namespace_annotations(REAL_NODE_TAINT)
    with dev_webhook.KubeSync(_kube_dir() / "kubeconfig") as kube:
        for name in REAL_NAMESPACES:
            current = kube.request("GET", f"/api/v1/namespaces/{name}")
            if current.status_code == 404:
                kube.request(
                    "POST", "/api/v1/namespaces", json={"metadata": {"name": name, "annotations": annotations}}
                )
            elif current.json().get("status", {}).get("phase") == "Terminating":
                log(f"namespace {name} is terminating: its pods go to the real nodes once `dev up` runs again")
            else:
                patch = {"metadata": {"annotations": annotations}}
                headers = {"Content-Type": "application/merge-patch+json"}
                kube.request("PATCH", f"/api/v1/namespaces/{name}", json=patch, headers=headers)


def start_real_nodes(procs: ProcessTable, count: int, bridge: int = 0) -> None:
    """``count`` real nodes for the Slurm clusters and ``bridge`` for the bridge (docs/dev-stack.md, "Real
    nodes"), Ready when this returns."""
    if count > REAL_NODES_MAX:
        raise StackError(f"--real-nodes {count}: at most {REAL_NODES_MAX}")
    if bridge > REAL_BRIDGE_NODES_MAX:
        raise StackError(f"--real-bridge-nodes {bridge}: at most {REAL_BRIDGE_NODES_MAX}")
    nodes = _real_nodes(count, bridge)
    real_nodes.start(procs, _real_stack(), nodes, log)
    push_images(nodes)
    names = {n.name for n in nodes}

    def ready() -> bool:
        with dev_webhook.KubeSync(_kube_dir() / "kubeconfig") as kube:
            listed = kube.request("GET", "/api/v1/nodes", params={"labelSelector": real_nodes.REAL_KEY}).json()
        up = {
            n["metadata"]["name"]
            for n in listed.get("items", [])
            if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
        }
        return names <= up

    _wait(f"{len(nodes)} real nodes Ready", ready, timeout=120)
    log(f"{len(nodes)} real node(s) Ready: {', '.join(sorted(names))}")
    ensure_real_namespaces()
    ensure_bridge_node_partitions([n.name for n in nodes if n.bridge])


def ensure_bridge_node_partitions(names: list[str]) -> None:
    """The bridge's real nodes in Slurm partition ``real-nodes``: their ``external-node-partitions`` annotation,
    which the bridge's node sync turns into the Slurm node's Feature (the kubelet registers labels only)."""
    patch = {"metadata": {"annotations": {wellknown.ANNOTATION_EXTERNAL_NODE_PARTITIONS: real_nodes.BRIDGE_PARTITION}}}
    headers = {"Content-Type": "application/merge-patch+json"}
    with dev_webhook.KubeSync(_kube_dir() / "kubeconfig") as kube:
        for name in names:
            kube.request("PATCH", f"/api/v1/nodes/{name}", json=patch, headers=headers).raise_for_status()


# --------------------------------------------------------------------------------------------- temporal
def temporal_cli() -> Path:
    return Path(sysconfig.get_path("scripts")) / "temporal"


def _temporal_ready() -> bool:
    return (
        subprocess.run(
            [
                str(temporal_cli()),
                "operator",
                "cluster",
                "health",
                "--address",
                f"127.0.0.1:{PORTS.temporal}",
            ],
            capture_output=True,
            timeout=5,
        ).returncode
        == 0
    )


def start_temporal(procs: ProcessTable) -> None:
    if procs.running("temporal") is not None:
        log("Temporal already running")
        return
    argv = [
        str(temporal_cli()),
        "server",
        "start-dev",
        "--ip",
        "127.0.0.1",
        "--port",
        str(PORTS.temporal),
        "--ui-port",
        str(PORTS.temporal_ui),
        "--http-port",
        str(PORTS.temporal_http),
        "--metrics-port",
        str(PORTS.temporal_metrics),
        "--ui-disable-news-fetch",
        "--db-filename",
        str(STATE / "temporal.db"),
        "--sqlite-pragma",
        "journal_mode=wal",
        "--sqlite-pragma",
        "synchronous=off",
        "--dynamic-config-value",
        "frontend.enableServerVersionCheck=false",
        "--dynamic-config-value",
        'history.workflowIdReuseMinimalInterval="0s"',
        "--log-level",
        "warn",
    ]
    for name, kind in wellknown.SEARCH_ATTRIBUTES.items():
        argv += ["--search-attribute", f"{name}={kind}"]
    procs.start("temporal", argv, log=STATE / "logs" / "temporal.log")
    _wait("Temporal", _temporal_ready, timeout=60)
    log(f"Temporal up on 127.0.0.1:{PORTS.temporal}, UI http://127.0.0.1:{PORTS.temporal_ui}")


# --------------------------------------------------------------------------------------------- workers
def _worker_env() -> dict[str, str]:
    """A worker process's environment: the env file's values, the caller's SLINKY_* settings on top."""
    env = {k: v for k, v in env_values().items() if k != "PATH"}
    env.update({"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONUNBUFFERED": "1", "HOME": str(Path.home())})
    return env


def start_workers(procs: ProcessTable) -> None:
    """The bridge worker process from the working tree (settings from the env file's values)."""
    if procs.running("bridge-worker") is not None:
        log("bridge worker already running")
        return
    env = _worker_env()
    env["SLINKY_TELEMETRY__METRICS_PORT"] = str(PORTS.bridge_metrics)
    env.update({k: v for k, v in os.environ.items() if k.startswith("SLINKY_")})
    procs.start(
        "bridge-worker",
        [sys.executable, "-m", "workers"],
        log=STATE / "logs" / "bridge-worker.log",
        env=env,
        cwd=REPO,
    )
    _still_alive(procs, "bridge-worker", 2.0)
    log("bridge worker started (logs: .slinky-dev/logs/bridge-worker.log)")


def external_controller_objects(namespace: str, name: str = "slurm") -> list[dict[str, object]]:
    """Secret ``<name>-keys`` (the stack's slurm.key and JWT key) and Controller ``name`` in external mode: the
    stack's slurmctld, at the address pods on the real nodes reach it by (``slinkyctl`` resolves only on the
    host). A NodeSet naming ``controllerRef: {name: <name>}`` there gets slurmd pods that join the stack's Slurm."""
    etc = _slurm_root() / "etc" / "slurm"
    data = {key: base64.b64encode((etc / file).read_bytes()).decode() for key, file in EXTERNAL_KEYS.items()}
    secret = f"{name}-keys"
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret, "namespace": namespace}, "data": data},
        {
            "apiVersion": "slinky.slurm.net/v1beta1",
            "kind": "Controller",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "external": True,
                "externalConfig": {"host": real_nodes.HOST_ADDRESS, "port": PORTS.slurmctld},
                "slurmKeyRef": {"name": secret, "key": "slurm.key"},
                "jwtKeyRef": {"name": secret, "key": "jwt.key"},
            },
        },
    ]


EXTERNAL_KEYS = {"slurm.key": "slurm.key", "jwt.key": "jwt_hs256.key"}
"""Keys of an external Controller's Secret and the chroot's files under /etc/slurm they hold."""


def stack_controller_objects() -> list[dict[str, object]]:
    """Namespace `slurm` (its pods on the real nodes) and the stack's external Controller `slurm` there, so a
    user's NodeSet naming `controllerRef: {name: slurm}` works at once."""
    namespace: dict[str, object] = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": OPERATOR_NAMESPACE, "annotations": real_nodes.namespace_annotations(REAL_NODE_TAINT)},
    }
    return [namespace, *external_controller_objects(OPERATOR_NAMESPACE)]


def ensure_stack_controller() -> None:
    """Apply the stack's Controller and its key Secret (idempotent: a re-keyed stack updates the Secret)."""
    manifest = json.dumps({"apiVersion": "v1", "kind": "List", "items": stack_controller_objects()})
    kubeconfig = str(_kube_dir() / "kubeconfig")
    proc = subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, "apply", "-f", "-"], input=manifest, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise StackError(f"applying the stack's Controller failed: {proc.stderr.strip()[:500]}")


def start_operator(procs: ProcessTable) -> None:
    """The operator process from the working tree, watching only namespaces `slurm` (the stack's Controller)
    and `slinky` (the demo's managed cluster); tests run operators of their own in their namespaces, and two
    operators never share a namespace."""
    if procs.running("operator") is not None:
        log("operator already running")
        return
    env = _worker_env()
    env["SLINKY_OPERATOR__NAMESPACES"] = json.dumps([OPERATOR_NAMESPACE, DEMO_NAMESPACE])
    env.update(aggregation.operator_settings(_kube_dir()))
    env.update({k: v for k, v in os.environ.items() if k.startswith("SLINKY_")})
    procs.start(
        "operator", [sys.executable, "-m", "workers.operator"], log=STATE / "logs" / "operator.log", env=env, cwd=REPO
    )
    _still_alive(procs, "operator", 2.0)
    watched = ", ".join(json.loads(env["SLINKY_OPERATOR__NAMESPACES"]))
    log(f"operator started for namespaces {watched} (logs: .slinky-dev/logs/operator.log)")


OPERATOR_DEV_SETTINGS = {
    # The operator runs on the host, outside cluster DNS: it reaches a managed cluster's slurmrestd at a pod
    # address from the Service's Endpoints (pod addresses are routable from the host over the bridge).
    "SLINKY_OPERATOR__SERVICE_ADDRESSES": "endpoints",
    # Slurm's parser checks a managed Controller's new config before it is applied: the rootfs's scontrol.
    "SLINKY_OPERATOR__SLURM_TOOLS_ROOT": str(STATE / "slurm" / "root"),
    # Daemon pods run in network namespaces without a cgroup filesystem (docs/dev-stack.md, "Daemon pods").
    "SLINKY_OPERATOR__CGROUP_CONF": "CgroupPlugin=disabled",
    "SLINKY_OPERATOR__SLURM_CONF_DEFAULTS": "ProctrackType=proctrack/linuxproc TaskPlugin=task/none "
    "JobAcctGatherType=jobacct_gather/none",
}
"""Settings of every operator started against the dev stack (in the env file)."""


# --------------------------------------------------------------------------------------------- env file
def env_values() -> dict[str, str]:
    return {
        "KUBECONFIG": str(_kube_dir() / "kubeconfig"),
        "TEMPORAL_ADDRESS": f"127.0.0.1:{PORTS.temporal}",
        "TEMPORAL_NAMESPACE": "default",
        "TEMPORAL_UI_URL": f"http://127.0.0.1:{PORTS.temporal_ui}",
        "SLURM_REST_URL": f"http://127.0.0.1:{PORTS.slurmrestd}",
        "SLURM_JWT_FILE": str(STATE / "slurm" / "jwt"),
        "SLINKY_DEV_KUBE_BIN": str(KUBE_BIN),
        **mariadb_env_values(STATE),
        **OPERATOR_DEV_SETTINGS,
        "PATH": f"{temporal_cli().parent}:$PATH",
    }


def write_env() -> Path:
    path = STATE / "env"
    lines = [f'export {k}="{v}"' for k, v in env_values().items()]
    path.write_text("# Written by `slinky dev up`: source it in a shell.\n" + "\n".join(lines) + "\n")
    return path


# --------------------------------------------------------------------------------------------- commands
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "apiserver-relay",
    "host-relay",
    "dnsmasq",
    "cluster-dns",
    "registry",
    "local-volumes",
    "mariadb",
    "node-agent",
    "slurmctld",
    "slurmrestd",
    "temporal",
    "webhook",
    "bridge-worker",
    "operator",
)


def crashed(procs: ProcessTable | None = None) -> list[str]:
    """Components whose recorded process is gone without ``down`` (killed, or died)."""
    procs = procs or ProcessTable(STATE / "pids")
    return [n for n in procs.names() if procs.recorded(n) is not None and procs.running(n) is None]


def kill(name: str) -> int | None:
    """SIGKILL one component of the stack, as a crash would (tests and the chaos suite); ``up`` restarts it."""
    return ProcessTable(STATE / "pids").kill(name)


def up(
    *,
    nodes: int = 8,
    slurmd: int = 0,
    workers: bool = True,
    worker_nodes: int = 4,
    real: int = real_nodes.CLUSTER_NODES_DEFAULT,
    real_bridge: int = 2,
) -> int:
    started = time.monotonic()
    down_before = crashed()
    if down_before:
        log(f"restarting what crashed: {', '.join(down_before)} (state kept)")
    try:
        preflight()
        ensure_artifacts()
        STATE.mkdir(parents=True, exist_ok=True)
        procs = ProcessTable(STATE / "pids")
        start_kubernetes(procs)
        install_crds()
        # The real nodes' bridge first: its host address is slurmctld's (SlurmctldHost) and MariaDB's for pods.
        real_nodes.ensure_bridge()
        start_mariadb(procs)  # after the bridge (it listens on its address), before anything using a database
        start_slurm(procs, nodes)
        start_node_agent(procs, nodes, worker_nodes)
        start_cluster_network(procs)
        if real or real_bridge:
            start_real_nodes(procs, real, real_bridge)
        start_temporal(procs)
        dev_webhook.up(procs, STATE, _kube_dir() / "kubeconfig")
        log(f"admission webhook up on 127.0.0.1:{dev_webhook.PORT}, registered as pods.slinky.slurm.net")
        if workers:
            start_workers(procs)
            ensure_stack_controller()
            start_operator(procs)
            # The aggregator checks an APIService on its own schedule: ready when `up` returns (the HPA and
            # `kubectl get --raw /apis/external.metrics.k8s.io/...` get 503 until then).
            _wait(
                "the external metrics API (APIService Available)",
                lambda: aggregation.available(_kube_dir() / "kubeconfig"),
                90,
            )
        forget_stale_slurmd_nodes(procs)
        if slurmd:
            start_slurmd(procs, slurmd)
        env = write_env()
    except StackError as err:
        print(f"slinky dev up: {err}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as err:
        output = (err.stderr or err.stdout or "").strip().splitlines()
        print(
            f"slinky dev up: `{' '.join(map(str, err.cmd))}` exited {err.returncode}"
            f"{': ' + output[-1] if output else ''}; logs in {STATE / 'logs'}",
            file=sys.stderr,
        )
        return 1
    except (OSError, RuntimeError) as err:
        print(f"slinky dev up: {err}; logs in {STATE / 'logs'}", file=sys.stderr)
        return 1
    for k, v in env_values().items():
        print(f'export {k}="{v}"')
    log(f"stack up in {time.monotonic() - started:.1f}s; env file: {env} (source it)")
    return 0


def status(*, quiet: bool = False) -> int:
    """Print each component's health; exit code 0 only when every one is running and answering."""
    procs = ProcessTable(STATE / "pids")
    checks: dict[str, Callable[[], bool]] = {
        "kube-apiserver": _apiserver_ready,
        "kube-scheduler": _scheduler_ready,
        "mariadb": _mariadb_ready,
        "slurmrestd": _rest_ready,
        "temporal": _temporal_ready,
        "webhook": lambda: dev_webhook.healthy(STATE / "webhook" / "ca.crt"),
        "registry": _registry_ready,
    }
    healthy = True
    real = [n for n in procs.names() if n.startswith("real-")]  # real nodes' daemons: real-N-kubelet, ...
    for name in [*COMPONENTS, *real]:
        pid = procs.running(name)
        if pid is None and name == "bridge-worker" and not (STATE / "pids" / "bridge-worker.pid").exists():
            if not quiet:
                print(f"{name:26} not started (--no-workers)")
            continue
        state = "stopped"
        was = procs.recorded(name)
        if pid is None and was is not None:
            state = f"CRASHED (was pid {was}; last log line: {_last_line(STATE / 'logs' / (name + '.log'))})"
        if pid is not None:
            ok = True
            if name in checks:
                try:
                    ok = checks[name]()
                except Exception:
                    ok = False
            state = f"running (pid {pid})" + ("" if ok else ", NOT HEALTHY")
            healthy &= ok
        else:
            healthy = False
        if not quiet:
            print(f"{name:26} {state}")
    return 0 if healthy else 1


def _last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    return lines[-1][:160] if lines else "empty log"


LEGACY_LINKS = ("slkpbr0",)
"""Links an older checkout's stack made and this one does not: the node agent's daemon pods' bridge."""


def down() -> int:
    procs = ProcessTable(STATE / "pids")
    real_nodes.stop(procs, log)
    # Reverse start order: clients before servers.
    extra = [n for n in procs.names() if n not in COMPONENTS]  # workers and anything started later
    for name in [*extra, *reversed(COMPONENTS)]:
        if procs.stop(name):
            log(f"stopped {name}")
    _unmount_slurm_root()
    _delete_netns()
    for link in LEGACY_LINKS:
        if Path(f"/sys/class/net/{link}").exists():
            subprocess.run(["ip", "link", "delete", link], check=False)
            log(f"deleted {link}, left by an older stack")
    log("stack down")
    return 0


def load_env_file(path: Path | None = None) -> dict[str, str]:
    """Parse the env file ``up`` wrote into a dict (``$PATH`` references are left out)."""
    values: dict[str, str] = {}
    for line in (path or STATE / "env").read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            key, value = line[len("export ") :].split("=", 1)
            values[key] = value.strip('"')
    return values
