"""A whole Slurm cluster from custom resources (issue 14), in containers on the real nodes (issue 30): Controller,
RestApi, Accounting, LoginSet and NodeSet applied as a user does, with upstream's image names; real jobs, `kubectl
exec` and `kubectl logs` through the real kubelet; the operator (a process of the test, scoped to the namespace)
killed -9 in the middle of a reconfigure; a config Slurm refuses never reaches slurmctld; MariaDB killed under
slurmdbd; a second managed Controller on an external Accounting. One cluster for the module (its own namespace,
annotated for the real nodes, and its own operator), tests in order.

A deleted controller pod, a killed slurmctld and a config change while a job runs are tested once, on the
example cluster of tests/integration/test_real_cluster.py (the operator installed in-cluster from its chart)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client

from slinky.clients.slurm import jwt
from slinky.dev import real_nodes, stack
from tests.integration.cluster import Kube
from tests.integration.operator_fixtures import GROUP, VERSION, condition, start_operator, stop_operator, wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SLURM_KEY = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
JWT_KEY = "abcdefabcdefabcdefabcdefabcdefabcdefabcdefabcdefabcdefabcdefabcd"


def image(name: str) -> str:
    """Upstream's image name, as its `slurm` chart writes it: the stack's registry mirrors ghcr.io (docs/images.md)."""
    return f"ghcr.io/slinkyproject/{name}:26.05-ubuntu26.04"


def manifests(ns: str, dev_env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Upstream v1beta1 field names only (as the `slurm` chart renders them); with `dev_env`, an Accounting on
    the dev stack's MariaDB and a LoginSet too."""
    extra: list[dict[str, Any]] = []
    if dev_env is not None:
        password = Path(dev_env["SLINKY_DEV_MARIADB_PASSWORD_FILE"]).read_text().strip()
        keys = {
            "slurmKeyRef": {"name": "slurm-auth-slurm", "key": "slurm.key"},
            "jwtKeyRef": {"name": "slurm-auth-jwt", "key": "jwt.key"},
        }
        extra = [
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "mariadb-password"},
                "stringData": {"password": password},
            },
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "slurm-sssd-conf"},
                "stringData": {"sssd.conf": "[sssd]\nservices = nss,pam\ndomains = DEFAULT\n"},
            },
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Accounting",
                "metadata": {"name": "slurm"},
                "spec": {
                    **keys,
                    "slurmdbd": {"image": image("slurmdbd")},
                    "storageConfig": {
                        "host": dev_env["SLINKY_DEV_MARIADB_HOST"],
                        "port": int(dev_env["SLINKY_DEV_MARIADB_PORT"]),
                        "database": f"acct_{ns.replace('-', '_')}",
                        "username": dev_env["SLINKY_DEV_MARIADB_USER"],
                        "passwordKeyRef": {"name": "mariadb-password", "key": "password"},
                    },
                },
            },
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "LoginSet",
                "metadata": {"name": "login"},
                "spec": {
                    "controllerRef": {"name": "slurm"},
                    "replicas": 1,
                    "login": {"image": image("login")},
                    "sssdConfRef": {"name": "slurm-sssd-conf", "key": "sssd.conf"},
                },
            },
        ]
    return [
        *extra,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "slurm-auth-slurm"},
            "stringData": {"slurm.key": SLURM_KEY},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "slurm-auth-jwt"},
            "stringData": {"jwt.key": JWT_KEY},
        },
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Controller",
            "metadata": {"name": "slurm"},
            "spec": {
                "slurmKeyRef": {"name": "slurm-auth-slurm", "key": "slurm.key"},
                "jwtKeyRef": {"name": "slurm-auth-jwt", "key": "jwt.key"},
                "slurmctld": {"image": image("slurmctld")},
                "extraConf": "SchedulerParameters=batch_sched_delay=0,sched_interval=1",
                "persistence": {"enabled": True, "existingClaim": ""},
                **({"accountingRef": {"name": "slurm"}} if dev_env is not None else {}),
            },
        },
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "RestApi",
            "metadata": {"name": "slurm"},
            "spec": {"controllerRef": {"name": "slurm"}, "slurmrestd": {"image": image("slurmrestd")}},
        },
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NodeSet",
            "metadata": {"name": "cpu"},
            "spec": {
                "controllerRef": {"name": "slurm"},
                "replicas": 2,
                "partition": {"enabled": True, "config": "Default=YES MaxTime=UNLIMITED"},
                "slurmd": {"image": image("slurmd"), "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
            },
        },
    ]


def kubectl(env: dict[str, str], ns: str, *args: str, body: Any = None) -> str:
    proc = subprocess.run(
        ["kubectl", "-n", ns, *args],
        input=None if body is None else yaml.safe_dump_all(body),
        env={**os.environ, "KUBECONFIG": env["KUBECONFIG"]},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def sh(ns: str, pod: str, *command: str, check: bool = True) -> str:
    """`kubectl exec -n NS POD -- CMD` (the container's main one)."""
    proc = subprocess.run(
        ["kubectl", "exec", "-n", ns, pod, "--", *command],
        env={**os.environ, "KUBECONFIG": KUBECONFIG[0]},
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check:
        assert proc.returncode == 0, f"{command}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def controller(kube: Kube, ns: str) -> dict[str, Any]:
    return dict(
        client.CustomObjectsApi(kube.api).get_namespaced_custom_object(GROUP, VERSION, ns, "controllers", "slurm")
    )


def job_state(ns: str, job: str) -> str:
    out = sh(ns, "slurm-controller-0", "scontrol", "show", "job", job, check=False)
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith("JobState=")), "")


