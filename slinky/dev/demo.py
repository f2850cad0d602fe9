"""``make demo``: show the running local stack end to end, through each server's real API.

Prints the Kubernetes nodes, the matching Slurm external nodes and partition (via slurmrestd with JWT), and
the Temporal UI address; then the bridge's scenarios, a NodeSet on the stack's Controller, and a whole Slurm
cluster made by the operator from its custom resources (namespace `slinky`). Run ``slinky dev up`` first
(``make demo`` does).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from slinky.clients.kube import KubeClient
from slinky.dev import in_cluster, real_nodes, stack

EXAMPLES = stack.REPO / "deploy" / "examples"
CHARTS = stack.REPO / "deploy" / "charts"
NS = stack.DEMO_NAMESPACE
"""The managed cluster's namespace (the `slurm` chart's release); the stack's operator watches it."""
CLUSTER_LOGS = ".slinky-dev/logs/operator.log and `kubectl logs` of the pods"


def _get(url: str, headers: dict[str, str]) -> dict[str, object]:
    req = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(req, timeout=10) as resp:
        data: dict[str, object] = json.load(resp)
        return data


async def _kube_nodes(kubeconfig: str) -> list[dict[str, Any]]:
    async with KubeClient.from_kubeconfig(kubeconfig) as kube:
        items: list[dict[str, Any]] = (await kube.get("/api/v1/nodes"))["items"]
        return items


def main() -> int:
    env = stack.load_env_file()
    print("== Kubernetes nodes (kube-apiserver v1.20.2; slinky-real-N: kubelet + containerd, the rest simulated)")
    for node in asyncio.run(_kube_nodes(env["KUBECONFIG"])):
        ready = next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")
        cap = node["status"]["capacity"]
        print(f"  {node['metadata']['name']:16} Ready={ready:5} cpu={cap['cpu']:3} memory={cap['memory']}")
    token = Path(env["SLURM_JWT_FILE"]).read_text().strip()
    headers = {"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": token}
    base = env["SLURM_REST_URL"] + "/slurm/v0.0.44"
    nodes = _get(base + "/nodes", headers)["nodes"]
    parts = _get(base + "/partitions", headers)["partitions"]
    print("== Slurm nodes (slurmrestd v0.0.44, JWT)")
    for n in nodes:  # type: ignore[attr-defined]
        print(
            f"  {n['name']:16} state={'+'.join(n['state']):28} cpus={n['cpus']:3}"
            f" memory={n['real_memory']}MiB"
            f" partitions={','.join(n['partitions'])}"
        )
    print("== Slurm partitions")
    for p in parts:  # type: ignore[attr-defined]
        print(f"  {p['name']:16} nodes={p['nodes']['configured'] or '-'}")
    print("== Temporal")
    print(f"  frontend {env['TEMPORAL_ADDRESS']}  Web UI {env['TEMPORAL_UI_URL']}")
    return bridge_scenario(env)


def _sh(env: dict[str, str], *argv: str, check: bool = True, stdin: str | None = None) -> str:
    full = {**os.environ, **{k: v for k, v in env.items() if k != "PATH"}}
    proc = subprocess.run(list(argv), env=full, text=True, capture_output=True, check=False, input=stdin)
    if check and proc.returncode != 0:
        raise SystemExit(f"demo: {' '.join(argv)} failed: {proc.stderr.strip()}")
    return proc.stdout


GANG = EXAMPLES / "podgroup-nginx-real-nodes.yaml"


