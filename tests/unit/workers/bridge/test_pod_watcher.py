"""The pod watcher: its pending-pod cache (translation reads it instead of the API server), its warnings, and
its starts and signals while Temporal rate-limits."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import httpx
import pytest
from temporalio.service import RPCError, RPCStatusCode

from activities.kube import KubeActivities
from slinky import telemetry, wellknown
from slinky.bridge.models.jobspec import TranslateDefaults
from slinky.bridge.models.workload import BuildSpecInput, PodEventKind, PodRef, PodsInput
from slinky.clients.kube import KubeClient, KubeConfig
from slinky.config import WorkerSettings
from tests.builders import StaticNodes, make_pod
from workers.bridge.pod_watcher import START_ATTEMPTS, PodWatcher
from workers.bridge.signals import ATTEMPTS as SIGNAL_ATTEMPTS
from workers.bridge.signals import MAX_DELAY, TRANSIENT_ATTEMPTS, signal_lifecycle


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
    assert states.recheck_seconds == watcher.recheck_seconds() == 300.0, "the next re-checks' interval comes along"
    watcher.seen.update({f"other-{i}": watcher.seen["u1"] for i in range(4_000)})
    assert (await acts.get_pod_states(PodsInput(pods=[ref]))).recheck_seconds == 800.2
    assert (await KubeActivities(kube, StaticNodes()).get_pod_states(PodsInput(pods=[ref]))).recheck_seconds is None
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


def _claimed_gang_pod(owner: str, node_name: str | None = None) -> dict[str, Any]:
    """A member of PodGroup ``g`` that the lifecycle ``owner`` labelled (job 7) and annotated."""
    labels = {wellknown.LABEL_POD_GROUP: "g", wellknown.LABEL_SLURM_JOB_ID: "7"}
    pod = make_pod("m", uid="u1", labels=labels, node_name=node_name)
    pod["metadata"]["annotations"] = {wellknown.ANNOTATION_WORKFLOW_ID: owner}
    return pod


async def test_a_gang_pod_after_a_restart_signals_the_lifecycle_written_on_it() -> None:
    """Seen first after a restart, with its gang object gone (or made again under the same name, a new UID):
    the deletion still reaches the lifecycle that bound it, found on the pod, not on the gang object."""
    requests: list[str] = []
    kube = _kube(requests)  # every read is 404: no PodGroup "g" any more
    temporal = _Signals()
    watcher = _watcher(kube, temporal)
    owner = "workload/ns/podgroup/g/old-uid"
    pod = _claimed_gang_pod(owner, node_name="n1")
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
    pod = _claimed_gang_pod(owner)
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


class _RateLimited:
    """Temporal's frontend over its rate limit for the first ``fail`` starts (after the SDK's own retries)."""

    def __init__(self, fail: int, status: RPCStatusCode = RPCStatusCode.RESOURCE_EXHAUSTED) -> None:
        self.fail, self.status, self.calls = fail, status, 0
        self.started: list[str] = []

    async def start_workflow(self, *args: Any, **kwargs: Any) -> None:
        self.calls += 1
        if self.calls <= self.fail:
            raise RPCError("namespace rate limit exceeded", self.status, b"")
        self.started.append(kwargs["id"])


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The backoffs asked for (each slept 0 s; asyncio.sleep is one function, so the test's own yields are not
    counted)."""
    asked: list[float] = []
    real = asyncio.sleep

    async def sleep(delay: float, *args: Any) -> None:
        if delay:
            asked.append(delay)
        await real(0)

    monkeypatch.setattr("workers.bridge.pod_watcher.asyncio.sleep", sleep)
    return asked


async def _settle(watcher: PodWatcher, step: float = 0.0, tries: int = 200) -> None:
    """Until the watcher's starts and signals ended: ``tries`` yields ``step`` seconds apart (0: the patched sleeps
    of the backoff tests; real time for the signals' send interval)."""
    for _ in range(tries):
        if not watcher._tasks:
            return
        await asyncio.sleep(step)
    raise AssertionError("starts and signals still under way")


def _retries(call: str, status: str) -> float:
    return (
        telemetry.REGISTRY.get_sample_value(
            "slinky_bridge_temporal_call_retries_total", {"call": call, "status": status}
        )
        or 0.0
    )


