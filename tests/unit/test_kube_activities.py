"""The Kubernetes activities that run a sequence of verbs in one call (place_pods, release_pods): each API write in
order, the Events only on members the writes reached, and nothing more (issue 16: fewer activities per pod)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from activities.kube import KubeActivities
from slinky import wellknown
from slinky.bridge.admission import managed_node_toleration
from slinky.bridge.models.workload import EventInput, PlacePodsInput, PodBinding, PodRef, ReleasePodsInput
from slinky.clients.kube import KubeClient, KubeConfig
from tests.builders import StaticNodes

A = PodRef(namespace="ns", name="a", uid="uid-a")
B = PodRef(namespace="ns", name="b", uid="uid-b")


def pending(ref: PodRef, *, tolerated: bool = True) -> dict[str, Any]:
    """A pending pod as the pod watcher holds it: the admission webhook gave it the managed-node toleration."""
    tolerations = [managed_node_toleration(wellknown.SCHEDULER_NAME)] if tolerated else []
    return {
        "metadata": {"namespace": ref.namespace, "name": ref.name, "uid": ref.uid},
        "spec": {"schedulerName": wellknown.SCHEDULER_NAME, "tolerations": tolerations},
    }


class Pending:
    """The pod watcher's cache of pending pods (``activities.kube.PodCache``)."""

    def __init__(self, *pods: dict[str, Any]) -> None:
        self.pods = {p["metadata"]["uid"]: p for p in pods}

    def pending_pod(self, uid: str) -> dict[str, Any] | None:
        return self.pods.get(uid)

    def recheck_seconds(self) -> float:
        return 300.0


class Recorder:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def record(self, event: dict[str, Any]) -> None:
        self.events.append(event)


def activities(
    missing: dict[str, set[str]] | None = None, cache: Pending | None = None, served: dict[str, Any] | None = None
) -> tuple[KubeActivities, list[str], Recorder]:
    """Activities on a fake API server; ``missing`` names pods a verb finds gone: {"bind"|"label": {name}}. The pod
    watcher holds ``cache`` (default: A and B, tolerated); ``served``: the pods a GET returns, by name."""
    gone = missing or {}
    requests: list[str] = []
    bodies: dict[str, Any] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        name = path.split("/pods/")[1].split("/")[0]
        verb = "bind" if path.endswith("/binding") else "label" if request.method == "PATCH" else "get"
        if request.method == "PATCH" and request.headers["content-type"] == "application/json-patch+json":
            body = json.loads(request.content)
            verb = "tolerate" if any(op["path"].startswith("/spec/tolerations") for op in body) else "unfinalize"
            bodies[f"{verb} {name}"] = body
        requests.append(f"{verb} {name}")
        if verb == "get":
            found = (served or {}).get(name)
            return httpx.Response(200, json=found) if found else httpx.Response(404, json={"kind": "Status"})
        if name in gone.get(verb, set()):
            return httpx.Response(404, json={"kind": "Status", "reason": "NotFound", "code": 404})
        return httpx.Response(201 if verb == "bind" else 200, json=json.loads(request.content or b"{}"))

    kube = KubeClient(KubeConfig(server="https://kube.test", ssl_context=False), transport=httpx.MockTransport(handler))
    recorder = Recorder()
    pods = cache if cache is not None else Pending(pending(A), pending(B))
    acts = KubeActivities(kube, StaticNodes("k8s-node"), events=recorder, pods=pods)  # type: ignore[arg-type]
    acts.bodies = bodies  # type: ignore[attr-defined]
    return acts, requests, recorder


def reasons(recorder: Recorder) -> list[tuple[str, str]]:
    return [(e["reason"], e["involvedObject"]["name"]) for e in recorder.events]


def place(label: bool) -> PlacePodsInput:
    submitted = EventInput(pods=[], reason="SlurmJobSubmitted", message="Submitted Slurm job 7 (allocated at once)")
    return PlacePodsInput(
        bindings=[PodBinding(pod=A, slurm_node="s1"), PodBinding(pod=B, slurm_node="s2")],
        job_id=7,
        workflow_id="wf",
        label=label,
        submitted=submitted if label else None,
        scheduled_reason="Scheduled",
    )