def pod_ready(kube: Kube, ns: str, name: str) -> bool:
    pod = kube.pod(ns, name) or {}
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or []
    )


class Operator:
    """The module's operator process, scoped to the cluster's namespace; a test may kill -9 and restart it."""

    def __init__(self, dev_env: dict[str, str], log: Path, ns: str) -> None:
        self.dev_env, self.log, self.ns = dev_env, log, ns
        self.proc = self.start()

    def start(self) -> subprocess.Popen[bytes]:
        return start_operator(
            self.dev_env,
            self.log,
            SLINKY_OPERATOR__NAMESPACES=json.dumps([self.ns]),
            SLINKY_OPERATOR__TASK_QUEUE=f"managed-{self.ns}",
            # A pod replaced for a new config once took 68 s here (kubelet 1.20 retried killing a container that had
            # already ended: "KillContainerError ... NotFound"); the rollback must not overtake that.
            SLINKY_OPERATOR__RECONFIGURE_VERIFY_SECONDS="150",
        )

    def kill_and_restart(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self.proc = self.start()


OPERATORS: dict[str, Operator] = {}
SBATCH = ("sbatch", "--parsable", "--chdir=/tmp")
"""A job's output where its user may write: `kubectl exec` runs as the container's user (slurm in the controller's
image), and so does the job it submits; `/`, the working directory, is root's."""
KUBECONFIG: list[str] = []
"""The stack's kubeconfig, once the module's cluster is made (`sh` runs kubectl with it)."""


@pytest.fixture(scope="module")
def cluster(kube: Kube, dev_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    ns = f"mc-{uuid.uuid4().hex[:6]}"
    KUBECONFIG[:] = [dev_env["KUBECONFIG"]]
    annotations = real_nodes.namespace_annotations(stack.REAL_NODE_TAINT)  # its pods go to the real nodes
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns, annotations=annotations)))
    operator = OPERATORS[ns] = Operator(dev_env, tmp_path_factory.mktemp("managed") / "operator.log", ns)
    try:
        kubectl(dev_env, ns, "apply", "-f", "-", body=manifests(ns, dev_env))
        for pod in ("slurm-controller-0", "slurm-accounting-0", "cpu-0", "cpu-1"):
            wait_for(lambda p=pod: pod_ready(kube, ns, p), 180, f"pod {pod} ready")
        yield ns
    finally:
        objects = client.CustomObjectsApi(kube.api)
        # The Controller first: a NodeSet deleted before it would start one more reconfigure.
        for plural in ("controllers", "nodesets", "loginsets", "restapis", "accountings"):
            for item in objects.list_namespaced_custom_object(GROUP, VERSION, ns, plural)["items"]:
                objects.delete_namespaced_custom_object(GROUP, VERSION, ns, plural, item["metadata"]["name"])
        # Not until every pod is gone: slurmd pods whose slurmctld went first end after their grace period; the
        # namespace's deletion below takes whatever is left.
        deadline = time.monotonic() + 10
        while kube.pods(ns) and time.monotonic() < deadline:
            time.sleep(0.5)
        stop_operator(operator.proc)
        for run in _running_workflows(dev_env, ns):  # its task queue has no worker any more
            subprocess.run(
                [
                    "temporal",
                    "workflow",
                    "terminate",
                    "--address",
                    dev_env["TEMPORAL_ADDRESS"],
                    "-w",
                    run,
                    "--reason",
                    "test module teardown",
                ],
                env=_temporal_env(),
                capture_output=True,
                check=False,
            )
        kube.core.delete_namespace(ns)


def test_the_resources_become_a_cluster_that_runs_jobs(kube: Kube, cluster: str, dev_env: dict[str, str]) -> None:
    ns = cluster
    status = controller(kube, ns)
    assert condition(status, "ConfigValid")["status"] == "True"
    wait_for(lambda: condition(controller(kube, ns), "Ready").get("status") == "True", 30, "Controller Ready")
    config = kube.core.read_namespaced_config_map("slurm-config", ns).data["slurm.conf"]
    assert f"ClusterName={ns}_slurm" in config and "NodeSet=cpu Feature=cpu" in config
    assert "PartitionName=cpu Nodes=cpu Default=YES MaxTime=UNLIMITED" in config
    assert config.rstrip().endswith("SchedulerParameters=batch_sched_delay=0,sched_interval=1")
    assert "cpu-[0-1]" in sh(ns, "slurm-controller-0", "sinfo", "-h", "-o", "%N")
    # kubectl logs: the container's own output, from the real kubelet.
    assert "Running as primary controller" in kubectl(dev_env, ns, "logs", "slurm-controller-0")
    assert len(kubectl(dev_env, ns, "logs", "cpu-0", "--tail=2").splitlines()) == 2
    # Names resolve inside the pods: the Service, the StatefulSet pod, the NodeSet's headless members.
    hosts = sh(ns, "cpu-0", "getent", "hosts", "slurm-controller", f"slurm-controller.{ns}", "cpu-1.slurm-workers")
    assert len(hosts.splitlines()) == 3
    out = sh(ns, "slurm-controller-0", *SBATCH, "-N2", "--wrap", "srun hostname")
    job = out.strip()
    wait_for(lambda: job_state(ns, job) == "COMPLETED", 60, f"job {job} COMPLETED")