async def test_a_rate_limited_start_backs_off_until_the_lifecycle_starts(sleeps: list[float]) -> None:
    """More failures than the old five tries: a pending pod keeps asking, at least 1 s apart, and is counted."""
    temporal = _RateLimited(fail=8)
    before = _retries("start", "RESOURCE_EXHAUSTED")
    watcher = _watcher(_kube([]), temporal)
    watcher.observe("ADDED", make_pod("p", uid="u1", cpu="1"))
    await _settle(watcher)
    assert len(temporal.started) == 1 and temporal.calls == 9
    assert len(sleeps) == 8 and min(sleeps) >= 0.75 and max(sleeps) <= MAX_DELAY * 1.25
    assert sleeps[-1] > sleeps[0], "exponential"
    assert _retries("start", "RESOURCE_EXHAUSTED") - before == 8


async def test_a_start_stops_trying_once_the_pod_is_no_longer_pending(sleeps: list[float]) -> None:
    temporal = _RateLimited(fail=1000)
    watcher = _watcher(_kube([]), temporal)
    pod = make_pod("p", uid="u1", cpu="1")
    watcher.observe("ADDED", pod)
    for _ in range(5):
        await asyncio.sleep(0)
    deleted = copy.deepcopy(pod)
    deleted["metadata"]["deletionTimestamp"] = "2026-11-26T00:00:00Z"
    watcher.observe("MODIFIED", deleted)
    await _settle(watcher)
    assert temporal.started == [] and temporal.calls < 10


async def test_a_start_refused_for_good_is_tried_again_on_the_pods_next_change(sleeps: list[float]) -> None:
    temporal = _RateLimited(fail=START_ATTEMPTS, status=RPCStatusCode.INVALID_ARGUMENT)
    watcher = _watcher(_kube([]), temporal)
    pod = make_pod("p", uid="u1", cpu="1")
    watcher.observe("ADDED", pod)
    await _settle(watcher)
    assert temporal.calls == START_ATTEMPTS and temporal.started == []
    changed = copy.deepcopy(pod)
    changed["metadata"]["resourceVersion"] = "2"
    watcher.observe("MODIFIED", changed)
    await _settle(watcher)
    assert len(temporal.started) == 1


class _Handle:
    def __init__(self, outer: _SignalFailures) -> None:
        self.outer = outer

    async def signal(self, name: str, arg: Any) -> None:
        self.outer.calls += 1
        if self.outer.calls <= self.outer.fail:
            raise RPCError("no", self.outer.status, b"")


class _SignalFailures:
    def __init__(self, fail: int, status: RPCStatusCode) -> None:
        self.fail, self.status, self.calls = fail, status, 0

    def get_workflow_handle(self, workflow_id: str) -> _Handle:
        return _Handle(self)


@pytest.mark.parametrize(
    ("status", "fail", "delivered", "calls"),
    [
        (RPCStatusCode.RESOURCE_EXHAUSTED, 7, True, 8),  # more than the five tries of a lasting failure
        (RPCStatusCode.RESOURCE_EXHAUSTED, 100, False, TRANSIENT_ATTEMPTS),
        (RPCStatusCode.INVALID_ARGUMENT, 100, False, SIGNAL_ATTEMPTS),
        (RPCStatusCode.NOT_FOUND, 100, False, 1),  # the lifecycle ended: nothing to tell
    ],
)
async def test_a_signal_backs_off_longer_while_temporal_rate_limits(
    monkeypatch: pytest.MonkeyPatch, status: RPCStatusCode, fail: int, delivered: bool, calls: int
) -> None:
    asked: list[float] = []

    async def sleep(delay: float, *args: Any) -> None:
        asked.append(delay)

    monkeypatch.setattr("workers.bridge.signals.asyncio.sleep", sleep)
    temporal = _SignalFailures(fail, status)
    ok = await signal_lifecycle(temporal, "wf", "pod_event", {}, asyncio.Semaphore(1))  # type: ignore[arg-type]
    assert ok is delivered and temporal.calls == calls
    if status == RPCStatusCode.RESOURCE_EXHAUSTED:
        assert min(asked) >= 0.75


async def test_the_safety_recheck_interval_grows_with_the_pods_followed() -> None:
    """Up to 1,500 pods every lifecycle re-checks every 300 s; at 10,000 every 2,000 s (5 a second in all, instead
    of 33), the early ones too: each re-check is given the interval of the moment (``get_pod_states``)."""
    temporal = _Starts()
    watcher = _watcher(_kube([]), temporal)
    watcher.observe("ADDED", make_pod("first", uid="u-first", cpu="1"))
    await _settle(watcher)
    for i in range(9_999):
        watcher.seen[f"other-{i}"] = watcher.seen["u-first"]
    watcher.observe("ADDED", make_pod("late", uid="u-late", cpu="1"))
    await _settle(watcher)
    by_pod = {i.pod.name: i.safety_recheck_seconds for i in temporal.inputs}
    assert by_pod == {"first": 300.0, "late": 2000.2}
    assert watcher.recheck_seconds() == 2000.2
    budget = _watcher(_kube([]), _Starts(), rechecks_per_second=20.0)
    budget.seen.update(watcher.seen)
    assert budget.recheck_seconds() == 500.05