def gang_scenario(env: dict[str, str], slinky: list[str]) -> int:
    """The seed gang on real nodes: a PodGroup of two nginx pods (a ReplicaSet) runs as ONE 2-node Slurm job in
    partition real-nodes, and the bridge binds one pod per allocated node: containers under a real kubelet."""
    print(f"\n== Bridge: the seed PodGroup of two nginx pods on the real nodes (deploy/examples/{GANG.name})")
    print("   (no schedulerName in the manifest: the admission webhook sets it in the managed namespace; the nodes")
    print(f"   {' and '.join(_real_bridge_nodes(env))} are the bridge's external Slurm nodes, partition real-nodes)")
    _sh(env, "kubectl", "delete", "-f", str(GANG), "--ignore-not-found", "--wait=true")
    _sh(env, "kubectl", "apply", "-f", str(GANG))
    selector = ("-n", "slurm-bridge", "-l", "app=nginx-real")
    ready = _sh(env, "kubectl", "wait", "--for=condition=Ready", "pod", *selector, "--timeout=90s", check=False)
    if ready.count("condition met") != 2:
        print("demo: the nginx gang was not Ready within 90 s; see .slinky-dev/logs/bridge-worker.log and")
        print(f"      kubectl describe pods {' '.join(selector)}")
        return 1
    print(f"$ kubectl get pods {' '.join(selector)} -o wide")
    print(_sh(env, "kubectl", "get", "pods", *selector, "-o", "wide"), end="")
    print(
        "$ kubectl get pods ... -o jsonpath='{containerID} {imageID}'   (containers, image from the stack's registry)"
    )
    pods = json.loads(_sh(env, "kubectl", "get", "pods", *selector, "-o", "json"))["items"]
    for pod in pods:
        status = pod["status"]["containerStatuses"][0]
        print(f"  {status['containerID'][:26]}... {status['imageID']}")
    ip = pods[0]["status"]["podIP"]
    with urllib.request.urlopen(f"http://{ip}/", timeout=10) as resp:
        title = next((line.strip() for line in resp.read().decode().splitlines() if "<title>" in line), "")
    print(f"$ curl http://{ip}/   (the pod's address, routed from the host)\n  {title}")
    print("$ kubectl get podgroup nginx-real -o jsonpath='{.status.phase}'")
    phase = _sh(env, "kubectl", "get", "podgroup", "-n", "slurm-bridge", "nginx-real", "-o", "jsonpath={.status.phase}")
    print("  " + phase)
    print("$ slinky slurm jobs   (one job, two nodes)")
    print(
        "\n".join(
            line
            for line in _sh(env, *slinky, "slurm", "jobs").splitlines()
            if ("nginx-real" in line and "RUNNING" in line) or line.startswith(("JOB", "ID"))
        )
    )
    return 0


def in_cluster_scenario(env: dict[str, str]) -> int:
    """The bridge from its chart: worker and webhook in containers on the real nodes carry the PodGroup."""
    print(
        "\n== Workers in-cluster: `helm install` of deploy/charts/slinky-bridge in place of the stack's bridge worker"
    )
    print("   (its worker and webhook run as containers on the real nodes: in-cluster config to the API server,")
    print("   Temporal and slurmrestd through the stack's Services; the stack's worker comes back afterwards)")
    selector = ("-n", "slurm-bridge", "-l", "app=nginx-real")
    # The earlier gang ends on the stack's worker: handed over mid-way, its clean-up would wait for Temporal's
    # sticky-queue timeout of the stopped worker, and the new gang for its nodes.
    _sh(env, "kubectl", "delete", "-f", str(GANG), "--ignore-not-found", "--wait=true")
    gone = lambda: not _sh(env, "kubectl", "get", "pods", *selector, "-o", "name")  # noqa: E731
    _wait("the earlier gang's pods gone", gone, 90, ".slinky-dev/logs/bridge-worker.log")
    try:
        with in_cluster.bridge_in_cluster(lambda line: print("  " + line)) as ns:
            print(f"$ kubectl get pods -n {ns} -o wide")
            print(_sh(env, "kubectl", "get", "pods", "-n", ns, "-o", "wide"), end="")
            print(f"$ kubectl apply -f deploy/examples/{GANG.name}")
            _sh(env, "kubectl", "apply", "-f", str(GANG))
            ready = _sh(env, "kubectl", "wait", "--for=condition=Ready", "pod", *selector, "--timeout=90s", check=False)
            if ready.count("condition met") != 2:
                print(
                    f"demo: the nginx gang was not Ready within 90 s; kubectl logs -n {ns} deploy/slinky-bridge-bridge"
                )
                return 1
            print(_sh(env, "kubectl", "get", "pods", *selector, "-o", "wide"), end="")
            workers = in_cluster.workers_of("workload/slurm-bridge/podgroup/nginx-real/")
            print("$ temporal workflow show -w workload/slurm-bridge/podgroup/nginx-real/...   (who ran it)")
            print(f"  worker identities in the lifecycle's history: {', '.join(sorted(workers))}")
    except (RuntimeError, subprocess.CalledProcessError) as err:
        print(f"demo: the bridge chart in-cluster failed: {err}")
        return 1
    print("   (the gang keeps running: its lifecycle goes on on the stack's worker, the same history)")
    return 0


