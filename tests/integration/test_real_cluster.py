"""deploy/examples/slurm-cluster.yaml in containers on the real nodes (issue 30), run by the operator installed
in-cluster from its chart: the operator's own pod and the cluster's pods pulled from the stack's registry
(Slurm images under upstream's names) and run by kubelet + containerd; `kubectl exec` into the login pod for
sinfo, srun and sacct; the controller's own log; the save-state on a provisioned volume; a scale-in that waits
for a job; a reconfigure that rolls the controller pod; a killed slurmctld restarted by the kubelet; an image
the registry lacks named on the NodeSet. One cluster for the module, in a namespace of its own annotated for
the real nodes, where the chart is installed too; tests in order."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from slinky.dev import demo, images, in_cluster, real_nodes
from slinky.dev import stack as dev_stack
from slinky.dev import webhook as dev_webhook
from tests.integration.devstack import kubectl
from tests.integration.operator_fixtures import end_workflows_of, wait_for

pytestmark = pytest.mark.integration

WEBHOOK_SCOPE = "slinky.slurm.net/webhook-test"
KINDS = ("controllers", "nodesets", "loginsets", "restapis", "accountings")
CHART = Path(__file__).resolve().parents[2] / "deploy" / "charts" / "slinky-operator"
RELEASE = "slinky-operator"


def manifest(ns: str, dev_env: dict[str, str]) -> list[dict[str, Any]]:
    """The example with the stack's MariaDB filled in, in namespace `ns` with a database of
    its own; nothing else changed."""
    docs = [d for d in demo.cluster_manifest(dev_env) if d["kind"] != "Namespace"]
    for doc in docs:
        doc["metadata"]["namespace"] = ns
        if doc["kind"] == "Accounting":
            doc["spec"]["storageConfig"]["database"] = database(ns)
    return docs


def database(ns: str) -> str:
    return f"acct_{ns.replace('-', '_')}"


def sql(dev_env: dict[str, str], statement: str) -> None:
    subprocess.run(
        [
            "mariadb",
            "--no-defaults",
            "--protocol=TCP",
            f"--host={dev_env['SLINKY_DEV_MARIADB_HOST']}",
            f"--port={dev_env['SLINKY_DEV_MARIADB_PORT']}",
            f"--user={dev_env['SLINKY_DEV_MARIADB_USER']}",
            "--batch",
        ],
        input=statement,
        env={**os.environ, "MYSQL_PWD": Path(dev_env["SLINKY_DEV_MARIADB_PASSWORD_FILE"]).read_text().strip()},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def get(env: dict[str, str], ns: str, *what: str) -> dict[str, Any]:
    out = kubectl(env, "-n", ns, "get", *what, "-o", "json", check=False)
    return json.loads(out) if out.strip() else {}


def ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or []
    )


def login_pod(env: dict[str, str], ns: str) -> str:
    """A ready login pod's name, or "" (sackd restarts with slurmctld: its pod is not ready for a moment)."""
    pods = get(env, ns, "pods", "-l", "app.kubernetes.io/name=login").get("items") or []
    running = [p["metadata"]["name"] for p in pods if ready(p) and not p["metadata"].get("deletionTimestamp")]
    return str(running[0]) if running else ""


def on_login(env: dict[str, str], ns: str, *command: str, check: bool = True) -> str:
    pod = wait_for(lambda: login_pod(env, ns), 60, f"a ready login pod in {ns}")
    return kubectl(env, "-n", ns, "exec", pod, "--", *command, check=check)


def idle_nodes(env: dict[str, str], ns: str) -> set[str]:
    if not login_pod(env, ns):
        return set()
    out = on_login(env, ns, "sinfo", "-h", "-N", "-o", "%N %t", check=False)
    return {line.split()[0] for line in out.splitlines() if line.split()[1:] == ["idle"]}


def real_node_names(env: dict[str, str]) -> set[str]:
    listed = json.loads(kubectl(env, "get", "nodes", "-l", real_nodes.NODE_LABEL, "-o", "json"))
    return {n["metadata"]["name"] for n in listed["items"]}