class _Recorder:
    """Starts (signal-with-start included) and signals, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    async def start_workflow(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("start", kwargs.get("start_signal", ""), kwargs.get("start_signal_args")))
        await asyncio.sleep(0.01)  # an RPC: what arrives meanwhile waits for the next send

    def get_workflow_handle(self, workflow_id: str) -> Any:
        calls = self.calls

        class _Handle:
            async def signal(self, name: str, arg: Any) -> None:
                calls.append(("signal", name, arg))
                await asyncio.sleep(0.01)

        return _Handle()


def _gang_kube() -> KubeClient:
    def handler(request: httpx.Request) -> httpx.Response:
        if "podgroups/g" in request.url.path:
            return httpx.Response(200, json={"metadata": {"uid": "pg", "name": "g"}, "spec": {"minMember": 300}})
        return httpx.Response(404, json={"kind": "Status", "reason": "NotFound"})

    return KubeClient(KubeConfig(server="https://kube.test", ssl_context=False), transport=httpx.MockTransport(handler))


@pytest.mark.parametrize("batch", [True, False])
async def test_a_gang_created_and_deleted_at_once_is_a_few_signals_not_one_per_pod(batch: bool) -> None:
    """300 members in one relist join with one signal-with-start carrying them all (``pod_events``); their
    deletion is one ``pod_events`` signal too. With batching off (a rollout with older replicas) each pod is its
    own ``pod_event``, as before."""
    kube = _gang_kube()
    temporal = _Recorder()
    watcher = _watcher(kube, temporal, batch_pod_events=batch)
    members = [make_pod(f"m{i}", uid=f"u{i}", labels={wellknown.LABEL_POD_GROUP: "g"}) for i in range(300)]
    watcher.observe("ADDED", members[0])  # reads the PodGroup, then observes the pod again
    for _ in range(100):
        await asyncio.sleep(0.01)
        if temporal.calls:
            break
    for pod in members[1:]:
        watcher.observe("ADDED", pod)
    await _settle(watcher, 0.01, 500)
    for i, pod in enumerate(members):  # the lifecycle bound and labelled them; now they are deleted together
        labelled = copy.deepcopy(pod)
        labelled["metadata"]["labels"][wellknown.LABEL_SLURM_JOB_ID] = "7"
        labelled["spec"]["nodeName"] = f"n{i}"
        watcher.observe("MODIFIED", labelled)
        labelled["metadata"]["deletionTimestamp"] = "2026-11-26T00:00:00Z"
        watcher.observe("MODIFIED", labelled)
    await _settle(watcher, 0.01, 500)
    await kube.aclose()
    starts = [c for c in temporal.calls if c[0] == "start"]
    signals = [c for c in temporal.calls if c[0] == "signal"]
    joined = [e.uid for _, name, args in starts for e in (args[0] if name == "pod_events" else args)]
    deleting = [e for _, name, arg in signals for e in (arg if name == "pod_events" else [arg])]
    assert sorted(joined) == sorted(p["metadata"]["uid"] for p in members), "every member joined once"
    assert len(deleting) == 300 and {e.kind for e in deleting} == {PodEventKind.DELETING}
    if batch:
        assert len(starts) <= 3 and {name for _, name, _ in starts[1:]} <= {"pod_events"}
        assert len(signals) <= 2 and signals[-1][1] == "pod_events"
    else:
        assert len(starts) == 300 and {name for _, name, _ in starts} == {"pod_event"}
        assert len(signals) == 300 and {name for _, name, _ in signals} == {"pod_event"}


async def test_a_gang_join_tried_again_leaves_out_a_member_deleted_meanwhile(sleeps: list[float]) -> None:
    """Two members join in one signal-with-start; Temporal refuses it once, and the first member is deleted
    meanwhile: the next try starts the lifecycle from the member still pending, with only that member's ADDED."""
    from workers.bridge.pod_watcher import GroupInfo

    labels = {wellknown.LABEL_POD_GROUP: "g"}
    first, second = (make_pod(f"m{i}", uid=f"u{i}", labels=labels) for i in range(2))
    calls: list[tuple[Any, dict[str, Any]]] = []

    class _RefusedOnce:
        async def start_workflow(self, *args: Any, **kwargs: Any) -> None:
            calls.append((args[1], kwargs))
            if len(calls) == 1:
                deleted = copy.deepcopy(first)
                deleted["metadata"]["deletionTimestamp"] = "2026-11-26T00:00:00Z"
                watcher.observe("MODIFIED", deleted)
                raise RPCError("namespace rate limit exceeded", RPCStatusCode.RESOURCE_EXHAUSTED, b"")

    watcher = _watcher(_kube([]), _RefusedOnce())
    watcher.groups[("PodGroup", first["metadata"]["namespace"], "g")] = GroupInfo("pg", 2, float("inf"))
    watcher.observe("ADDED", first)
    watcher.observe("ADDED", second)
    await _settle(watcher, 0.01, 200)
    (inp, kwargs), (retried, again) = calls
    assert [e.uid for e in kwargs["start_signal_args"][0]] == ["u0", "u1"] and inp.pod.uid == "u0"
    assert retried.pod.uid == "u1"
    assert (again["start_signal"], [e.uid for e in again["start_signal_args"]]) == ("pod_event", ["u1"])