def login_pod(kube: Kube, ns: str) -> str:
    """A ready login pod of LoginSet `login` (its Deployment names them `login-<hash>-<id>`)."""

    def ready() -> str | None:
        for pod in kube.pods(ns):
            name = str(pod["metadata"]["name"])
            if name.startswith("login-") and not pod["metadata"].get("deletionTimestamp") and pod_ready(kube, ns, name):
                return name
        return None

    return str(wait_for(ready, 60, "a ready login pod"))


def test_accounting_and_a_login_pod(kube: Kube, cluster: str, dev_env: dict[str, str]) -> None:
    """From a login pod (sackd, configless): sinfo, sbatch, squeue, sacct; worker names resolve there; the
    job is in slurmdbd on the real MariaDB (sacct, and GET /slurmdb/v0.0.44/jobs through the RestApi)."""
    ns = cluster
    objects = client.CustomObjectsApi(kube.api)
    wait_for(
        lambda: (
            condition(objects.get_namespaced_custom_object(GROUP, VERSION, ns, "accountings", "slurm"), "Ready").get(
                "status"
            )
            == "True"
        ),
        60,
        "Accounting Ready",
    )
    login = login_pod(kube, ns)
    assert "cpu-[0-1]" in sh(ns, login, "sinfo", "-h", "-o", "%N")
    assert "cpu-1.slurm-workers" in sh(ns, login, "getent", "hosts", "cpu-1"), "NodeSets resolve by hostname"
    job = sh(ns, login, *SBATCH, "-N2", "--wrap", "srun hostname").strip()
    wait_for(lambda: job_state(ns, job) == "COMPLETED", 60, f"job {job} COMPLETED")
    wait_for(
        lambda: f"{job} " in sh(ns, login, "sacct", "-X", "-n", "-o", "JobID,State", check=False), 30, "sacct lists it"
    )
    assert "COMPLETED" in sh(ns, login, "sacct", "-X", "-n", "-j", job, "-o", "State")
    endpoints = kube.core.read_namespaced_endpoints("slurm-restapi", ns)
    address = endpoints.subsets[0].addresses[0].ip
    token = jwt.mint(JWT_KEY.encode(), "slurm", 300)
    reply = httpx.get(
        f"http://{address}:6820/slurmdb/v0.0.44/jobs/",
        headers={"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": token},
        timeout=30,
    ).json()
    assert any(str(j["job_id"]) == job and j["state"]["current"] == ["COMPLETED"] for j in reply["jobs"]), reply.get(
        "errors"
    )


