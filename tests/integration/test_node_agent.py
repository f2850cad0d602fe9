"""The development node agent plays the kubelet against the real kube-apiserver.

Needs the stack (the ``dev_env`` session fixture), whose agent owns ``slinky-node-1..4``. Pods are bound by
hand through ``pods/binding``, as our scheduler will do, so nothing but the agent moves them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from slinky import wellknown
from tests.integration.waiting import eventually

pytestmark = pytest.mark.integration

NODES = [f"slinky-node-{i}" for i in range(1, 5)]


@pytest.fixture(scope="module")
def core(dev_env: dict[str, str]) -> Iterator[client.CoreV1Api]:
    api_client = config.new_client_from_config(config_file=dev_env["KUBECONFIG"])
    with api_client:
        yield client.CoreV1Api(api_client)


@pytest.fixture
def namespace(core: client.CoreV1Api) -> Iterator[str]:
    name = f"test-agent-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


NOBODYS_SCHEDULER = "no-scheduler"
"""Not the bridge's: the bridge worker runs in the stack and would schedule (and clean up) these pods."""
TEST_FINALIZER = "test.slinky.slurm.net/hold"


def make_bound_pod(core: client.CoreV1Api, namespace: str, node: str, annotations: dict[str, str] | None = None) -> str:
    """Create a pod for a scheduler nobody runs, then bind it through the binding subresource."""
    name = f"p-{uuid.uuid4().hex[:8]}"
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, annotations=annotations or {}),
        spec=client.V1PodSpec(
            scheduler_name=NOBODYS_SCHEDULER,
            containers=[client.V1Container(name="main", image="busybox")],
            # The bridged nodes are tainted NoExecute: Kubernetes' taint manager evicts a pod bound without this.
            tolerations=[client.V1Toleration(key=wellknown.TAINT_MANAGED_NODE, operator="Exists", effect="NoExecute")],
        ),
    )
    core.create_namespaced_pod(namespace, pod)
    binding = client.V1Binding(
        metadata=client.V1ObjectMeta(name=name),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
    )
    # The client fails to deserialize the Status the server answers with: read and release it ourselves.
    resp = core.create_namespaced_pod_binding(name, namespace, binding, _preload_content=False)
    resp.read()
    resp.release_conn()
    return name


def phase(core: client.CoreV1Api, namespace: str, name: str) -> str:
    return str(core.read_namespaced_pod_status(name, namespace).status.phase)


def test_nodes_are_ready_with_fresh_leases(dev_env: dict[str, str], core: client.CoreV1Api) -> None:
    nodes = {n.metadata.name: n for n in core.list_node(label_selector=f"{wellknown.LABEL_SIM_AGENT}=true").items}
    assert set(NODES) <= set(nodes)
    for name in NODES:
        ready = next(c for c in nodes[name].status.conditions if c.type == "Ready")
        assert ready.status == "True"
        assert int(nodes[name].status.allocatable["pods"]) > 0
    coordination = client.CoordinationV1Api(core.api_client)
    lease = coordination.read_namespaced_lease(NODES[0], "kube-node-lease")
    assert lease.spec.holder_identity == NODES[0]
    age = time.time() - lease.spec.renew_time.timestamp()
    assert age < 60, f"lease renewed {age:.0f}s ago"


def test_bound_pod_runs_then_succeeds(core: client.CoreV1Api, namespace: str) -> None:
    name = make_bound_pod(core, namespace, NODES[0], {wellknown.ANNOTATION_SIM_RUN_SECONDS: "1"})

    eventually(lambda: phase(core, namespace, name) in ("Running", "Succeeded"))
    eventually(lambda: phase(core, namespace, name) == "Succeeded")
    status = core.read_namespaced_pod_status(name, namespace).status
    terminated = status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (0, "Completed")
    assert status.pod_ip.startswith("10.244.")
    assert status.start_time is not None


def test_non_zero_exit_code_fails_the_pod(core: client.CoreV1Api, namespace: str) -> None:
    name = make_bound_pod(
        core,
        namespace,
        NODES[1],
        {wellknown.ANNOTATION_SIM_RUN_SECONDS: "1", wellknown.ANNOTATION_SIM_EXIT_CODE: "3"},
    )

    eventually(lambda: phase(core, namespace, name) == "Failed")
    terminated = core.read_namespaced_pod_status(name, namespace).status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")


def test_pod_without_run_seconds_runs_until_deleted(core: client.CoreV1Api, namespace: str) -> None:
    name = make_bound_pod(core, namespace, NODES[2])
    eventually(lambda: phase(core, namespace, name) == "Running")
    ready = {c.type: c.status for c in core.read_namespaced_pod_status(name, namespace).status.conditions}
    assert ready["Ready"] == "True"

    core.delete_namespaced_pod(name, namespace)  # default grace period: 30 s, which the agent cuts short

    def gone() -> bool:
        try:
            core.read_namespaced_pod(name, namespace)
        except ApiException as exc:
            return exc.status == 404
        return False

    eventually(gone, timeout=10.0)


def test_finalizer_holds_a_deleted_pod(core: client.CoreV1Api, namespace: str) -> None:
    """The agent releases the pod but never strips finalizers: whoever owns one decides."""
    name = make_bound_pod(core, namespace, NODES[3])
    finalizer = {"metadata": {"finalizers": [TEST_FINALIZER]}}
    core.patch_namespaced_pod(name, namespace, finalizer)
    eventually(lambda: phase(core, namespace, name) == "Running")

    core.delete_namespaced_pod(name, namespace)
    pod = eventually(
        lambda: (p := core.read_namespaced_pod(name, namespace)).metadata.deletion_grace_period_seconds == 0 and p
    )
    assert pod.metadata.finalizers == [TEST_FINALIZER]
    assert pod.status.container_statuses[0].state.terminated is not None

    core.patch_namespaced_pod(name, namespace, {"metadata": {"finalizers": None}})