def _flaky_gang_kube(reads: list[str], fail: int, exists: bool = True) -> KubeClient:
    """The PodGroup ``g`` (minMember 2) behind an API server that drops the first ``fail`` connections (it is
    restarting); ``exists=False``: it answers 404 after that."""

    def handler(request: httpx.Request) -> httpx.Response:
        if "podgroups/g" in request.url.path:
            reads.append(request.url.path)
            if len(reads) <= fail:
                raise httpx.ConnectError("connection refused", request=request)
            if exists:
                return httpx.Response(200, json={"metadata": {"uid": "pg", "name": "g"}, "spec": {"minMember": 2}})
        if request.method == "POST" and request.url.path.endswith("/events"):
            return httpx.Response(201, json={})
        return httpx.Response(404, json={"kind": "Status", "reason": "NotFound"})

    return KubeClient(KubeConfig(server="https://kube.test", ssl_context=False), transport=httpx.MockTransport(handler))


async def test_a_new_gang_whose_object_cannot_be_read_for_a_while_still_gets_its_lifecycle(
    sleeps: list[float],
) -> None:
    """The chaos run's 12 pending gang pods: the API server restarted as a gang's pods arrived, the read of the
    PodGroup failed, and the pods were dropped until a relist minutes later. The read is tried again, soon and
    then less often, with one reader for the gang however many members wait."""
    reads: list[str] = []
    kube = _flaky_gang_kube(reads, fail=6)
    temporal = _Recorder()
    watcher = _watcher(kube, temporal)
    members = [make_pod(f"m{i}", uid=f"u{i}", labels={wellknown.LABEL_POD_GROUP: "g"}) for i in range(2)]
    for pod in members:
        watcher.observe("ADDED", pod)
    await _settle(watcher)
    await kube.aclose()
    starts = [c for c in temporal.calls if c[0] == "start"]
    joined = sorted(e.uid for _, name, args in starts for e in (args[0] if name == "pod_events" else args))
    assert joined == ["u0", "u1"], "both members joined the gang's lifecycle"
    assert len(reads) == 7, "one reader for the gang: six failed reads, then the one that answered"
    assert sleeps[:6] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0], "soon at first, then at most every 10 s"
    assert watcher._awaiting == {}


async def test_a_claimed_gang_pod_after_a_restart_reads_its_gang_again_after_a_passing_failure(
    sleeps: list[float],
) -> None:
    reads: list[str] = []
    kube = _flaky_gang_kube(reads, fail=2)
    temporal = _Starts()
    watcher = _watcher(kube, temporal)
    owner = "workload/slurm-bridge/podgroup/g/pg"
    pod = _claimed_gang_pod(owner)
    watcher.observe("ADDED", pod)
    await _settle(watcher)
    await kube.aclose()
    assert [k["id"] for k in temporal.kwargs] == [owner] and len(reads) == 3


async def test_a_gang_pod_deleted_while_its_gang_object_is_missing_is_no_longer_waited_for(
    sleeps: list[float],
) -> None:
    """A missing PodGroup is read every 10 s and told once on each waiting pod; once its pods are gone, the
    reads stop (they used to go on for as long as the process ran)."""
    reads: list[str] = []
    kube = _flaky_gang_kube(reads, fail=0, exists=False)
    watcher = _watcher(kube, _Recorder())
    pod = make_pod("m", uid="u1", labels={wellknown.LABEL_POD_GROUP: "g"})
    watcher.observe("ADDED", pod)
    while len(reads) < 3:
        await asyncio.sleep(0)
    watcher.observe("DELETED", pod)
    await _settle(watcher)
    await watcher.events.aclose()
    await kube.aclose()
    assert 3 <= len(reads) <= 4 and set(sleeps) == {10.0}
    assert watcher._awaiting == {}