def _real_bridge_nodes(env: dict[str, str]) -> list[str]:
    out = _sh(env, "kubectl", "get", "nodes", "-l", real_nodes.BRIDGE_NODE_LABEL, "-o", "name", check=False)
    return sorted(line.removeprefix("node/") for line in out.split()) or ["(none: dev up --real-bridge-nodes 2)"]


def _wait(
    what: str,
    check: Callable[[], bool],
    timeout: float = 60.0,
    logs: str = ".slinky-dev/logs/operator.log and node-agent.log",
) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    print(f"demo: {what} not within {timeout:.0f} s; see {logs}")
    return False


def _slurm(env: dict[str, str], method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    token = Path(env["SLURM_JWT_FILE"]).read_text().strip()
    headers = {"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": token, "Content-Type": "application/json"}
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(env["SLURM_REST_URL"] + "/slurm/v0.0.44/" + path, data, headers, method=method)
    with urllib.request.urlopen(req, timeout=10) as resp:
        answer: dict[str, Any] = json.load(resp)
        return answer


def _node_state(env: dict[str, str], name: str) -> list[str]:
    try:
        nodes = _slurm(env, "GET", f"node/{name}").get("nodes") or []
    except OSError:
        return []
    return list(nodes[0]["state"]) if nodes else []


def operator_scenario(env: dict[str, str], slinky: list[str]) -> int:
    """The operator: a NodeSet of two real slurmd pods; scale-in takes the idle node at once and drains the
    busy one, which waits for its job (deploy/examples/nodeset-slinky.yaml)."""
    print(
        "\n== Operator: NodeSet slinky, two slurmd pods of the stack's Controller (deploy/examples/nodeset-slinky.yaml)"
    )
    manifest = str(EXAMPLES / "nodeset-slinky.yaml")
    _sh(env, "kubectl", "delete", "-f", manifest, "--ignore-not-found", "--wait=true")
    _sh(env, "kubectl", "apply", "-f", manifest)
    names = ["slinky-0", "slinky-1"]
    if not _wait("two Slurm nodes IDLE", lambda: all("IDLE" in _node_state(env, n) for n in names), 90):
        return 1
    status = [
        "kubectl",
        "get",
        "nodeset",
        "-n",
        "slurm",
        "slinky",
        "-o",
        "jsonpath={.status.readyReplicas}/{.status.slurmIdle}",
    ]
    if not _wait("the NodeSet's status", lambda: _sh(env, *status) == "2/2", 10):
        return 1
    print("$ slinky nodesets list -n slurm")
    print(_sh(env, *slinky, "nodesets", "list", "-n", "slurm"), end="")
    desc = {
        "name": "demo-sleep",
        "partition": stack.NODESET_PARTITION,
        "required_nodes": ["slinky-0"],
        "time_limit": {"set": True, "number": 5},
        "current_working_directory": "/tmp",
        "environment": ["PATH=/usr/bin:/bin"],
        "standard_output": "/dev/null",
    }
    job = _slurm(env, "POST", "job/submit", {"job": desc, "script": "#!/bin/sh\nsleep 8\n"})["job_id"]
    print(f"$ a batch job (sleep 8) through slurmrestd on slinky-0: job {job}")
    if not _wait("the job running", lambda: bool({"ALLOCATED", "MIXED"} & set(_node_state(env, "slinky-0"))), 20):
        return 1
    print("$ kubectl scale nodeset slinky -n slurm --replicas=0")
    _sh(env, "kubectl", "scale", "nodeset", "slinky", "-n", "slurm", "--replicas=0")
    if not _wait("the idle pod deleted", lambda: not _node_state(env, "slinky-1"), 30):
        return 1
    time.sleep(1)
    print("$ slinky nodesets scale-ins -n slurm   (slinky-1 was idle: gone at once; slinky-0 waits for its job)")
    print(_sh(env, *slinky, "nodesets", "scale-ins", "-n", "slurm", "--all"), end="")
    if not _wait("slinky-0 drained and deleted after its job", lambda: not _node_state(env, "slinky-0"), 60):
        return 1
    record = _slurm(env, "GET", f"job/{job}")["jobs"][0]
    print(f"$ the job's own record: {record['job_state'][0]}, exit code {record['exit_code']['return_code']['number']}")
    print("$ slinky nodesets scale-ins -n slurm --all")
    print(_sh(env, *slinky, "nodesets", "scale-ins", "-n", "slurm", "--all"), end="")
    _sh(env, "kubectl", "scale", "nodeset", "slinky", "-n", "slurm", "--replicas=2")
    print("kubectl scale nodeset slinky -n slurm --replicas=3   # more slurmd pods; scale-ins drain first")
    return 0


RELEASE = "slurm"
"""The `slurm` chart's release: Controller `slurm`, NodeSet `slurm-worker-cpu` (Slurm nodes `cpu-<n>`), LoginSet
`slurm-login-login`, RestApi and Accounting `slurm`."""
NODESET = f"{RELEASE}-worker-cpu"
LOGIN_PREFIX = f"{RELEASE}-login-login-"
EXAMPLE_OBJECTS = (
    ("controller", "slurm"), ("restapi", "slurm"), ("accounting", "slurm"), ("loginset", "login"),
    ("nodeset", "cpu"), ("secret", "slurm-auth-slurm"), ("secret", "slurm-auth-jwt"), ("secret", "slurm-sssd-conf"),
)  # fmt: skip
"""What an earlier demo made with `kubectl apply -f deploy/examples/slurm-cluster.yaml` (the chart makes its own)."""


def cluster_manifest(env: dict[str, str]) -> list[dict[str, Any]]:
    """deploy/examples/slurm-cluster.yaml with the Accounting's database on the stack's MariaDB: its address,
    user and password (`SLINKY_DEV_MARIADB_*`), which a manifest cannot know (the tests and benchmarks that apply
    the example in a namespace of their own use it)."""
    docs = [d for d in yaml.safe_load_all((EXAMPLES / "slurm-cluster.yaml").read_text()) if d]
    password = Path(env["SLINKY_DEV_MARIADB_PASSWORD_FILE"]).read_text().strip()
    for doc in docs:
        if doc["kind"] == "Accounting":
            doc["spec"]["storageConfig"].update(
                host=env["SLINKY_DEV_MARIADB_HOST"],
                port=int(env["SLINKY_DEV_MARIADB_PORT"]),
                username=env["SLINKY_DEV_MARIADB_USER"],
            )
        elif doc["kind"] == "Secret" and doc["metadata"]["name"] == "mariadb-password":
            doc["stringData"] = {"password": password}
    return docs


def chart_values(env: dict[str, str]) -> dict[str, Any]:
    """The `slurm` chart's values for the demo's cluster (upstream's keys; deploy/examples/slurm-cluster.yaml
    says the same as custom resources): accounting on the stack's MariaDB (`SLINKY_DEV_MARIADB_*`, which a
    values file cannot know), a NodeSet `cpu` of one 1-CPU node, a LoginSet `login`, the partition `all`."""
    return {
        "controller": {"extraConf": "SchedulerParameters=batch_sched_delay=0,sched_interval=1"},
        "accounting": {
            "enabled": True,
            "storageConfig": {
                "host": env["SLINKY_DEV_MARIADB_HOST"],
                "port": int(env["SLINKY_DEV_MARIADB_PORT"]),
                "database": "slurm_acct_db",
                "username": env["SLINKY_DEV_MARIADB_USER"],
                "passwordKeyRef": {"name": "mariadb-password", "key": "password"},
            },
        },
        "nodesets": {"cpu": {"replicas": 1, "slurmd": {"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}}},
        "loginsets": {"login": {}},
        "partitions": {"all": {"enabled": True}},
    }


def _password_secret(env: dict[str, str]) -> str:
    password = Path(env["SLINKY_DEV_MARIADB_PASSWORD_FILE"]).read_text().strip()
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "mariadb-password", "namespace": NS},
        "stringData": {"password": password},
    }
    return json.dumps(secret)


def _forget_example(env: dict[str, str]) -> None:
    """An earlier demo's cluster (applied from the example, not a Helm release) goes first: the chart's release
    cannot take over objects Helm did not make."""
    out = _sh(env, "kubectl", "get", "controller", "slurm", "-n", NS, "-o", "json", check=False)
    try:
        labels = json.loads(out)["metadata"].get("labels") or {}
    except (ValueError, KeyError):
        return
    if labels.get("app.kubernetes.io/managed-by") == "Helm":
        return
    print(
        f"$ kubectl delete -n {NS} ...   (the cluster an earlier demo applied from deploy/examples/slurm-cluster.yaml)"
    )
    for kind, name in EXAMPLE_OBJECTS:
        _sh(env, "kubectl", "delete", kind, name, "-n", NS, "--ignore-not-found", "--wait=false", check=False)
    _wait("the earlier cluster's pods gone", lambda: not _pods(env), 120, CLUSTER_LOGS)


def _install(env: dict[str, str]) -> None:
    """`helm upgrade --install` of deploy/charts/slurm with the Helm v4 engine (helm-python-sdk) the tests use."""
    import helm_python as helm  # the project's Helm engine (a dev dependency)

    values = chart_values(env)
    with helm.Config(kubeconfig_path=env["KUBECONFIG"], namespace=NS) as cfg:
        if any(r["name"] == RELEASE for r in cfg.list()):
            cfg.upgrade(str(CHARTS / "slurm"), RELEASE, values, timeout=120)
        else:
            cfg.install(str(CHARTS / "slurm"), RELEASE, values, timeout=120)
        status = cfg.status(RELEASE)
    print(f"  release {RELEASE}: {status['status']}, revision {status['revision']}")


def _pods(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    out = _sh(env, "kubectl", "get", "pods", "-n", NS, "-o", "json", check=False)
    try:
        items: list[dict[str, Any]] = json.loads(out)["items"]
    except (ValueError, KeyError):
        return {}
    return {p["metadata"]["name"]: p for p in items}


def _workers(env: dict[str, str]) -> list[str]:
    """The Slurm node names of the NodeSet's live pods (pod `slurm-worker-cpu-0` is Slurm node `cpu-0`)."""
    prefix = f"{RELEASE}-worker-"
    pods = _pods(env)
    return sorted(
        n.removeprefix(prefix)
        for n, p in pods.items()
        if n.startswith(NODESET + "-") and not p["metadata"].get("deletionTimestamp")
    )


def _ready(pod: dict[str, Any] | None) -> bool:
    if not pod or pod["metadata"].get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _config_applied(env: dict[str, str]) -> bool:
    """Controller `slurm` has reconciled its current spec: its config Applied (a changed config goes through a
    ControllerReconfigure workflow first, which may make a new slurmctld pod) and slurmctld Ready."""
    out = _sh(env, "kubectl", "get", "controller", "slurm", "-n", NS, "-o", "json", check=False)
    try:
        obj = json.loads(out)
    except ValueError:
        return False
    conditions = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
    valid, ready = conditions.get("ConfigValid", {}), conditions.get("Ready", {})
    current = all(c.get("observedGeneration") == obj["metadata"].get("generation") for c in (valid, ready))
    return current and valid.get("reason") == "Applied" and ready.get("status") == "True"


def _login_pod(env: dict[str, str]) -> str:
    """A ready pod of the release's LoginSet (its Deployment names them `slurm-login-login-<hash>-<id>`), or ""."""
    return next((n for n, p in sorted(_pods(env).items()) if n.startswith(LOGIN_PREFIX) and _ready(p)), "")


class _Login:
    """Slurm commands from the managed cluster's login pod: `kubectl exec -n slinky <pod> -- CMD` (served by the
    node agent's kubelet endpoint)."""

    def __init__(self, env: dict[str, str], slinky: list[str], pod: str) -> None:
        self.env, self.slinky, self.pod = env, slinky, pod

    def run(self, *command: str, check: bool = True) -> str:
        return _sh(self.env, "kubectl", "exec", "-n", NS, self.pod, "--", *command, check=check)

    def job(self, job: str, field: str) -> str:
        """A field of `scontrol show job` (JobState, NodeList, ...); "" when Slurm does not answer."""
        out = self.run("scontrol", "show", "job", job, check=False)
        return next((w.split("=", 1)[1] for w in out.split() if w.startswith(f"{field}=")), "")

    def submit(self, *args: str) -> str:
        out = self.run("sbatch", *args)
        print("  " + out.strip())
        return out.split()[-1]


def install_cluster(env: dict[str, str]) -> None:
    """The demo's cluster as a release of the slurm chart (an earlier example-applied one removed first); the
    integration tests that use the demo's cluster call this too."""
    _forget_example(env)
    _sh(env, "kubectl", "apply", "-f", "-", stdin=_password_secret(env))
    print("$ kubectl create secret generic mariadb-password -n slinky --from-literal=password=...   (the stack's)")
    print(
        f"$ helm upgrade --install {RELEASE} deploy/charts/slurm -n {NS} --set accounting.enabled=true ... "
        '--set-json \'nodesets={"cpu":{"replicas":1}}\' --set-json \'loginsets={"login":{}}\' '
        "--set partitions.all.enabled=true"
    )
    _install(env)


def _cluster_up(env: dict[str, str]) -> str:
    """Install (or upgrade) the chart's release and wait for the cluster's pods; the login pod's name, "" on
    timeout."""
    install_cluster(env)
    missing: list[str] = []

    def ready() -> bool:
        pods = _pods(env)
        wanted = ("slurm-controller-0", "slurm-accounting-0", f"{NODESET}-0")
        missing[:] = [n for n in wanted if not _ready(pods.get(n))]
        missing.extend([] if any(n.startswith(LOGIN_PREFIX) and _ready(p) for n, p in pods.items()) else ["login"])
        missing.extend([] if _config_applied(env) else ["Controller slurm's config Applied"])
        return not missing

    if not _wait("the cluster's pods Ready", ready, 240, CLUSTER_LOGS):
        print(f"demo: not Ready: {', '.join(missing)}")
        return ""
    return _login_pod(env)


def _jobs_wait_for_nodes(env: dict[str, str], login: _Login) -> int:
    """Two 2-node jobs wait on the 1-node NodeSet; scaled to 2, both run, and sacct has them."""
    print(f"$ kubectl exec -n {NS} {login.pod} -- sinfo")
    if not _wait("cpu-0 idle", lambda: "idle" in login.run("sinfo", "-h", "-o", "%t", check=False), 30, CLUSTER_LOGS):
        return 1
    print(login.run("sinfo"), end="")
    print('$ sbatch -N2 --wrap "srun hostname; sleep 5"   (twice: two 2-node jobs; the NodeSet has 1 node)')
    jobs = [login.submit("-N2", "--wrap", "srun hostname; sleep 5") for _ in range(2)]
    ids = ",".join(jobs)

    def pending() -> bool:
        reasons = login.run("squeue", "-h", "-j", ids, "-o", "%T %r", check=False).splitlines()
        return len(reasons) == len(jobs) and all(r.startswith("PENDING ") and r != "PENDING None" for r in reasons)

    if not _wait("the jobs pending with a reason", pending, 30, CLUSTER_LOGS):
        return 1
    print("$ squeue   (both wait: each asks for 2 nodes, the partition has 1 until the NodeSet grows)")
    print(login.run("squeue"), end="")
    print(f"$ kubectl scale nodeset {NODESET} -n {NS} --replicas=2")
    _sh(env, "kubectl", "scale", "nodeset", NODESET, "-n", NS, "--replicas=2")
    if not _wait(
        "both jobs COMPLETED", lambda: all(login.job(j, "JobState") == "COMPLETED" for j in jobs), 120, CLUSTER_LOGS
    ):
        return 1
    listing = ["sacct", "-X", "-j", ids, "-o", "JobID,JobName,Partition,NNodes,NodeList,State,ExitCode"]
    if not _wait(
        "both jobs in sacct (slurmdbd)",
        lambda: login.run(*listing, "-n", check=False).count("COMPLETED") == len(jobs),
        30,
        CLUSTER_LOGS,
    ):
        return 1
    print(f"$ {' '.join(listing)}")
    print(login.run(*listing), end="")
    return 0


def _scale_in_waits_for_job(env: dict[str, str], slinky: list[str], login: _Login) -> int:
    """A running job; the NodeSet scaled to 0: the idle pod goes at once, the job's pod waits for the job."""
    print('$ sbatch --wrap "sleep 15"')
    job = login.submit("--wrap", "sleep 15")
    if not _wait(f"job {job} RUNNING", lambda: login.job(job, "JobState") == "RUNNING", 30, CLUSTER_LOGS):
        return 1
    busy = login.job(job, "NodeList")
    print(f"  job {job} RUNNING on {busy}")
    scale_ins = [*slinky, "nodesets", "scale-ins", "-n", NS]
    earlier = {r["workflowId"] for r in json.loads(_sh(env, *scale_ins, "--all", "-o", "json") or "[]")}
    print(f"$ kubectl scale nodeset {NODESET} -n {NS} --replicas=0   (a scale-in takes idle nodes first: take both)")
    _sh(env, "kubectl", "scale", "nodeset", NODESET, "-n", NS, "--replicas=0")

    def busy_waits() -> bool:
        return _workers(env) == [busy] and busy in _sh(env, *scale_ins, check=False)

    if not _wait(f"the idle pod gone and {busy} waiting", busy_waits, 60, CLUSTER_LOGS):
        return 1
    print(f"$ slinky nodesets scale-ins -n {NS}   (the idle pod went at once; {busy} waits for job {job})")
    print(_sh(env, *scale_ins), end="")

    def drained() -> bool:
        return login.job(job, "JobState") == "COMPLETED" and not _workers(env)

    if not _wait(f"job {job} COMPLETED and {busy} deleted", drained, 60, CLUSTER_LOGS):
        return 1
    print(f"  job {job} COMPLETED, then {busy} was deleted")
    print(f"$ slinky nodesets scale-ins -n {NS} --all   (this run's)")
    table = _sh(env, *scale_ins, "--all").splitlines()
    print("\n".join(table[:1] + [line for line in table[1:] if line.split()[-1:] and line.split()[-1] not in earlier]))
    print(f"$ kubectl scale nodeset {NODESET} -n {NS} --replicas=1")
    _sh(env, "kubectl", "scale", "nodeset", NODESET, "-n", NS, "--replicas=1")
    if not _wait(f"{NODESET}-0 Ready again", lambda: _ready(_pods(env).get(f"{NODESET}-0")), 90, CLUSTER_LOGS):
        return 1
    return 0


def managed_cluster_scenario(env: dict[str, str], slinky: list[str]) -> int:
    """A whole Slurm cluster from the `slurm` chart's custom resources: jobs from the login
    pod wait for nodes until the NodeSet grows, and a scale-in to zero waits for the running job's node."""
    print("\n== Operator: a whole Slurm cluster from `helm install` of the slurm chart (deploy/charts/slurm)")
    print(f"   (namespace {NS}; the Accounting's database is the stack's MariaDB: SLINKY_DEV_MARIADB_*)")
    print(
        f"   (real nodes: namespace {NS}'s pods run as containers under kubelet + containerd on the nodes labelled"
        f" {real_nodes.NODE_LABEL}, from images the stack's registry serves under upstream's names)"
    )
    started = time.monotonic()
    pod = _cluster_up(env)
    if not pod:
        return 1
    print(f"   (cluster Ready {time.monotonic() - started:.0f} s after the apply)")
    print(f"$ kubectl get pods -n {NS} -o wide")
    print(_sh(env, "kubectl", "get", "pods", "-n", NS, "-o", "wide"), end="")
    print(f"$ kubectl get controller,restapi,accounting,loginset,nodeset -n {NS}")
    print(_sh(env, "kubectl", "get", "controller,restapi,accounting,loginset,nodeset", "-n", NS), end="")
    login = _Login(env, slinky, pod)
    if _jobs_wait_for_nodes(env, login) != 0 or _scale_in_waits_for_job(env, slinky, login) != 0:
        return 1
    print(f"   (scenario done in {time.monotonic() - started:.0f} s)")
    ui = env["TEMPORAL_UI_URL"]
    print(f"Where to look (the cluster stays; `helm uninstall {RELEASE} -n {NS}` removes it):")
    print(f'  {ui}/namespaces/default/workflows  (search: SlinkyNamespace="{NS}")')
    print("    the cluster's NodeSetScaleIn workflows, and a ControllerReconfigure one for each change of its config:")
    print(
        f"    kubectl patch controller slurm -n {NS} --type=merge -p "
        """'{"spec":{"extraConf":"SchedulerParameters=batch_sched_delay=0,sched_interval=1\\nMaxJobCount=5000"}}'"""
    )
    print(f"  kubectl logs -n {NS} slurm-controller-0   # slurmctld's log")
    print(f"  kubectl exec -it -n {NS} {pod} -- bash   # a shell on the login pod: sinfo, squeue, sbatch...")
    return 0


def bridge_scenario(env: dict[str, str]) -> int:
    """The seed scenario: the pause pod is bound next to its Slurm job, visible from all three sides."""
    slinky = [sys.executable, "-m", "slinky.cli"]
    print("\n== Bridge: the seed pause pod (deploy/examples/pause-pod.yaml)")
    _sh(env, "kubectl", "create", "namespace", "slurm-bridge", check=False)
    _sh(
        env,
        "kubectl",
        "delete",
        "pod",
        "-n",
        "slurm-bridge",
        "pause-pod",
        "--ignore-not-found",
        "--wait=true",
    )
    _sh(env, "kubectl", "apply", "-f", str(EXAMPLES / "pause-pod.yaml"))
    deadline = time.monotonic() + 60
    node = ""
    while time.monotonic() < deadline and not node:
        node = _sh(
            env, "kubectl", "get", "pod", "-n", "slurm-bridge", "pause-pod", "-o", "jsonpath={.spec.nodeName}"
        ).strip()
        time.sleep(0.2)
    if not node:
        print("demo: the pause pod was not bound within 60 s; see .slinky-dev/logs/bridge-worker.log")
        return 1
    print("$ kubectl get pod -n slurm-bridge -o wide")
    print(_sh(env, "kubectl", "get", "pod", "-n", "slurm-bridge", "pause-pod", "-o", "wide"), end="")
    print("$ kubectl get pod pause-pod -o jsonpath='{labels} {annotations[slurm-node]} {finalizers}'")
    print(
        "  "
        + _sh(
            env,
            "kubectl",
            "get",
            "pod",
            "-n",
            "slurm-bridge",
            "pause-pod",
            "-o",
            "jsonpath={.metadata.labels} {.metadata.annotations.slinky\\.slurm\\.net/slurm-node} "
            "{.metadata.finalizers}",
        )
    )
    print("$ slinky slurm jobs   (Slurm's own view, through slurmrestd)")
    print(
        "\n".join(
            line
            for line in _sh(env, *slinky, "slurm", "jobs").splitlines()
            if "pausepod" in line or line.startswith(("JOB", "ID"))
        )
    )
    print("$ kubectl describe pod pause-pod  (events)")
    events = _sh(env, "kubectl", "describe", "pod", "-n", "slurm-bridge", "pause-pod")
    print(events[events.find("Events:") :].rstrip())
    print("$ slinky workloads show pause-pod")
    print(_sh(env, *slinky, "workloads", "show", "pause-pod").rstrip())
    if gang_scenario(env, slinky) != 0:
        return 1
    if operator_scenario(env, slinky) != 0:
        return 1
    if managed_cluster_scenario(env, slinky) != 0:
        return 1
    if in_cluster_scenario(env) != 0:
        return 1
    ui = env["TEMPORAL_UI_URL"]
    print(f'\nTemporal Web UI: {ui}/namespaces/default/workflows  (search: SlinkyWorkloadName="pause-pod")')
    print(f'  and the scale-ins: {ui}/namespaces/default/workflows  (search: SlinkyNodeSet="slinky")')
    print(f'  and the managed cluster: {ui}/namespaces/default/workflows  (search: SlinkyNamespace="{NS}")')
    print(f"source {stack.STATE / 'env'}   # then kubectl, temporal and slinky work from your shell")
    print("kubectl delete pod -n slurm-bridge pause-pod   # ends the lifecycle: job cancelled, finalizer removed")
    print(f"kubectl get pods -n {NS}   # the managed cluster (the slurm chart's release {RELEASE}): kubectl exec")
    return 0


if __name__ == "__main__":
    sys.exit(main())
