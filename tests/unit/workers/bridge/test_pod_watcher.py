"""The pod watcher: its pending-pod cache (translation reads it instead of the API server) and its warnings."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import httpx
import pytest

from activities.kube import KubeActivities
from slinky import wellknown
from slinky.bridge.models.jobspec import TranslateDefaults
from slinky.bridge.models.workload import BuildSpecInput, PodRef, PodsInput
from slinky.clients.kube import KubeClient, KubeConfig
from slinky.config import WorkerSettings
from tests.builders import StaticNodes, make_pod
from workers.bridge.pod_watcher import PodWatcher


class _Temporal:
    def __init__(self) -> None:
        self.started: list[str] = []

    async def start_workflow(self, *args: Any, **kwargs: Any) -> None:
        self.started.append(kwargs["id"])


def _kube(requests: list[str]) -> KubeClient:
    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(f"{request.method} {request.url.path}")
        return httpx.Response(404, json={"kind": "Status", "reason": "NotFound"})

    return KubeClient(KubeConfig(server="https://kube.test", ssl_context=False), transport=httpx.MockTransport(handler))


def _watcher(kube: KubeClient, temporal: Any = None, **kwargs: Any) -> PodWatcher:
    return PodWatcher(
        kube,
        temporal if temporal is not None else _Temporal(),  # type: ignore[arg-type]
        task_queue="q",
        scheduler_name="slurm-bridge-scheduler",
        defaults=TranslateDefaults(partition="slurm-bridge"),
        **kwargs,
    )


async def test_the_cache_holds_unbound_live_pods_only() -> None:
    requests: list[str] = []
    watcher = _watcher(_kube(requests))
    pod = make_pod("p", uid="u1", cpu="1")
    watcher.observe("ADDED", pod)
    assert watcher.pending_pod("u1") is pod
    changed = copy.deepcopy(pod)
    changed["metadata"]["annotations"] = {"slurmjob.slinky.slurm.net/account": "physics"}
    watcher.observe("MODIFIED", changed)
    assert watcher.pending_pod("u1") is changed, "the latest event wins (an annotation change re-translates)"
    bound = copy.deepcopy(changed)
    bound["spec"]["nodeName"] = "n1"
    watcher.observe("MODIFIED", bound)
    assert watcher.pending_pod("u1") is None, "bound: nothing left to translate"
    other = make_pod("q", uid="u2")
    watcher.observe("ADDED", other)
    watcher.observe("DELETED", other)
    assert watcher.pending_pod("u2") is None
    done = make_pod("r", uid="u3", phase="Succeeded")
    watcher.observe("ADDED", done)
    assert watcher.pending_pod("u3") is None


async def test_translation_reads_the_cache_and_falls_back_to_the_api_server() -> None:
    requests: list[str] = []
    kube = _kube(requests)
    watcher = _watcher(kube)
    pod = make_pod("p", uid="u1", cpu="2")
    watcher.observe("ADDED", pod)
    acts = KubeActivities(kube, StaticNodes(), pods=watcher)
    ref = PodRef(namespace=pod["metadata"]["namespace"], name="p", uid="u1")
    result = await acts.build_job_spec(BuildSpecInput(pods=[ref], defaults=TranslateDefaults(partition="x")))
    assert result.spec is not None and result.spec.cpus_per_task == 2
    assert requests == [], "no read: the watch delivered the pod"
    unknown = PodRef(namespace=ref.namespace, name="gone", uid="u9")
    result = await acts.build_job_spec(BuildSpecInput(pods=[unknown], defaults=TranslateDefaults(partition="x")))
    assert result.gone == ["u9"]
    assert requests == [f"GET /api/v1/namespaces/{ref.namespace}/pods/gone"], "not cached: read it"
    await kube.aclose()


async def test_the_recheck_reads_pending_pods_from_the_cache_and_others_from_the_api_server() -> None:
    """The safety re-check asks every lifecycle's pod states every few minutes: a pending pod comes from the watch;
    once it is deleting it leaves the cache, and the next re-check reads it."""
    requests: list[str] = []
    kube = _kube(requests)
    watcher = _watcher(kube)
    pod = make_pod("p", uid="u1")
    watcher.observe("ADDED", pod)
    acts = KubeActivities(kube, StaticNodes(), pods=watcher)
    ref = PodRef(namespace=pod["metadata"]["namespace"], name="p", uid="u1")
    states = await acts.get_pod_states(PodsInput(pods=[ref]))
    assert states.states["u1"].exists and not states.states["u1"].deleting
    assert requests == [], "pending: from the watch"
    deleting = copy.deepcopy(pod)
    deleting["metadata"]["deletionTimestamp"] = "2026-11-26T04:00:00Z"
    watcher.observe("MODIFIED", deleting)
    states = await acts.get_pod_states(PodsInput(pods=[ref]))
    assert requests == [f"GET /api/v1/namespaces/{ref.namespace}/pods/p"], "deleting: not cached, read"
    assert states.states["u1"].gone, "the API server's answer (404 here) decides"
    for task in list(watcher._tasks):
        task.cancel()
    await kube.aclose()


async def test_a_missing_gang_object_is_told_on_the_pod_through_the_recorder() -> None:
    posted: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/events"):
            posted.append(json.loads(request.content))
            return httpx.Response(201, json={})
        return httpx.Response(404, json={"kind": "Status", "reason": "NotFound"})  # no PodGroup "g"

    kube = KubeClient(KubeConfig(server="https://kube.test", ssl_context=False), transport=httpx.MockTransport(handler))
    watcher = _watcher(kube)
    watcher.observe("ADDED", make_pod("m", uid="u1", labels={wellknown.LABEL_POD_GROUP: "g"}))
    for _ in range(50):
        await asyncio.sleep(0.01)
        if posted:
            break
    for task in list(watcher._tasks):
        task.cancel()
    await watcher.events.aclose()
    await kube.aclose()
    assert [(e["reason"], e["type"], e["involvedObject"]["uid"]) for e in posted] == [
        ("GangObjectInvalid", "Warning", "u1")
    ]
    assert "not found; the pod waits until it exists" in posted[0]["message"]


class _Signals:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def get_workflow_handle(self, workflow_id: str) -> Any:
        sent = self.sent

        class _Handle:
            async def signal(self, name: str, event: Any) -> None:
                sent.append((workflow_id, event.kind))

        return _Handle()


async def test_a_gang_pod_after_a_restart_signals_the_lifecycle_written_on_it() -> None:
    """Seen first after a restart, with its gang object gone (or made again under the same name, a new UID):
    the deletion still reaches the lifecycle that bound it, found on the pod, not on the gang object."""
    requests: list[str] = []
    kube = _kube(requests)  # every read is 404: no PodGroup "g" any more
    temporal = _Signals()
    watcher = _watcher(kube, temporal)
    owner = "workload/ns/podgroup/g/old-uid"
    labels = {wellknown.LABEL_POD_GROUP: "g", wellknown.LABEL_SLURM_JOB_ID: "7"}
    pod = make_pod("m", uid="u1", node_name="n1", labels=labels)
    pod["metadata"]["annotations"] = {wellknown.ANNOTATION_WORKFLOW_ID: owner}
    watcher.observe("ADDED", pod)  # the relist after a restart
    deleting = copy.deepcopy(pod)
    deleting["metadata"]["deletionTimestamp"] = "2026-11-25T01:42:16Z"
    watcher.observe("MODIFIED", deleting)
    for _ in range(50):
        await asyncio.sleep(0.01)
        if temporal.sent:
            break
    await kube.aclose()
    assert [w for w, _ in temporal.sent] == [owner]
    assert not [r for r in requests if "podgroups" in r], "no need to read the gang object"


class _Starts:
    def __init__(self) -> None:
        self.kwargs: list[dict[str, Any]] = []
        self.inputs: list[Any] = []

    async def start_workflow(self, *args: Any, **kwargs: Any) -> None:
        self.kwargs.append(kwargs)
        self.inputs.append(args[1])


@pytest.mark.parametrize("eager", [True, False])
async def test_a_single_pod_starts_eagerly_only_when_asked(eager: bool) -> None:
    """One replica: eagerly on its own worker; several: through the task queue, so any replica may take it."""
    temporal = _Starts()
    watcher = _watcher(_kube([]), temporal, eager_start=eager)
    watcher.observe("ADDED", make_pod("p", uid="u1", cpu="1"))
    for _ in range(50):
        await asyncio.sleep(0.01)
        if temporal.kwargs:
            break
    assert [k["request_eager_start"] for k in temporal.kwargs] == [eager]


@pytest.mark.parametrize(
    ("setting", "election", "eager"), [(None, False, True), (None, True, False), (True, True, True)]
)
def test_eager_start_defaults_to_one_replica_without_election(
    setting: bool | None, election: bool, eager: bool
) -> None:
    assert WorkerSettings(eager_start=setting).eager_start_or_default(election) is eager


@pytest.mark.parametrize("group_exists", [True, False])
async def test_a_claimed_pending_gang_pod_after_a_restart_reads_its_gang_before_starting(
    group_exists: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A gang member labelled and annotated by its lifecycle, still unbound (its job pending), seen first after a
    restart: the start reads the gang object for its size (it used to raise KeyError in a task nobody awaited);
    without the object no lifecycle is started again, and the pod's events still reach the one that claimed it."""

    def handler(request: httpx.Request) -> httpx.Response:
        if group_exists and "podgroups/g" in request.url.path:
            return httpx.Response(200, json={"metadata": {"uid": "pg-uid", "name": "g"}, "spec": {"minMember": 3}})
        return httpx.Response(404, json={"kind": "Status", "reason": "NotFound"})

    kube = KubeClient(KubeConfig(server="https://kube.test", ssl_context=False), transport=httpx.MockTransport(handler))
    temporal = _Starts()
    watcher = _watcher(kube, temporal)
    owner = "workload/ns/podgroup/g/pg-uid"
    pod = make_pod("m", uid="u1", labels={wellknown.LABEL_POD_GROUP: "g", wellknown.LABEL_SLURM_JOB_ID: "7"})
    pod["metadata"]["annotations"] = {wellknown.ANNOTATION_WORKFLOW_ID: owner}
    watcher.observe("ADDED", pod)
    for _ in range(50):
        await asyncio.sleep(0.01)
        if not watcher._tasks:
            break
    await kube.aclose()
    if group_exists:
        assert [(k["id"], k["start_signal"]) for k in temporal.kwargs] == [(owner, "pod_event")]
        assert [i.min_member for i in temporal.inputs] == [3], "the gang's size, read from the PodGroup"
    else:
        assert temporal.kwargs == []
        assert "not restarting the lifecycle of slurm-bridge/m: PodGroup g not found" in caplog.text, "said, not raised"
