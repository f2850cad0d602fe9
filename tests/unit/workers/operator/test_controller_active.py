"""The Controller reconciler's `controller.slinky.slurm.net/active` label: which slurmctld pod is in control.

Pods come from the reconciler's cache; `/readyz` answers come from an httpx mock transport (slurmctld answers 204 in
control, 500 in standby, nothing when hung); the label patches go to a recording fake of the Kubernetes client.
"""

from __future__ import annotations

from typing import Any

import httpx

from slinky import wellknown
from slinky.config import OperatorSettings
from slinky.operator import cluster_objects as objects
from slinky.operator.api.controller import Controller
from workers.operator import cluster_pods
from workers.operator.controller import ACTIVE_SYNC_SECONDS, ControllerReconciler
from workers.operator.runtime import Caches, Watch

Obj = dict[str, Any]
NS = "hpc"
KEYS = {"slurmKeyRef": {"name": "k", "key": "slurm.key"}, "jwtKeyRef": {"name": "k", "key": "jwt.key"}}


class FakeKube:
    def __init__(self) -> None:
        self.patches: list[tuple[str, Obj]] = []

    async def patch(self, path: str, body: Obj) -> Obj:
        self.patches.append((path, body))
        return {}


class FakeRuntime:
    def __init__(self) -> None:
        self.caches = Caches()
        self.kube = FakeKube()
        self.requeued: list[float] = []

    def requeue_later(self, kind: str, key: tuple[str, str], seconds: float, *, replace: bool = False) -> None:
        self.requeued.append(seconds)


def controller(**spec: Any) -> Controller:
    body = {"metadata": {"name": "slurm", "namespace": NS, "uid": "u"}, "spec": {**KEYS, **spec}}
    return Controller.model_validate(body)


HA = {"ha": {"enabled": True, "backups": 1}, "persistence": {"existingClaim": "state"}}


def pod(ordinal: int, ip: str, *, active: bool = False) -> Obj:
    labels = {wellknown.LABEL_APP: objects.APP_SLURMCTLD, wellknown.LABEL_INSTANCE: "slurm"}
    if active:
        labels[wellknown.LABEL_CONTROLLER_ACTIVE] = "true"
    return {
        "metadata": {"name": f"slurm-controller-{ordinal}", "namespace": NS, "labels": labels},
        "status": {"podIP": ip},
    }


def reconciler(pods: list[Obj], answers: dict[str, int | None]) -> tuple[ControllerReconciler, FakeRuntime]:
    runtime = FakeRuntime()
    collection = Watch(cluster_pods.PODS, label_selector=f"{wellknown.LABEL_APP}={objects.APP_SLURMCTLD}").collection
    for p in pods:
        runtime.caches.of(collection)[(NS, p["metadata"]["name"])] = p

    def readyz(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/readyz" and request.url.port == 6817
        status = answers.get(request.url.host)
        if status is None:
            raise httpx.ReadTimeout("hung", request=request)
        return httpx.Response(status)

    rec = ControllerReconciler(runtime, OperatorSettings())  # type: ignore[arg-type]
    rec._probe = httpx.AsyncClient(transport=httpx.MockTransport(readyz))
    return rec, runtime


def labels_patched(runtime: FakeRuntime) -> dict[str, str | None]:
    return {
        path.rsplit("/", 1)[-1]: body["metadata"]["labels"][wellknown.LABEL_CONTROLLER_ACTIVE]
        for path, body in runtime.kube.patches
    }


async def test_the_backup_in_control_gets_the_label_and_the_hung_primary_loses_it() -> None:
    pods = [pod(0, "10.0.0.1", active=True), pod(1, "10.0.0.2")]
    rec, runtime = reconciler(pods, {"10.0.0.1": None, "10.0.0.2": 204})
    raw = {"metadata": {"name": "slurm", "namespace": NS}}
    assert await rec._sync_active(raw, controller(**HA)) == ("slurm-controller-1", True)
    assert labels_patched(runtime) == {"slurm-controller-0": None, "slurm-controller-1": "true"}
    assert runtime.requeued == [ACTIVE_SYNC_SECONDS]  # asked again, for the next takeover


async def test_a_standby_backup_never_takes_the_label_from_the_primary() -> None:
    pods = [pod(0, "10.0.0.1", active=True), pod(1, "10.0.0.2")]
    rec, runtime = reconciler(pods, {"10.0.0.1": 204, "10.0.0.2": 500})
    raw = {"metadata": {"name": "slurm", "namespace": NS}}
    assert await rec._sync_active(raw, controller(**HA)) == ("slurm-controller-0", True)
    assert runtime.kube.patches == []


async def test_no_answer_keeps_the_label_and_says_so() -> None:
    pods = [pod(0, "10.0.0.1"), pod(1, "10.0.0.2", active=True)]
    rec, runtime = reconciler(pods, {})
    raw = {"metadata": {"name": "slurm", "namespace": NS}}
    active, answered = await rec._sync_active(raw, controller(**HA))
    assert (active, answered, runtime.kube.patches) == ("slurm-controller-1", False, [])
    ready = rec._ready(raw, controller(**HA), active, answered)
    assert ready[1] == "False" and "no slurmctld answered /readyz" in ready[3]


async def test_one_slurmctld_is_labelled_without_asking() -> None:
    rec, runtime = reconciler([pod(0, "10.0.0.1")], {})
    raw = {"metadata": {"name": "slurm", "namespace": NS}}
    assert await rec._sync_active(raw, controller()) == ("slurm-controller-0", True)
    assert labels_patched(runtime) == {"slurm-controller-0": "true"} and runtime.requeued == []