@pytest.fixture(scope="module")
def cluster(dev_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    ns = f"rc-{uuid.uuid4().hex[:6]}"
    annotations = real_nodes.namespace_annotations(dev_stack.REAL_NODE_TAINT)
    labels = {WEBHOOK_SCOPE: ns}  # the chart's webhook judges this namespace only (other tests make bad objects)
    meta = {"name": ns, "annotations": annotations, "labels": labels}
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}
    kubectl(dev_env, "apply", "-f", "-", stdin=json.dumps(namespace))
    queue = f"real-{ns}"
    image = images.ensure_project_image(dev_stack.registry_address(), print)
    repository, _, tag = image.rpartition(":")
    site = [  # this machine's Slurm nodes have no cgroup v2 (as the stack's own operator is told)
        {"name": k, "value": dev_env[k]}
        for k in ("SLINKY_OPERATOR__CGROUP_CONF", "SLINKY_OPERATOR__SLURM_CONF_DEFAULTS")
        if dev_env.get(k)
    ]
    values = {
        "image": {"repository": repository, "tag": tag},
        "temporal": {"taskQueue": queue},
        "operator": {"namespaces": [ns], "replicas": 1, "extraEnv": site},
        "webhook": {"namespaceSelector": {"matchLabels": labels}},
    }
    chart = helm.Config(kubeconfig_path=dev_env["KUBECONFIG"], namespace=ns)
    try:
        with dev_webhook.KubeSync(dev_env["KUBECONFIG"]) as kube:  # a run stopped mid-way left its ClusterRoles
            in_cluster.remove_orphans(kube, RELEASE)
        chart.install(str(CHART), RELEASE, values, timeout=60)

        def chart_ready() -> bool:
            pods = get(dev_env, ns, "pods", "-l", "app.kubernetes.io/name=slinky-operator").get("items") or []
            parts = {p["metadata"]["labels"].get("app.kubernetes.io/component") for p in pods if ready(p)}
            return {"operator", "webhook"} <= parts

        wait_for(chart_ready, 180, "the operator's and the webhook's pods ready (in-cluster, from the chart)")
        kubectl(dev_env, "apply", "-f", "-", stdin=yaml.safe_dump_all(manifest(ns, dev_env)))

        def up() -> bool:
            pods = get(dev_env, ns, "pods").get("items") or []
            names = {p["metadata"]["name"] for p in pods if ready(p)}
            return {"slurm-controller-0", "slurm-accounting-0", "cpu-0"} <= names and len(names) >= 5

        wait_for(up, 240, "the example's five pods ready")
        wait_for(lambda: "cpu-0" in idle_nodes(dev_env, ns), 180, "cpu-0 idle in sinfo")
        yield ns
    finally:
        for kind in KINDS:  # the Controller first: a NodeSet deleted before it starts one more reconfigure
            kubectl(dev_env, "-n", ns, "delete", kind, "--all", "--wait=false", check=False)

        def cluster_pods() -> list[Any]:  # the chart's own pods go with the uninstall below
            pods = get(dev_env, ns, "pods").get("items") or []
            return [p for p in pods if p["metadata"].get("labels", {}).get("app.kubernetes.io/name") != RELEASE]

        with contextlib.suppress(AssertionError):
            wait_for(lambda: not cluster_pods(), 15, "the cluster's pods gone")  # the namespace takes the rest
        kubectl(dev_env, "-n", ns, "delete", "pvc", "--all", check=False)
        with contextlib.suppress(Exception):
            chart.uninstall(RELEASE, timeout=60)
        chart.close()
        end_workflows_of(dev_env, queue)
        kubectl(dev_env, "delete", "namespace", ns, "--wait=false", check=False)
        sql(dev_env, f"DROP DATABASE IF EXISTS {database(ns)};\n")


