"""The dev stack is made of real parts: each test exercises one server through its real API."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kubernetes import client, config
from temporalio.client import Client
from temporalio.worker import Worker

from slinky import hostlist, wellknown
from slinky.dev import real_nodes
from slinky.dev.procs import ProcessTable
from tests.integration.cluster import Kube
from tests.integration.cluster import Slurm as SlurmApi
from tests.integration.devstack import REPO, slinky
from tests.integration.smoke_workflow import SmokeWorkflow, greet
from tests.integration.waiting import eventually

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def core(dev_env: dict[str, str]) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=dev_env["KUBECONFIG"]))


@pytest.fixture
def namespace(core: client.CoreV1Api) -> Iterator[str]:
    name = f"stack-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


def slurm(dev_env: dict[str, str], token: str | None = None) -> httpx.Client:
    jwt = token if token is not None else Path(dev_env["SLURM_JWT_FILE"]).read_text().strip()
    return httpx.Client(
        base_url=dev_env["SLURM_REST_URL"],
        timeout=30,
        headers={"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": jwt},
    )


def test_kubernetes_nodes_are_ready_and_match_slurm_external_nodes(
    dev_env: dict[str, str], core: client.CoreV1Api
) -> None:
    # The simulated worker nodes and the Slurm clusters' real nodes are not bridged into Slurm; every other
    # node is: the simulated ones in the bridge's partition, the bridge's real nodes in partition real-nodes.
    bridged = core.list_node(label_selector=f"sim.slinky.slurm.net/pool!=workers,{real_nodes.REAL_KEY}!=true").items
    nodes = {n.metadata.name: n for n in bridged}
    assert len(nodes) >= 1 and len(core.list_node().items) > len(nodes)
    for node in nodes.values():
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert ready and ready[0].status == "True", node.metadata.name
    with slurm(dev_env) as rest:
        answer = rest.get("/slurm/v0.0.44/nodes").raise_for_status().json()
    slurm_nodes = {n["name"]: n for n in answer["nodes"] if "EXTERNAL" in n["state"]}
    assert set(slurm_nodes) == set(nodes)
    for name, node in nodes.items():
        assert slurm_nodes[name]["cpus"] == int(node.status.capacity["cpu"])
        # MiB rounded up (docs/node-sync.md): a real node's memory is the machine's, in KiB.
        assert slurm_nodes[name]["real_memory"] == -(-_bytes(node.status.capacity["memory"]) // 1024**2)
        real = (node.metadata.labels or {}).get(real_nodes.REAL_KEY) == "bridge"
        partition = real_nodes.BRIDGE_PARTITION if real else wellknown.DEFAULT_PARTITION
        assert slurm_nodes[name]["partitions"] == [partition], name


def _bytes(quantity: str) -> int:
    units = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return int(quantity[: -len(suffix)]) * factor
    return int(quantity)


def test_job_controller_creates_pods_and_completes_the_job(
    dev_env: dict[str, str], core: client.CoreV1Api, namespace: str
) -> None:
    api = config.new_client_from_config(config_file=dev_env["KUBECONFIG"])
    batch = client.BatchV1Api(api)
    template = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(annotations={wellknown.ANNOTATION_SIM_RUN_SECONDS: "1"}),
        spec=client.V1PodSpec(
            restart_policy="Never",
            scheduler_name="no-scheduler",  # not the bridge's: this test binds by hand
            containers=[client.V1Container(name="main", image="busybox")],
            # slinky-node-1 is a bridged node, tainted NoExecute: the taint manager evicts a pod without this.
            tolerations=[client.V1Toleration(key=wellknown.TAINT_MANAGED_NODE, operator="Exists", effect="NoExecute")],
        ),
    )
    batch.create_namespaced_job(
        namespace,
        client.V1Job(
            metadata=client.V1ObjectMeta(name="two"),
            spec=client.V1JobSpec(parallelism=2, completions=2, template=template),
        ),
    )
    pods = eventually(
        lambda: (lambda items: items if len(items) == 2 else None)(core.list_namespaced_pod(namespace).items),
        timeout=30,
    )
    for pod in pods:
        owner = pod.metadata.owner_references[0]
        assert (owner.kind, owner.name) == ("Job", "two")
        assert pod.spec.scheduler_name == "no-scheduler"
        assert pod.spec.node_name is None  # nothing schedules them until we bind
        body = client.V1Binding(
            metadata=client.V1ObjectMeta(name=pod.metadata.name),
            target=client.V1ObjectReference(kind="Node", name="slinky-node-1"),
        )
        resp = core.create_namespaced_pod_binding(pod.metadata.name, namespace, body, _preload_content=False)
        resp.read()
        resp.release_conn()
    eventually(lambda: (batch.read_namespaced_job_status("two", namespace).status.succeeded or 0) == 2, timeout=60)


def test_rest_ping_needs_a_valid_jwt(dev_env: dict[str, str]) -> None:
    with slurm(dev_env) as rest:
        pings = rest.get("/slurm/v0.0.44/ping").raise_for_status().json()["pings"]
        assert pings[0]["responding"] is True
        assert rest.get("/slurm/v0.0.44/jobs").status_code == 200
    with slurm(dev_env, token="not-a-jwt") as rest:
        # slurmrestd 26.05 answers a malformed token with 511 (Network Authentication Required)
        assert rest.get("/slurm/v0.0.44/jobs").status_code in (401, 511)


def test_external_job_reaches_running_on_an_external_node(dev_env: dict[str, str]) -> None:
    desc = {
        "name": f"smoke-{uuid.uuid4().hex[:6]}",
        "partition": wellknown.DEFAULT_PARTITION,
        "flags": ["EXTERNAL_JOB"],
        "minimum_nodes": 1,
        "maximum_nodes": 1,
        "tasks_per_node": 1,
        "cpus_per_task": 1,
        "shared": ["none"],
        "current_working_directory": "/tmp",
        "admin_comment": '{"pods": ["smoke/pod"]}',
    }
    with slurm(dev_env) as rest:
        job_id = rest.post("/slurm/v0.0.44/job/submit", json={"job": desc}).raise_for_status().json()["job_id"]
        try:
            job = eventually(
                lambda: (lambda j: j if "RUNNING" in j["job_state"] else None)(
                    rest.get(f"/slurm/v0.0.44/job/{job_id}").json()["jobs"][0]
                ),
                timeout=20,
            )
            assert job["nodes"].startswith("slinky-node-")
            assert "EXTERNAL_JOB" in job["flags"]
            assert job["admin_comment"] == desc["admin_comment"]
        finally:
            rest.delete(f"/slurm/v0.0.44/job/{job_id}").raise_for_status()


async def test_temporal_workflow_with_an_activity_completes(dev_env: dict[str, str]) -> None:
    temporal = await Client.connect(dev_env["TEMPORAL_ADDRESS"], namespace=dev_env["TEMPORAL_NAMESPACE"])
    queue = f"smoke-{uuid.uuid4()}"
    async with Worker(temporal, task_queue=queue, workflows=[SmokeWorkflow], activities=[greet]):
        result = await temporal.execute_workflow(SmokeWorkflow.run, "slinky", id=queue, task_queue=queue)
    assert result == "hello slinky"


def test_dev_up_is_idempotent(dev_env: dict[str, str]) -> None:
    out = slinky("dev", "up")
    for component in ("etcd", "kube-apiserver", "kube-controller-manager", "Slurm", "Temporal"):
        assert f"{component} already running" in out
    slinky("dev", "status", timeout=60)  # exits 0 only when every component runs and answers


def test_real_slurmd_nodes_run_a_batch_job(dev_env: dict[str, str]) -> None:
    """`dev up --slurmd 2` adds two real slurmd daemons (own network namespaces); a batch job runs on both."""
    slinky("dev", "up", "--slurmd", "2")
    desc = {
        "name": "real-batch",
        "partition": "real",
        "nodes": "2",
        "current_working_directory": "/tmp",
        "environment": ["PATH=/usr/bin:/bin"],
    }
    script = "#!/bin/sh\nhostname\nsleep 1\n"
    with slurm(dev_env) as rest:
        job_id = rest.post("/slurm/v0.0.44/job/submit", json={"job": desc, "script": script}).raise_for_status()
        job_id = job_id.json()["job_id"]
        # COMPLETED may still carry the COMPLETING flag for a moment (the epilog): wait for the very end.
        job = eventually(
            lambda: (lambda j: j if j["job_state"] in (["COMPLETED"], ["FAILED"]) else None)(
                rest.get(f"/slurm/v0.0.44/job/{job_id}").json()["jobs"][0]
            ),
            timeout=60,
            interval=0.2,
        )
    assert job["job_state"] == ["COMPLETED"], job["job_state"]
    # Slurm names the nodes in its node table's order, which is the order they registered in: `dyn[2,1]` is as
    # right as `dyn[1-2]`.
    assert sorted(hostlist.expand(job["nodes"])) == ["dyn1", "dyn2"], job["nodes"]
    assert job["batch_flag"] is True


def test_a_gone_slurmd_node_is_forgotten_by_the_next_up(dev_env: dict[str, str]) -> None:
    """A dynamic node whose slurmd stopped stays in slurmctld's saved state; left there, slurmctld would keep
    pinging an address no namespace of ours holds. The next `dev up` deletes it; `--slurmd 2` brings it back."""

    def real_nodes(rest: httpx.Client) -> set[str]:
        nodes = rest.get("/slurm/v0.0.44/nodes").raise_for_status().json()["nodes"]
        return {n["name"] for n in nodes if "real" in n.get("partitions", [])}

    slinky("dev", "up", "--slurmd", "2")
    procs = ProcessTable(REPO / ".slinky-dev" / "pids")
    assert procs.stop("slurmd-2")
    try:
        assert "forgot 1 slurmd node(s) whose daemon is gone: dyn2" in slinky("dev", "up")
        with slurm(dev_env) as rest:
            assert real_nodes(rest) == {"dyn1"}
    finally:
        slinky("dev", "up", "--slurmd", "2")
    with slurm(dev_env) as rest:
        assert real_nodes(rest) == {"dyn1", "dyn2"}


def _pids(*names: str) -> dict[str, int | None]:
    procs = ProcessTable(REPO / ".slinky-dev" / "pids")
    return {name: procs.running(name) for name in names}


def test_up_restarts_exactly_what_crashed_and_keeps_slurms_saved_jobs(dev_env: dict[str, str]) -> None:
    """Issue 9: after kill -9 of a Slurm daemon, `dev up` extracted the rootfs again over the live chroot (a tar
    traceback), and a partial Slurm was stopped as a whole. Now each crashed daemon is started alone, the
    others keep their PIDs, slurmctld's saved jobs survive, `dev status` says CRASHED, and no traceback."""
    from slinky.dev import stack

    desc = {
        "name": f"saved-{uuid.uuid4().hex[:6]}",
        "partition": wellknown.DEFAULT_PARTITION,
        "flags": ["EXTERNAL_JOB"],
        "hold": True,
        "current_working_directory": "/tmp",
    }
    with slurm(dev_env) as rest:
        job_id = rest.post("/slurm/v0.0.44/job/submit", json={"job": desc}).raise_for_status().json()["job_id"]
    try:
        time.sleep(7)  # slurmctld saves job state every few seconds (slurm.md §9: kept from 6 s on)
        for crashed, kept in (("slurmctld", ("slurmrestd", "mariadb")), ("slurmrestd", ("slurmctld", "mariadb"))):
            before = _pids(*kept)
            assert stack.kill(crashed) is not None
            status = subprocess.run(
                [sys.executable, "-m", "slinky.cli", "dev", "status"], cwd=REPO, text=True, capture_output=True
            )
            assert status.returncode == 1 and f"{crashed}" in status.stdout
            line = next(line for line in status.stdout.splitlines() if line.startswith(crashed))
            assert "CRASHED (was pid" in line, status.stdout
            out = slinky("dev", "up")
            assert f"restarting what crashed: {crashed} (state kept)" in out, out
            assert "Traceback" not in out and "extracting" not in out, out
            assert _pids(*kept) == before, f"only {crashed} was started again"
            assert _pids(crashed)[crashed] is not None
        with slurm(dev_env) as rest:
            job = eventually(lambda: rest.get(f"/slurm/v0.0.44/job/{job_id}").json().get("jobs"), timeout=30)
        assert job[0]["name"] == desc["name"], "the job saved before the crash is still there"
    finally:
        with slurm(dev_env) as rest:
            rest.delete(f"/slurm/v0.0.44/job/{job_id}")


