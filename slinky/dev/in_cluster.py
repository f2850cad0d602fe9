"""The bridge installed in-cluster from its chart on the dev stack, in place of the stack's own bridge worker.

The stack runs its bridge worker and admission webhook as host processes (``bridge-worker``, ``webhook``). One
bridge per scheduler name: :func:`bridge_in_cluster` stops the worker and removes the webhook's registration,
``helm install``s deploy/charts/slinky-bridge into a namespace of its own annotated for the real nodes (its worker
and webhook run there as containers of the project's image from the stack's registry, reach the API server by
in-cluster config, Temporal and slurmrestd through the stack's Services), and on the way out uninstalls it and
starts the stack's worker and registration again, on an error too. The demo and
tests/integration/test_real_bridge.py use it. Needs the dev dependencies (helm-python-sdk).
"""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Final

from slinky.dev import images, real_nodes, stack
from slinky.dev import webhook as dev_webhook
from slinky.dev.procs import ProcessTable

CHART: Final = stack.REPO / "deploy" / "charts" / "slinky-bridge"
RELEASE: Final = "slinky-bridge"
SLURM_REST_URL: Final = "http://slurmrestd.slinky-dev:6820"
"""The stack's slurmrestd through its Service of the host (docs/dev-stack.md, "Services of the host")."""


def bridge_values(image: str) -> dict[str, Any]:
    """The chart's values on the dev stack: the working tree's image, the stack's slurmrestd, and the namespaces
    the stack's own webhook manages (labelled ``slinky.slurm.net/managed=true``). Temporal is the chart's default
    (``temporal-frontend.temporal.svc:7233``), which the stack serves."""
    repository, _, tag = image.rpartition(":")
    return {
        "image": {"repository": repository, "tag": tag},
        "slurm": {"restUrl": SLURM_REST_URL},
        "managedNamespaceSelector": {dev_webhook.LABEL_MANAGED: "true"},
    }


def _objects(namespace: str, jwt: str) -> list[dict[str, Any]]:
    """The release's namespace (sent to the real nodes) and the JWT Secret the chart mounts."""
    annotations = real_nodes.namespace_annotations(stack.REAL_NODE_TAINT)
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "annotations": annotations}},
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "slurm-bridge-token", "namespace": namespace},
            "data": {"auth-token": base64.b64encode(jwt.encode()).decode()},
        },
    ]


CLUSTER_SCOPED: Final = (
    "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
    "/apis/apiregistration.k8s.io/v1/apiservices",
)
"""What the project's charts make outside their namespace."""


def remove_orphans(kube: dev_webhook.KubeSync, release: str) -> list[str]:
    """Delete the cluster-scoped objects of a Helm release ``release`` whose namespace is gone: what a run stopped
    mid-way (a machine restarted under it) left behind, which would refuse the next install ("cannot be imported
    into the current release") or, for a webhook configuration, send pods to a webhook that no longer runs.
    Returns ``kind/name`` of each deleted."""
    gone: list[str] = []
    for collection in CLUSTER_SCOPED:
        for item in kube.request("GET", collection).json().get("items") or []:
            annotations = item["metadata"].get("annotations") or {}
            namespace = annotations.get("meta.helm.sh/release-namespace")
            if annotations.get("meta.helm.sh/release-name") != release or not namespace:
                continue
            if kube.request("GET", f"/api/v1/namespaces/{namespace}").status_code == 404:
                kube.request("DELETE", f"{collection}/{item['metadata']['name']}")
                gone.append(f"{collection.rsplit('/', 1)[1]}/{item['metadata']['name']}")
    return gone


def _ready_pods(kube: dev_webhook.KubeSync, namespace: str) -> list[str]:
    pods = kube.request("GET", f"/api/v1/namespaces/{namespace}/pods").json().get("items") or []
    return [
        p["metadata"]["name"]
        for p in pods
        if any(c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions") or [])
    ]


@contextlib.contextmanager
def bridge_in_cluster(log: Callable[[str], None], timeout: float = 180) -> Iterator[str]:
    """The bridge chart installed and Ready (worker and webhook pods), the stack's own bridge stopped; yields the
    release's namespace. Afterwards: uninstalled, namespace deleted, the stack's bridge worker and webhook
    registration back."""
    import helm_python as helm  # a dev dependency, as the dev stack is

    kubeconfig = stack.STATE / "kube" / "kubeconfig"
    namespace = f"slinky-bridge-{uuid.uuid4().hex[:4]}"
    image = images.ensure_project_image(stack.registry_address(), log)
    procs = ProcessTable(stack.STATE / "pids")
    chart = helm.Config(kubeconfig_path=str(kubeconfig), namespace=namespace)
    had_worker = False
    with dev_webhook.KubeSync(kubeconfig) as kube:
        try:
            jwt = (stack.STATE / "slurm" / "jwt").read_text().strip()
            for obj in _objects(namespace, jwt):
                collection = (
                    "/api/v1/namespaces" if obj["kind"] == "Namespace" else f"/api/v1/namespaces/{namespace}/secrets"
                )
                kube.request("POST", collection, json=obj)
            for orphan in remove_orphans(kube, RELEASE):
                log(f"removed {orphan}, left by a release whose namespace is gone")
            had_worker = procs.stop("bridge-worker")
            if had_worker:
                log("stopped the stack's bridge worker (one bridge per scheduler name)")
            dev_webhook.unregister(kubeconfig)
            log(f"$ helm install {RELEASE} deploy/charts/slinky-bridge -n {namespace} (image {image})")
            chart.install(str(CHART), RELEASE, bridge_values(image), timeout=60)
            deadline = time.monotonic() + timeout
            while len(_ready_pods(kube, namespace)) < 2:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the bridge chart's pods in {namespace} not Ready within {timeout:.0f} s")
                time.sleep(0.5)
            yield namespace
        finally:
            with contextlib.suppress(Exception):
                chart.uninstall(RELEASE, timeout=60)
            chart.close()
            kube.request("DELETE", f"/api/v1/namespaces/{namespace}")
            if had_worker:  # `dev up --no-workers` had none: none comes back
                stack.start_workers(procs)
            dev_webhook.up(procs, stack.STATE, kubeconfig)
            log("the stack's bridge worker and webhook are back" if had_worker else "the stack's webhook is back")


def workers_of(workflow_prefix: str) -> set[str]:
    """The identities (``<pid>@<hostname>``: a pod's name in-cluster) of the workers that ran the tasks of the one
    running workflow whose ID starts with ``workflow_prefix``, from its history (the ``temporal`` CLI)."""

    def temporal(*args: str) -> Any:
        argv = [str(stack.temporal_cli()), *args, "--address", f"127.0.0.1:{stack.PORTS.temporal}", "-o", "json"]
        return json.loads(subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout)

    query = f"WorkflowId STARTS_WITH '{workflow_prefix}' AND ExecutionStatus = 'Running'"
    (run,) = temporal("workflow", "list", "--query", query)
    history = temporal("workflow", "show", "-w", run["execution"]["workflowId"])
    return {
        attributes["identity"]
        for event in history["events"]
        for key, attributes in event.items()
        if key.endswith("Attributes") and isinstance(attributes, dict) and attributes.get("identity")
    }
