"""Fixtures of the integration tests: clients of the real stack (module-scoped) and a fresh namespace per test."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.integration.cluster import Kube, Slurm, Temporal, is_live


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
    while kube.pods(name) and time.monotonic() < deadline:
        time.sleep(0.2)
    kube.strip_finalizers(name)  # the bridge failed to clean up: do not leave the namespace stuck
    for slurm_job in slurm.jobs_of(name):
        if is_live(slurm_job):
            slurm.cancel(slurm_job["job_id"])
    with contextlib.suppress(ApiException):
        kube.core.delete_namespace(name)