def test_status_tells_a_stopped_component_from_a_crashed_one(dev_env: dict[str, str]) -> None:
    from slinky.dev import stack

    stack.kill("webhook")
    out = subprocess.run(
        [sys.executable, "-m", "slinky.cli", "dev", "status"], cwd=REPO, text=True, capture_output=True
    )
    assert next(line for line in out.stdout.splitlines() if line.startswith("webhook")).split()[1] == "CRASHED"
    slinky("dev", "up")
    ProcessTable(REPO / ".slinky-dev" / "pids").stop("webhook")
    out = subprocess.run(
        [sys.executable, "-m", "slinky.cli", "dev", "status"], cwd=REPO, text=True, capture_output=True
    )
    assert next(line for line in out.stdout.splitlines() if line.startswith("webhook")).split()[1] == "stopped"
    slinky("dev", "up")
    slinky("dev", "status", timeout=60)


@pytest.fixture(scope="module")
def slurm_api(dev_env: dict[str, str]) -> Iterator[SlurmApi]:
    api = SlurmApi(dev_env)
    with api.http:
        yield api


def test_the_stacks_operator_serves_a_nodeset_of_its_controller(kube: Kube, slurm_api: SlurmApi) -> None:
    """`dev up` made Controller `slurm` in namespace `slurm` and runs an operator for it: a user's NodeSet
    naming it gets real slurmd pods at once, and deleting it leaves no Slurm node behind."""
    from slinky.dev import stack
    from tests.integration.nodeset_jobs import all_idle, slurm_node
    from tests.integration.operator_fixtures import GROUP, VERSION, apply_nodeset, objects

    name = f"dev{uuid.uuid4().hex[:5]}"
    ns = stack.OPERATOR_NAMESPACE
    controller = objects(kube).get_namespaced_custom_object(GROUP, VERSION, ns, "controllers", "slurm")
    assert controller["spec"]["external"] is True
    apply_nodeset(kube, ns, name, replicas=1)
    try:
        eventually(lambda: all_idle(slurm_api, [f"{name}-0"]), 60, "the stack's operator made a slurmd pod")
    finally:
        objects(kube).delete_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", name)
    eventually(lambda: kube.pod(ns, f"{name}-0") is None, 30, "the pod deleted with its NodeSet")
    eventually(lambda: slurm_node(slurm_api, f"{name}-0") is None, 20, "no ghost node")