async def test_an_allocation_at_submit_is_bound_then_labelled_then_told() -> None:
    acts, requests, recorder = activities()
    result = await acts.place_pods(place(label=True))
    assert result.nodes == {"uid-a": "k8s-node", "uid-b": "k8s-node"} and result.gone == []
    assert sorted(requests[:2]) == ["bind a", "bind b"] and sorted(requests[2:]) == ["label a", "label b"]
    assert sorted(reasons(recorder)) == [
        ("Scheduled", "a"), ("Scheduled", "b"), ("SlurmJobSubmitted", "a"), ("SlurmJobSubmitted", "b"),
    ]  # fmt: skip
    scheduled = next(e for e in recorder.events if e["reason"] == "Scheduled")
    assert scheduled["message"] == "Successfully assigned ns/a to k8s-node (Slurm job 7)"


async def test_a_queued_job_is_only_bound_and_told() -> None:
    acts, requests, recorder = activities()
    await acts.place_pods(place(label=False))
    assert sorted(requests) == ["bind a", "bind b"]
    assert sorted(reasons(recorder)) == [("Scheduled", "a"), ("Scheduled", "b")]


async def test_a_pod_that_skipped_the_webhook_gets_the_managed_node_toleration_before_its_binding() -> None:
    """A bridged node is tainted NoExecute: bound without the toleration, the pod would be evicted by the taint
    manager. The pod watcher's copy of A lacks it (one patch, UID tested); B is not held there (read, then patched)."""
    acts, requests, _ = activities(
        cache=Pending(pending(A, tolerated=False)), served={"b": pending(B, tolerated=False)}
    )
    result = await acts.place_pods(place(label=False))
    assert result.nodes == {"uid-a": "k8s-node", "uid-b": "k8s-node"}
    assert requests.index("tolerate a") < requests.index("bind a")
    assert requests.index("get b") < requests.index("tolerate b") < requests.index("bind b")
    patch = acts.bodies["tolerate a"]  # type: ignore[attr-defined]
    assert patch == [
        {"op": "test", "path": "/metadata/uid", "value": "uid-a"},
        {"op": "add", "path": "/spec/tolerations", "value": [managed_node_toleration(wellknown.SCHEDULER_NAME)]},
    ]


async def test_a_pod_not_held_and_not_found_is_gone_without_a_binding() -> None:
    acts, requests, _ = activities(cache=Pending(pending(A)))
    result = await acts.place_pods(place(label=False))
    assert result.gone == ["uid-b"] and "bind b" not in requests and requests.count("get b") == 1


async def test_a_pod_not_held_and_read_while_deleting_is_gone_without_a_patch_or_binding() -> None:
    deleting = pending(B, tolerated=False)
    deleting["metadata"]["deletionTimestamp"] = "2026-11-28T23:00:00Z"
    acts, requests, _ = activities(cache=Pending(pending(A)), served={"b": deleting})
    result = await acts.place_pods(place(label=False))
    assert result.gone == ["uid-b"] and [r for r in requests if r.endswith(" b")] == ["get b"]


@pytest.mark.parametrize("verb", ["bind", "label"])
async def test_a_member_gone_meanwhile_is_reported_and_gets_no_event(verb: str) -> None:
    acts, requests, recorder = activities({verb: {"b"}})
    result = await acts.place_pods(place(label=True))
    assert result.gone == ["uid-b"]
    assert ("label b" in requests) is (verb == "label"), "a pod not bound is not labelled"
    assert sorted(reasons(recorder)) == [("Scheduled", "a"), ("SlurmJobSubmitted", "a")]


async def test_nothing_is_told_when_the_writes_fail() -> None:
    """A label that fails (not a 404) fails the activity before any Event: the retry repeats the whole."""
    acts, _, recorder = activities()

    async def refuse(*args: Any, **kwargs: Any) -> None:
        raise httpx.ConnectError("apiserver down")

    acts.kube.patch = refuse  # type: ignore[method-assign]
    with pytest.raises(Exception):  # noqa: B017 - whichever error the client maps it to
        await acts.place_pods(place(label=True))
    assert recorder.events == []


@pytest.mark.parametrize("event", [True, False])
async def test_release_removes_the_finalizers_then_tells(event: bool) -> None:
    acts, requests, recorder = activities()
    cleaned = EventInput(pods=[A, B], reason="SlurmJobCleanedUp", message="Slurm job 7 cleaned up: done")
    await acts.release_pods(ReleasePodsInput(pods=[A, B], event=cleaned if event else None))
    assert sorted(requests) == ["unfinalize a", "unfinalize b"]
    assert sorted(reasons(recorder)) == ([("SlurmJobCleanedUp", "a"), ("SlurmJobCleanedUp", "b")] if event else [])
