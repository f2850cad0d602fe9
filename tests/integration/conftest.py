"""Fixtures of the integration tests: clients of the real stack (module-scoped) and a fresh namespace per test."""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.integration.cluster import Kube, Slurm, Temporal, is_live
from tests.integration.nodeset_jobs import HeldJob
from tests.integration.operator_fixtures import GROUP, VERSION, Operator, objects, start_operator, stop_operator

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def kube(dev_env: dict[str, str]) -> Iterator[Kube]:
    k = Kube(dev_env)
    with k.api:
        yield k


@pytest.fixture(scope="module")
def slurm(dev_env: dict[str, str]) -> Iterator[Slurm]:
    s = Slurm(dev_env)
    with s.http:
        yield s


@pytest.fixture(scope="module")
def temporal(dev_env: dict[str, str]) -> Iterator[Temporal]:
    t = Temporal(dev_env)
    yield t
    t.close()


@pytest.fixture
def ns(kube: Kube, slurm: Slurm) -> Iterator[str]:
    """A fresh namespace; afterwards every pod is gone (finalizers stripped if the bridge did not) and
    no Slurm job of it is left live, so the next test starts with free nodes."""
    name = f"bridge-{uuid.uuid4().hex[:8]}"
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    for k8s_job in kube.batch.list_namespaced_job(name).items:
        with contextlib.suppress(ApiException):
            kube.batch.delete_namespaced_job(k8s_job.metadata.name, name, propagation_policy="Background")
    for pod in kube.pods(name):
        kube.delete_pod(name, pod["metadata"]["name"])
    deadline = time.monotonic() + 20
    while not all(map(_stopped, kube.pods(name))) and time.monotonic() < deadline:
        time.sleep(0.2)
    kube.strip_finalizers(name)  # the bridge failed to clean up: do not leave the namespace stuck
    for slurm_job in slurm.jobs_of(name):
        if is_live(slurm_job):
            slurm.cancel(slurm_job["job_id"])
    with contextlib.suppress(ApiException):
        kube.core.delete_namespace(name)


def _stopped(pod: dict[str, Any]) -> bool:
    """A deleted pod that no finalizer holds (the bridge's cleanup is done) and none of whose containers runs
    (ended, or never started: a deleted pod's are not started). A real kubelet removes the object up to its 10 s
    status sync later; nothing runs meanwhile (a slurmd pod's preStop has removed its Slurm node)."""
    meta = pod["metadata"]
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    idle = not any("running" in s.get("state", {}) for s in statuses)
    return bool(meta.get("deletionTimestamp")) and not meta.get("finalizers") and idle


@pytest.fixture
def held_jobs() -> Iterator[list[HeldJob]]:
    """Real batch jobs a test holds (tests/integration/nodeset_jobs.py); released or cancelled afterwards."""
    held: list[HeldJob] = []
    yield held
    for job in held:
        job.cleanup()


# ------------------------------------------------------------------------------------------ the operator
REGISTRATION_GRACE_SECONDS = 8


@pytest.fixture(scope="module")
def operator(dev_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[bytes]]:
    # A shorter SlurmdRegistered grace than the default 30 s: the test of a slurmd that never joins waits for it.
    settings = {"SLINKY_OPERATOR__REGISTRATION_GRACE_SECONDS": str(REGISTRATION_GRACE_SECONDS)}
    proc = start_operator(dev_env, tmp_path_factory.mktemp("operator") / "operator.log", **settings)
    yield proc
    stop_operator(proc)


@pytest.fixture
def operator_process(dev_env: dict[str, str], tmp_path: Path) -> Iterator[Operator]:
    """An operator process of the test's own, which the test may `kill -9` and start again."""
    op = Operator(dev_env, tmp_path / "operator.log")
    yield op
    stop_operator(op.proc)


@pytest.fixture
def cluster(controller_ns: str, operator: Any) -> str:
    """`controller_ns` with the module's operator process running."""
    return controller_ns


@pytest.fixture
def controller_ns(kube: Kube, ns: str) -> Iterator[str]:
    """`ns`, its pods on the real nodes, with Controller `slurm` (external: the stack's slurmctld) and its key
    Secret. Afterwards its NodeSets are deleted first, so the garbage collector takes their pods and no operator
    makes them again."""
    from slinky.dev import real_nodes, stack

    annotations = real_nodes.namespace_annotations(stack.REAL_NODE_TAINT)
    kube.core.patch_namespace(ns, {"metadata": {"annotations": annotations}})
    secret, controller = stack.external_controller_objects(ns)
    kube.core.create_namespaced_secret(ns, secret)
    objects(kube).create_namespaced_custom_object(GROUP, VERSION, ns, "controllers", controller)
    yield ns
    for item in objects(kube).list_namespaced_custom_object(GROUP, VERSION, ns, "nodesets")["items"]:
        with contextlib.suppress(ApiException):
            objects(kube).delete_namespaced_custom_object(
                GROUP, VERSION, ns, "nodesets", item["metadata"]["name"], propagation_policy="Foreground"
            )