def refused(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    """``kubectl ARGS`` that must fail; its stderr (what the user reads)."""
    proc = subprocess.run(
        ["kubectl", "--kubeconfig", env["KUBECONFIG"], *args], input=stdin, text=True, capture_output=True, timeout=60
    )
    assert proc.returncode != 0, proc.stdout
    return proc.stderr


def test_the_charts_webhook_denies_bad_objects_at_kubectl_apply_and_patch(
    cluster: str, dev_env: dict[str, str]
) -> None:
    """The operator chart's validating webhook, in-cluster (its Service, its Helm-made certificate): what kubectl
    prints for a bad NodeSet and for a change of an immutable field; the example's objects went through it."""
    bad = {
        "apiVersion": "slinky.slurm.net/v1beta1",
        "kind": "NodeSet",
        "metadata": {"name": "bad", "namespace": cluster},
        "spec": {
            "controllerRef": {"name": "slurm"},
            "slurmd": {"image": "ghcr.io/slinkyproject/slurmd:26.05-ubuntu26.04"},
            "updateStrategy": {"rollingUpdate": {"maxUnavailable": 0}},
        },
    }
    err = refused(dev_env, "apply", "-f", "-", stdin=json.dumps(bad))
    assert 'admission webhook "validate.slinky.slurm.net" denied the request' in err, err
    assert f"NodeSet {cluster}/bad: spec.updateStrategy.rollingUpdate.maxUnavailable must not be 0" in err
    patch = json.dumps({"spec": {"controllerRef": {"name": "other"}}})
    err = refused(dev_env, "-n", cluster, "patch", "nodeset", "cpu", "--type=merge", "-p", patch)
    assert "spec.controllerRef is immutable" in err, err


def test_the_example_runs_in_containers_on_the_real_nodes_from_the_registry(
    cluster: str, dev_env: dict[str, str]
) -> None:
    real = real_node_names(dev_env)
    pods = get(dev_env, cluster, "pods")["items"]
    assert len(pods) == 7  # the operator's, its webhook's and the example's five
    for pod in pods:
        name = pod["metadata"]["name"]
        assert pod["spec"]["nodeName"] in real, f"{name} is on {pod['spec']['nodeName']}, not a real node"
        (status,) = pod["status"]["containerStatuses"]
        assert status["containerID"].startswith("containerd://"), name
        assert "sha256:" in status["imageID"], status  # pulled: a digest (the name shown is the image's first tag)
        if not name.startswith(RELEASE):
            assert pod["spec"]["containers"][0]["image"].startswith("ghcr.io/slinkyproject/"), name
    claim = get(dev_env, cluster, "pvc", "statesave-slurm-controller-0")
    assert claim["status"]["phase"] == "Bound" and claim["spec"]["storageClassName"] == "slinky-local-path"
    volume = json.loads(kubectl(dev_env, "get", "pv", claim["spec"]["volumeName"], "-o", "json"))
    assert Path(volume["spec"]["hostPath"]["path"]).is_dir()
    assert "cpu-0" in idle_nodes(dev_env, cluster)


@pytest.mark.timeout(300)
def test_a_two_node_srun_completes_across_two_real_nodes_and_sacct_lists_it(
    cluster: str, dev_env: dict[str, str]
) -> None:
    kubectl(dev_env, "-n", cluster, "scale", "nodeset/cpu", "--replicas=2")
    wait_for(lambda: {"cpu-0", "cpu-1"} <= idle_nodes(dev_env, cluster), 120, "cpu-0 and cpu-1 idle")
    nodes = {get(dev_env, cluster, "pod", p)["spec"]["nodeName"] for p in ("cpu-0", "cpu-1")}
    assert len(nodes) == 2, f"both slurmd pods on {nodes}: the NodeSet's anti-affinity keeps one per node"
    out = on_login(dev_env, cluster, "srun", "-N2", "-J", "across", "hostname")
    assert sorted(out.split()) == ["cpu-0", "cpu-1"]

    def listed() -> bool:
        rows = on_login(dev_env, cluster, "sacct", "-X", "-n", "-P", "--name=across", "-o", "JobName,State,NodeList")
        return "across|COMPLETED|cpu-[0-1]" in rows.splitlines()

    wait_for(listed, 60, "sacct lists the srun job COMPLETED on cpu-[0-1]")


def test_kubectl_logs_of_the_controller_pod_is_its_containers_own_log(cluster: str, dev_env: dict[str, str]) -> None:
    out = kubectl(dev_env, "-n", cluster, "logs", "slurm-controller-0")
    assert "slurmctld version 26.05" in out and "Running as primary controller" in out


@pytest.mark.timeout(300)
def test_a_deleted_controller_pod_keeps_the_job_queue(cluster: str, dev_env: dict[str, str]) -> None:
    job = on_login(dev_env, cluster, "sbatch", "--hold", "--parsable", "--wrap", "sleep 1").strip()
    before = get(dev_env, cluster, "pod", "slurm-controller-0")["metadata"]["uid"]
    kubectl(dev_env, "-n", cluster, "delete", "pod", "slurm-controller-0")

    def back() -> bool:
        pod = get(dev_env, cluster, "pod", "slurm-controller-0")
        return bool(pod) and pod["metadata"]["uid"] != before and ready(pod)

    wait_for(back, 120, "a new slurm-controller-0 ready")
    state = on_login(dev_env, cluster, "squeue", "-h", "-j", job, "-o", "%T %r").split()
    assert state == ["PENDING", "JobHeldUser"], state
    on_login(dev_env, cluster, "scancel", job)


@pytest.mark.timeout(300)
def test_kill_9_of_slurmctld_is_restarted_by_the_kubelet_with_every_job(cluster: str, dev_env: dict[str, str]) -> None:
    job = on_login(dev_env, cluster, "sbatch", "--hold", "--parsable", "--wrap", "sleep 1").strip()
    restarts = get(dev_env, cluster, "pod", "slurm-controller-0")["status"]["containerStatuses"][0]["restartCount"]
    kubectl(dev_env, "-n", cluster, "exec", "slurm-controller-0", "--", "pkill", "-9", "-x", "slurmctld")

    def restarted() -> bool:
        pod = get(dev_env, cluster, "pod", "slurm-controller-0")
        return pod["status"]["containerStatuses"][0]["restartCount"] > restarts and ready(pod)

    wait_for(restarted, 120, "slurmctld's container restarted and ready")
    assert on_login(dev_env, cluster, "squeue", "-h", "-j", job, "-o", "%T").split() == ["PENDING"]
    on_login(dev_env, cluster, "scancel", job)


@pytest.mark.timeout(300)
def test_scale_in_waits_for_the_job_on_the_node_it_removes(cluster: str, dev_env: dict[str, str]) -> None:
    wait_for(lambda: {"cpu-0", "cpu-1"} <= idle_nodes(dev_env, cluster), 120, "cpu-0 and cpu-1 idle")
    # On both nodes, so whichever pod the scale-in picks has a job to wait for (an idle one would go first).
    job = on_login(dev_env, cluster, "sbatch", "--parsable", "-N2", "--wrap", "srun sleep 20").strip()
    wait_for(
        lambda: on_login(dev_env, cluster, "squeue", "-h", "-j", job, "-o", "%T").strip() == "RUNNING",
        60,
        "the job running on cpu-0 and cpu-1",
    )
    kubectl(dev_env, "-n", cluster, "scale", "nodeset/cpu", "--replicas=1")

    def draining() -> bool:
        out = on_login(dev_env, cluster, "sinfo", "-h", "-n", "cpu-1", "-o", "%t", check=False).strip()
        return out.startswith(("drng", "drain"))

    wait_for(draining, 60, "cpu-1 draining while its job runs")
    assert get(dev_env, cluster, "pod", "cpu-1"), "the pod went while its job ran"
    assert on_login(dev_env, cluster, "squeue", "-h", "-j", job, "-o", "%T").strip() == "RUNNING"
    wait_for(lambda: not get(dev_env, cluster, "pod", "cpu-1"), 120, "cpu-1 deleted once its job ended")
    state = on_login(dev_env, cluster, "sacct", "-X", "-n", "-P", "-j", job, "-o", "State").strip()
    assert state == "COMPLETED", f"the job ended {state}, not COMPLETED: the scale-in killed it"


@pytest.mark.timeout(300)
def test_a_config_change_rolls_the_controller_pod_and_slurmctld_reads_it(cluster: str, dev_env: dict[str, str]) -> None:
    before = get(dev_env, cluster, "pod", "slurm-controller-0")["metadata"]["uid"]
    extra = "SchedulerParameters=batch_sched_delay=0,sched_interval=1\nMaxJobCount=12345"
    kubectl(
        dev_env,
        "-n",
        cluster,
        "patch",
        "controller",
        "slurm",
        "--type=merge",
        "-p",
        json.dumps({"spec": {"extraConf": extra}}),
    )

    def applied() -> bool:
        out = on_login(dev_env, cluster, "scontrol", "show", "config", check=False)
        return any(line.split() == ["MaxJobCount", "=", "12345"] for line in out.splitlines())

    wait_for(applied, 180, "MaxJobCount=12345 in slurmctld's running config")
    pod = get(dev_env, cluster, "pod", "slurm-controller-0")
    assert pod["metadata"]["uid"] != before, "without inplaceReconfigure the new config comes with a new pod"


def running_config(dev_env: dict[str, str], cluster: str, key: str) -> str:
    out = on_login(dev_env, cluster, "scontrol", "show", "config", check=False)
    return next((line.split("=", 1)[1].strip() for line in out.splitlines() if line.split("=")[0].strip() == key), "")


@pytest.mark.timeout(300)
def test_an_in_place_reconfigure_keeps_the_controller_pod(cluster: str, dev_env: dict[str, str]) -> None:
    """inplaceReconfigure: the new files reach the running pod (its kubelet syncs it when the operator touches
    it) and `scontrol reconfigure` reads them; the pod and its jobs stay."""
    patch = {"spec": {"inplaceReconfigure": True}}
    kubectl(dev_env, "-n", cluster, "patch", "controller", "slurm", "--type=merge", "-p", json.dumps(patch))

    def settled() -> bool:  # dropping the config hash from the pod template rolls the pod once
        sts = get(dev_env, cluster, "statefulset", "slurm-controller")
        status = sts.get("status") or {}
        pod = get(dev_env, cluster, "pod", "slurm-controller-0")
        return (
            status.get("updateRevision") == status.get("currentRevision")
            and status.get("readyReplicas") == 1
            and bool(pod)
            and ready(pod)
        )

    wait_for(settled, 180, "the controller StatefulSet settled with inplaceReconfigure")
    before = get(dev_env, cluster, "pod", "slurm-controller-0")["metadata"]["uid"]
    job = on_login(dev_env, cluster, "sbatch", "--hold", "--parsable", "--wrap", "sleep 1").strip()
    extra = "SchedulerParameters=batch_sched_delay=0,sched_interval=1\nMaxJobCount=23456"
    conf = {"spec": {"extraConf": extra}}
    kubectl(dev_env, "-n", cluster, "patch", "controller", "slurm", "--type=merge", "-p", json.dumps(conf))
    wait_for(lambda: running_config(dev_env, cluster, "MaxJobCount") == "23456", 120, "MaxJobCount=23456 running")
    assert get(dev_env, cluster, "pod", "slurm-controller-0")["metadata"]["uid"] == before, "the pod was replaced"
    assert on_login(dev_env, cluster, "squeue", "-h", "-j", job, "-o", "%T").split() == ["PENDING"]
    on_login(dev_env, cluster, "scancel", job)


@pytest.mark.timeout(300)
def test_an_image_the_registry_lacks_is_named_on_the_nodeset(cluster: str, dev_env: dict[str, str]) -> None:
    image = "ghcr.io/slinkyproject/slurmd:no-such-tag"
    nodeset = {
        "apiVersion": "slinky.slurm.net/v1beta1",
        "kind": "NodeSet",
        "metadata": {"name": "ghost", "namespace": cluster},
        "spec": {"controllerRef": {"name": "slurm"}, "replicas": 1, "slurmd": {"image": image}},
    }
    kubectl(dev_env, "apply", "-f", "-", stdin=json.dumps(nodeset))
    try:

        def condition() -> dict[str, Any]:
            found = get(dev_env, cluster, "nodeset", "ghost").get("status", {}).get("conditions") or []
            return next((c for c in found if c["type"] == "PodsHealthy"), {})

        try:
            wait_for(lambda: condition().get("status") == "False", 120, "PodsHealthy False on NodeSet ghost")
        except AssertionError as err:
            status = get(dev_env, cluster, "nodeset", "ghost").get("status")
            logs = kubectl(dev_env, "-n", cluster, "logs", f"deploy/{RELEASE}", "--tail=30", check=False)
            raise AssertionError(f"{err}\nstatus: {status}\noperator log:\n{logs}") from None
        cond = condition()
        assert cond["reason"] == "ImagePullFailed"
        assert "pod ghost-0: container slurmd" in cond["message"] and image in cond["message"]
        described = kubectl(dev_env, "-n", cluster, "describe", "pod", "ghost-0")
        assert "ErrImagePull" in described or "ImagePullBackOff" in described
        events = kubectl(dev_env, "-n", cluster, "get", "events", "--field-selector", "involvedObject.name=ghost")
        assert "ImagePullFailed" in events
    finally:
        kubectl(dev_env, "-n", cluster, "delete", "nodeset", "ghost", check=False)
        deadline = time.monotonic() + 60
        while get(dev_env, cluster, "pod", "ghost-0") and time.monotonic() < deadline:
            time.sleep(1)