def test_kubectl_exec_into_a_login_pod(kube: Kube, cluster: str, dev_env: dict[str, str]) -> None:
    """`kubectl exec` through the apiserver to the real kubelet: Slurm's commands from a login pod, stdin, and the
    command's exit code as kubectl's."""
    ns = cluster
    login = login_pod(kube, ns)
    env = {**os.environ, "KUBECONFIG": dev_env["KUBECONFIG"]}

    def kubectl_exec(*command: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        flags = ["-i"] if stdin is not None else []
        return subprocess.run(
            ["kubectl", "exec", *flags, "-n", ns, login, "--", *command],
            input=stdin,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    sinfo = kubectl_exec("sinfo", "-h", "-o", "%P %N")
    assert sinfo.returncode == 0 and "cpu-[0-1]" in sinfo.stdout, sinfo.stderr
    job = kubectl_exec(*SBATCH, "-N1", "--wrap", "sleep 1").stdout.strip()
    assert job.isdigit()
    assert job in kubectl_exec("squeue", "-h", "-o", "%i").stdout or job_state(ns, job) == "COMPLETED"
    failed = kubectl_exec("sh", "-c", "echo to-stderr >&2; exit 7")
    assert failed.returncode == 7 and "to-stderr" in failed.stderr
    assert kubectl_exec("cat", stdin="through stdin\n").stdout == "through stdin\n"


def test_ssh_into_a_login_pod_with_roots_authorized_key(
    kube: Kube, cluster: str, dev_env: dict[str, str], tmp_path: Path
) -> None:
    """`rootSshAuthorizedKeys`: sshd in the login pods takes root's key; the pod shows the LoginSet's host key (the
    `<name>-ssh-host-keys` Secret, the same on every login pod); Slurm's commands work over ssh."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    ns = cluster
    key = ed25519.Ed25519PrivateKey.generate()
    identity = tmp_path / "id_ed25519"
    identity.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
    )
    identity.chmod(0o600)
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    before = login_pod(kube, ns)
    kubectl(
        dev_env, ns, "patch", "lss/login", "--type=merge", "-p", json.dumps({"spec": {"rootSshAuthorizedKeys": public}})
    )

    def rolled() -> str | None:  # a new sshd_config or authorized_keys makes new pods
        pod = login_pod(kube, ns)
        return pod if pod != before else None

    pod = wait_for(rolled, 120, "a login pod with the new authorized_keys")
    address = kube.core.read_namespaced_pod(pod, ns).status.pod_ip
    host_keys = kube.core.read_namespaced_secret("login-ssh-host-keys", ns).data
    known = tmp_path / "known_hosts"
    pub = base64.b64decode(host_keys["ssh_host_ed25519_key.pub"]).decode().split()
    known.write_text(f"{address} {pub[0]} {pub[1]}\n")
    command = [
        "ssh", "-i", str(identity), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
        "-o", f"UserKnownHostsFile={known}", "-o", "StrictHostKeyChecking=yes", "-o", "HostKeyAlgorithms=ssh-ed25519",
        f"root@{address}", "sinfo", "-h", "-o", "%N",
    ]  # fmt: skip
    done = wait_for(
        lambda: (d := subprocess.run(command, capture_output=True, text=True, timeout=30)).returncode == 0 and d,
        60,
        "ssh root@login pod",
    )
    assert "cpu-[0-1]" in done.stdout, (done.stdout, done.stderr)
    stranger = tmp_path / "stranger"
    stranger.write_bytes(
        ed25519.Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
    )
    stranger.chmod(0o600)
    refused = subprocess.run([*command[:2], str(stranger), *command[3:]], capture_output=True, text=True, timeout=30)
    assert refused.returncode != 0 and "Permission denied" in refused.stderr, "a key not in authorized_keys"


def test_a_loginset_scales_to_zero_and_back(kube: Kube, cluster: str, dev_env: dict[str, str]) -> None:
    ns = cluster
    objects = client.CustomObjectsApi(kube.api)
    kubectl(dev_env, ns, "scale", "lss/login", "--replicas=0")
    wait_for(lambda: not any(p["metadata"]["name"].startswith("login-") for p in kube.pods(ns)), 60, "no login pod")
    wait_for(
        lambda: (
            objects.get_namespaced_custom_object(GROUP, VERSION, ns, "loginsets", "login")
            .get("status", {})
            .get("replicas")
            == 0
        ),
        30,
        "status.replicas 0",
    )
    kubectl(dev_env, ns, "scale", "lss/login", "--replicas=1")
    login = login_pod(kube, ns)
    assert "cpu-[0-1]" in sh(ns, login, "sinfo", "-h", "-o", "%N")
    scale = objects.get_namespaced_custom_object_scale(GROUP, VERSION, ns, "loginsets", "login")
    assert scale["spec"]["replicas"] == 1 and "app.kubernetes.io/name=login" in scale["status"]["selector"]


@pytest.mark.timeout(300)  # the fix rolls the controller pod: a container's stop and start on a real node
def test_a_config_slurm_refuses_never_reaches_slurmctld_and_the_next_fix_applies(kube: Kube, cluster: str) -> None:
    ns = cluster
    objects = client.CustomObjectsApi(kube.api)
    before = (kube.pod(ns, "slurm-controller-0") or {})["metadata"]["uid"]
    config_before = kube.core.read_namespaced_config_map("slurm-config", ns).data["slurm.conf"]
    bad = {"spec": {"extraConf": "MaxJobCount=5000\nNoSuchSlurmKey=1"}}
    objects.patch_namespaced_custom_object(GROUP, VERSION, ns, "controllers", "slurm", bad)
    cond = wait_for(
        lambda: (c := condition(controller(kube, ns), "ConfigValid")).get("status") == "False" and c,
        60,
        "ConfigValid False",
    )
    assert cond["reason"] == "SlurmConfigRejected" and "NoSuchSlurmKey" in cond["message"], cond
    assert kube.core.read_namespaced_config_map("slurm-config", ns).data["slurm.conf"] == config_before
    assert (kube.pod(ns, "slurm-controller-0") or {})["metadata"]["uid"] == before, "slurmctld was not touched"
    assert "cpu-[0-1]" in sh(ns, "slurm-controller-0", "sinfo", "-h", "-o", "%N")
    events = kube.core.list_namespaced_event(ns, field_selector="involvedObject.kind=Controller").items
    assert any(e.reason == "SlurmConfigRejected" and "NoSuchSlurmKey" in e.message for e in events)

    good = {"spec": {"extraConf": "MaxJobCount=6000"}}
    objects.patch_namespaced_custom_object(GROUP, VERSION, ns, "controllers", "slurm", good)
    wait_for(
        lambda: (
            "MaxJobCount             = 6000" in sh(ns, "slurm-controller-0", "scontrol", "show", "config", check=False)
        ),
        120,
        "the fix runs",
    )
    wait_for(lambda: condition(controller(kube, ns), "ConfigValid").get("reason") == "Applied", 60, "Applied again")


SERVICE_MONITOR_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "names": {"kind": "ServiceMonitor", "listKind": "ServiceMonitorList", "plural": "servicemonitors",
                  "singular": "servicemonitor"},
        "scope": "Namespaced",
        "versions": [{"name": "v1", "served": True, "storage": True,
                      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}  # fmt: skip
"""prometheus-operator's ServiceMonitor API, schema left open (its CRD is not reachable here to install)."""


@pytest.mark.timeout(300)  # a restart-mode reconfigure, then the ServiceMonitor API appearing (looked for every 20 s)
def test_metrics_serve_openmetrics_and_a_service_monitor_follows_the_controller(
    kube: Kube, cluster: str, dev_env: dict[str, str]
) -> None:
    """`metrics.enabled`: slurmctld serves openmetrics (MetricsType in slurm.conf, through ControllerReconfigure);
    `serviceMonitor.enabled` without the API: a Warning Event names what to install; with it: the ServiceMonitor
    selects the Controller's Service; turned off, it goes."""
    ns = cluster
    objects = client.CustomObjectsApi(kube.api)
    extensions = client.ApiextensionsV1Api(kube.api)
    metrics = {"spec": {"metrics": {"enabled": True, "serviceMonitor": {"enabled": True, "interval": "30s"}}}}
    objects.patch_namespaced_custom_object(GROUP, VERSION, ns, "controllers", "slurm", metrics)
    wait_for(
        lambda: "metrics/openmetrics" in sh(ns, "slurm-controller-0", "scontrol", "show", "config", check=False),
        180,
        "slurmctld runs MetricsType=metrics/openmetrics",
    )
    address = wait_for(lambda: pod_ready(kube, ns, "slurm-controller-0") and kube.pod(ns, "slurm-controller-0"), 60)
    nodes = wait_for(
        lambda: (
            (r := httpx.get(f"http://{address['status']['podIP']}:6817/metrics/nodes", timeout=10)).status_code == 200
            and r.text
        ),
        60,
        "GET /metrics/nodes from slurmctld",
    )
    assert "slurm_nodes" in nodes, nodes[:500]
    events = wait_for(
        lambda: [e for e in kube.events(ns, "slurm") if e["reason"] == "ServiceMonitorUnavailable"], 60, "an Event"
    )
    assert "install prometheus-operator's CRDs" in events[0]["message"]
    extensions.create_custom_resource_definition(SERVICE_MONITOR_CRD)
    try:
        monitor = wait_for(
            lambda: _get_or_none(lambda: objects.get_namespaced_custom_object(
                "monitoring.coreos.com", "v1", ns, "servicemonitors", "slurm")),
            90,
            "the ServiceMonitor made once the API is served",
        )  # fmt: skip
        labels = kube.core.read_namespaced_service("slurm-controller", ns).metadata.labels
        assert all(labels.get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
        assert {e["path"] for e in monitor["spec"]["endpoints"]} >= {"/metrics/nodes", "/metrics/jobs"}
        off = {"spec": {"metrics": {"serviceMonitor": {"enabled": False}}}}
        objects.patch_namespaced_custom_object(GROUP, VERSION, ns, "controllers", "slurm", off)
        wait_for(
            lambda: _get_or_none(lambda: objects.get_namespaced_custom_object(
                "monitoring.coreos.com", "v1", ns, "servicemonitors", "slurm")) is None,
            60,
            "the ServiceMonitor deleted",
        )  # fmt: skip
    finally:
        extensions.delete_custom_resource_definition(SERVICE_MONITOR_CRD["metadata"]["name"])


def _get_or_none(read: Any) -> Any:
    try:
        return read()
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise


def test_bad_references_are_named_on_the_objects(kube: Kube, cluster: str, dev_env: dict[str, str]) -> None:
    ns = cluster
    kubectl(
        dev_env,
        ns,
        "apply",
        "-f",
        "-",
        body=[
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Controller",
                "metadata": {"name": "nokey"},
                "spec": {
                    "slurmKeyRef": {"name": "missing", "key": "slurm.key"},
                    "jwtKeyRef": {"name": "slurm-auth-jwt", "key": "jwt.key"},
                },
            },
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "RestApi",
                "metadata": {"name": "orphan"},
                "spec": {"controllerRef": {"name": "nowhere"}},
            },
        ],
    )
    objects = client.CustomObjectsApi(kube.api)
    cond = wait_for(
        lambda: condition(
            objects.get_namespaced_custom_object(GROUP, VERSION, ns, "controllers", "nokey"), "ConfigValid"
        ),
        30,
        "nokey ConfigValid",
    )
    assert (cond["status"], cond["reason"]) == ("False", "KeySecretNotFound") and "spec.slurmKeyRef" in cond["message"]
    cond = wait_for(
        lambda: condition(objects.get_namespaced_custom_object(GROUP, VERSION, ns, "restapis", "orphan"), "Ready"),
        30,
        "orphan Ready",
    )
    assert (cond["status"], cond["reason"]) == ("False", "ControllerNotFound") and "nowhere" in cond["message"]
    assert kube.pod(ns, "nokey-controller-0") is None
    objects.delete_namespaced_custom_object(GROUP, VERSION, ns, "restapis", "orphan")
    objects.delete_namespaced_custom_object(GROUP, VERSION, ns, "controllers", "nokey")


def _temporal_env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def _list(dev_env: dict[str, str], query: str) -> list[dict[str, Any]]:
    proc = subprocess.run(
        ["temporal", "workflow", "list", "--address", dev_env["TEMPORAL_ADDRESS"], "-o", "json", "-q", query],
        env=_temporal_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    runs: list[dict[str, Any]] = json.loads(proc.stdout or "[]")
    return runs


def _running_workflows(dev_env: dict[str, str], ns: str) -> list[str]:
    query = f"SlinkyNamespace='{ns}' AND ExecutionStatus='Running'"
    return [str(r["execution"]["workflowId"]) for r in _list(dev_env, query)]


def _reconfigures(dev_env: dict[str, str], ns: str, config_hash: str) -> list[dict[str, Any]]:
    """The ControllerReconfigure runs of one config hash."""
    query = f"WorkflowType='ControllerReconfigure' AND SlinkyNamespace='{ns}'"
    return [r for r in _list(dev_env, query) if str(r["execution"]["workflowId"]).endswith(f"/{config_hash}")]


def test_kill_9_of_the_operator_mid_reconfigure_still_applies_it_once(
    kube: Kube, cluster: str, dev_env: dict[str, str]
) -> None:
    ns = cluster
    job = sh(ns, "slurm-controller-0", *SBATCH, "-N1", "--wrap", "sleep 20").strip()
    wait_for(lambda: job_state(ns, job) == "RUNNING", 30, f"job {job} RUNNING")
    time.sleep(1)
    patch = {"spec": {"extraConf": "MaxJobCount=7000"}}
    client.CustomObjectsApi(kube.api).patch_namespaced_custom_object(GROUP, VERSION, ns, "controllers", "slurm", patch)
    wait_for(
        lambda: condition(controller(kube, ns), "ConfigValid").get("reason") == "Reconfiguring", 30, "Reconfiguring"
    )
    OPERATORS[ns].kill_and_restart()  # kill -9 while the workflow applies or verifies
    wait_for(
        lambda: (
            "MaxJobCount             = 7000" in sh(ns, "slurm-controller-0", "scontrol", "show", "config", check=False)
        ),
        120,
        "the new config runs after the operator's restart",
    )
    wait_for(lambda: condition(controller(kube, ns), "ConfigValid").get("reason") == "Applied", 60, "Applied")
    applied = kube.core.read_namespaced_config_map("slurm-config", ns).metadata.annotations
    runs = _reconfigures(dev_env, ns, applied["slinky.slurm.net/slurm-config-hash"])
    assert len(runs) == 1, runs
    assert job_state(ns, job) in ("RUNNING", "COMPLETED")
    wait_for(lambda: job_state(ns, job) == "COMPLETED", 60, f"job {job} COMPLETED")


def test_mariadb_down_loses_no_accounting_record(kube: Kube, cluster: str) -> None:
    """The database stops (kill -9) while a job runs and ends: slurmctld and slurmdbd queue its record, and the
    Accounting says so (Ready=False, DatabaseUnreachable, slurmdbd's own words); once MariaDB is back, sacct
    lists the job COMPLETED and the Accounting is Ready again."""
    ns = cluster
    login = login_pod(kube, ns)
    procs = stack.ProcessTable(stack.STATE / "pids")
    pid = procs.running("mariadb")
    assert pid is not None, "the stack's MariaDB runs"
    objects = client.CustomObjectsApi(kube.api)

    def ready() -> dict[str, Any]:
        return condition(objects.get_namespaced_custom_object(GROUP, VERSION, ns, "accountings", "slurm"), "Ready")

    assert ready().get("status") == "True"
    os.kill(pid, signal.SIGKILL)
    try:
        job = sh(ns, login, *SBATCH, "-N1", "--wrap", "sleep 2").strip()
        wait_for(lambda: job_state(ns, job) == "COMPLETED", 60, f"job {job} COMPLETED without the database")
        down = wait_for(
            lambda: (c := ready()).get("reason") == "DatabaseUnreachable" and c, 40, "Ready=False DatabaseUnreachable"
        )
        assert down["status"] == "False" and "Unable to connect to database" in down["message"], down
        assert "slurmctld holds" in down["message"], down
        assert pod_ready(kube, ns, "slurm-accounting-0"), "slurmdbd's pod is left alone: it reconnects by itself"
    finally:
        stack.start_mariadb(stack.ProcessTable(stack.STATE / "pids"))
    wait_for(
        lambda: "COMPLETED" in sh(ns, login, "sacct", "-X", "-n", "-j", job, "-o", "State", check=False),
        120,
        f"sacct lists job {job} once MariaDB is back",
    )
    wait_for(lambda: ready().get("status") == "True", 40, "Ready=True once the database is back")


def _active(kube: Kube, ns: str, name: str) -> list[str]:
    """The Controller's slurmctld pods labelled active."""
    pods = kube.core.list_namespaced_pod(ns, label_selector=f"app.kubernetes.io/instance={name}").items
    return sorted(p.metadata.name for p in pods if (p.metadata.labels or {}).get(ACTIVE) == "true")


def _endpoint_ips(kube: Kube, ns: str, service: str) -> list[str]:
    subsets = kube.core.read_namespaced_endpoints(service, ns).subsets or []
    return sorted(a.ip for s in subsets for a in s.addresses or [])


def _pod_ip(kube: Kube, ns: str, pod: str) -> str:
    return str((kube.pod(ns, pod) or {}).get("status", {}).get("podIP") or "")


ACTIVE = "controller.slinky.slurm.net/active"
HASH = "slinky.slurm.net/slurm-config-hash"


@pytest.mark.timeout(420)  # two slurmctld pods made in order, a takeover after SlurmctldTimeout and back, a roll
def test_a_managed_controller_on_an_external_accounting_beside_the_managed_one(
    kube: Kube, cluster: str, dev_env: dict[str, str]
) -> None:
    """Hybrid and highly available: a second managed Controller whose Accounting is external (`external: true`,
    `externalConfig`: here the first cluster's slurmdbd, reached as any external slurmdbd would be), run as
    upstream's `ha.enabled` (a primary and one backup slurmctld on different nodes, one ReadWriteMany claim as
    StateSaveLocation). Its jobs are recorded in the external slurmdbd, beside the first cluster's. A hung
    primary (SIGSTOP) is taken over by the backup: the operator moves the `active` label, the Service (Slurm's
    SlurmctldAddr) follows, and jobs keep running; killed, the primary comes back and takes control again."""
    ns = cluster
    keys = {
        "slurmKeyRef": {"name": "slurm-auth-slurm", "key": "slurm.key"},
        "jwtKeyRef": {"name": "slurm-auth-jwt", "key": "jwt.key"},
    }
    state_claim: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "hybrid-state"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    hybrid: list[dict[str, Any]] = [
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Accounting",
            "metadata": {"name": "ext"},
            "spec": {"external": True, "externalConfig": {"host": "slurm-accounting", "port": 6819}},
        },
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Controller",
            "metadata": {"name": "hybrid"},
            "spec": {
                **keys,
                "accountingRef": {"name": "ext"},
                # A backup takes over after SlurmctldTimeout without an answer (Slurm's default: 120 s).
                "extraConf": "SchedulerParameters=batch_sched_delay=0,sched_interval=1\nSlurmctldTimeout=10",
                "ha": {"enabled": True, "backups": 1},
                "persistence": {"enabled": True, "existingClaim": "hybrid-state"},
            },
        },
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "RestApi",
            "metadata": {"name": "hybrid"},
            "spec": {"controllerRef": {"name": "hybrid"}, "slurmrestd": {"image": image("slurmrestd")}},
        },
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NodeSet",
            "metadata": {"name": "hy"},
            "spec": {
                "controllerRef": {"name": "hybrid"},
                "replicas": 1,
                "partition": {"enabled": True},
                "slurmd": {"image": image("slurmd")},
            },
        },
    ]
    objects = client.CustomObjectsApi(kube.api)

    def config_valid() -> dict[str, Any]:
        return condition(
            objects.get_namespaced_custom_object(GROUP, VERSION, ns, "controllers", "hybrid"), "ConfigValid"
        )

    # Without the slurmctld image (the operator picks none): named on the Controller, nothing made.
    kubectl(dev_env, ns, "apply", "-f", "-", body=hybrid)
    cond = wait_for(lambda: (c := config_valid()).get("reason") == "MissingImage" and c, 30, "MissingImage")
    assert cond["status"] == "False" and "spec.slurmctld.image is required" in cond["message"]
    wait_for(
        lambda: [
            e
            for e in kube.events(ns, "hybrid")
            if e["reason"] == "MissingImage" and e["involvedObject"]["kind"] == "Controller"
        ],
        20,
        "a Warning Event MissingImage on the Controller",
    )
    apps = client.AppsV1Api(kube.api)
    assert apps.list_namespaced_stateful_set(ns, field_selector="metadata.name=hybrid-controller").items == []
    # kubelet would restart a hung slurmctld after 60 s (upstream's livenessProbe); later here, so the test sees
    # the backup in control for as long as it needs, then kills the primary itself.
    hybrid[1]["spec"]["slurmctld"] = {"image": image("slurmctld"), "livenessProbe": {"failureThreshold": 60}}
    kubectl(dev_env, ns, "apply", "-f", "-", body=hybrid)
    try:
        # HA names a claim that does not exist yet: said, nothing made.
        cond = wait_for(lambda: (c := config_valid()).get("reason") == "ClaimNotFound" and c, 30, "ClaimNotFound")
        assert "PersistentVolumeClaim" in cond["message"] and "hybrid-state" in cond["message"]
        assert apps.list_namespaced_stateful_set(ns, field_selector="metadata.name=hybrid-controller").items == []
        kubectl(dev_env, ns, "apply", "-f", "-", body=[state_claim])
        for pod in ("hybrid-controller-0", "hybrid-controller-1", "hy-0"):
            wait_for(lambda p=pod: pod_ready(kube, ns, p), 120, f"pod {pod} ready")
        primary, backup = (kube.pod(ns, f"hybrid-controller-{i}") or {} for i in (0, 1))
        assert primary["spec"]["nodeName"] != backup["spec"]["nodeName"]  # upstream's anti-affinity
        wait_for(lambda: _active(kube, ns, "hybrid") == ["hybrid-controller-0"], 30, "the primary labelled active")
        assert _endpoint_ips(kube, ns, "hybrid-controller") == [_pod_ip(kube, ns, "hybrid-controller-0")]
        ping = sh(ns, "hybrid-controller-1", "scontrol", "ping")
        assert "(primary) at hybrid-controller-0 is UP" in ping and "(backup) at hybrid-controller-1 is UP" in ping
        conf = sh(ns, "hybrid-controller-0", "scontrol", "show", "config")
        assert "AccountingStorageHost   = slurm-accounting" in conf and "AccountingStoragePort   = 6819" in conf
        wait_for(
            lambda: "idle" in sh(ns, "hybrid-controller-0", "sinfo", "-h", "-o", "%t", check=False), 60, "hy-0 idle"
        )

        def run_job(pod: str) -> str:
            job = sh(ns, pod, *SBATCH, "-p", "hy", "-N1", "--wrap", "hostname").strip()

            def state() -> str:
                out = sh(ns, pod, "scontrol", "show", "job", job, check=False)
                return next((w.split("=", 1)[1] for w in out.split() if w.startswith("JobState=")), "")

            wait_for(lambda: state() == "COMPLETED", 120, f"hybrid job {job} COMPLETED")
            return job

        job = run_job("hybrid-controller-0")
        login = login_pod(kube, ns)

        def recorded(job: str) -> bool:
            listing = ("sacct", "-M", f"{ns}_hybrid", "-X", "-n", "-j", job, "-o", "Cluster,State")
            return "COMPLETED" in sh(ns, login, *listing, check=False)

        wait_for(lambda: recorded(job), 60, "the external Accounting has it")
        own = sh(ns, "slurm-controller-0", *SBATCH, "-N1", "--wrap", "true").strip()
        wait_for(lambda: job_state(ns, own) == "COMPLETED", 60, "the first cluster still runs jobs")

        # A new slurm.conf goes through ControllerReconfigure to both: each pod is made again from the new
        # template (the backup first), and the primary runs it.
        before = config_valid()["message"]
        patch = {"spec": {"extraConf": hybrid[1]["spec"]["extraConf"] + "\nMaxJobCount=20000"}}
        objects.patch_namespaced_custom_object(GROUP, VERSION, ns, "controllers", "hybrid", patch)

        def applied() -> bool:
            cond = config_valid()
            pods = [kube.pod(ns, f"hybrid-controller-{i}") or {} for i in (0, 1)]
            hashes = {(p.get("metadata") or {}).get("annotations", {}).get(HASH) for p in pods}
            new = cond.get("reason") == "Applied" and cond["message"] != before
            return new and len(hashes) == 1 and hashes.pop() in cond["message"]

        wait_for(applied, 180, "the new slurm.conf applied to both slurmctld pods")
        config = sh(ns, "hybrid-controller-1", "scontrol", "show", "config")
        assert "MaxJobCount             = 20000" in config
        wait_for(lambda: _active(kube, ns, "hybrid") == ["hybrid-controller-0"], 60, "the primary in control")
        # (Also what lets the backup take over below: with accounting, Slurm's backup ends at a takeover, "fatal:
        # No Assoc usage file", until the primary has saved its state once; a clean stop saves it.)

        # The primary hangs: the backup takes over, the label and the Service follow, jobs still run.
        sh(ns, "hybrid-controller-0", "sh", "-c", "kill -STOP $(pidof slurmctld)")
        try:
            wait_for(lambda: _active(kube, ns, "hybrid") == ["hybrid-controller-1"], 90, "the backup labelled active")
        except AssertionError as err:
            ping = sh(ns, "hybrid-controller-1", "scontrol", "ping", check=False)
            logs = kubectl(dev_env, ns, "logs", "hybrid-controller-1", "--tail=15")
            raise AssertionError(f"{err}\n{ping}\n{logs}") from err
        backup_ip = _pod_ip(kube, ns, "hybrid-controller-1")
        wait_for(lambda: _endpoint_ips(kube, ns, "hybrid-controller") == [backup_ip], 30, "the Service on the backup")
        assert "(backup) at hybrid-controller-1 is UP" in sh(ns, "hybrid-controller-1", "scontrol", "ping")
        taken_over = run_job("hybrid-controller-1")
        ready = condition(objects.get_namespaced_custom_object(GROUP, VERSION, ns, "controllers", "hybrid"), "Ready")
        assert ready["status"] == "True" and "hybrid-controller-1 is in control" in ready["message"], ready

        # Killed, the primary's container starts again and takes control back from the backup.
        sh(ns, "hybrid-controller-0", "sh", "-c", "kill -KILL $(pidof slurmctld)")
        wait_for(lambda: _active(kube, ns, "hybrid") == ["hybrid-controller-0"], 120, "the primary active again")
        wait_for(
            lambda: "hybrid-controller-0 is UP" in sh(ns, "hybrid-controller-1", "scontrol", "ping", check=False),
            60,
            "the primary answers",
        )
        run_job("hybrid-controller-0")
        try:
            wait_for(lambda: recorded(taken_over), 60, "the job run by the backup in the external Accounting")
        except AssertionError as err:
            listing = sh(ns, login, "sacct", "-M", f"{ns}_hybrid", "-X", "-a", "-o", "JobID,Cluster,State", check=False)
            logs = kubectl(dev_env, ns, "logs", "hybrid-controller-1", "--tail=25")
            raise AssertionError(f"{err}\n{listing}\n{logs}") from err

    finally:
        for plural, name in (
            ("controllers", "hybrid"),
            ("nodesets", "hy"),
            ("restapis", "hybrid"),
            ("accountings", "ext"),
        ):
            with contextlib.suppress(client.ApiException):
                objects.delete_namespaced_custom_object(GROUP, VERSION, ns, plural, name)
        with contextlib.suppress(client.ApiException):
            kube.core.delete_namespaced_persistent_volume_claim("hybrid-state", ns)
