"""EventRecorder: Events posted in the background, never holding the caller; retried once when unavailable."""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import pytest

from slinky import telemetry
from slinky.clients.events import EventRecorder, pod_event
from slinky.clients.kube import KubeClient, KubeConfig


def _event(name: str, reason: str = "Bound") -> dict[str, object]:
    return {
        "metadata": {"generateName": f"{name}.", "namespace": "ns"},
        "involvedObject": {"kind": "Pod", "namespace": "ns", "name": name, "uid": "u-" + name},
        "reason": reason,
        "message": "m",
    }


def _client(handler: httpx.MockTransport) -> KubeClient:
    return KubeClient(KubeConfig(server="https://kube.test", ssl_context=False), transport=handler)


async def test_record_returns_at_once_and_the_consumers_post_every_event() -> None:
    gate = asyncio.Event()
    posted: list[str] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        await gate.wait()  # the API server is slow
        assert request.url.path == "/api/v1/namespaces/ns/events"
        posted.append(json.loads(request.content)["involvedObject"]["name"])
        return httpx.Response(201, json={"kind": "Event"})

    kube = _client(httpx.MockTransport(handler))
    async with EventRecorder(kube, consumers=2) as recorder:
        for i in range(5):
            recorder.record(_event(f"p{i}"))  # does not wait for the slow server
        assert posted == []
        gate.set()
        await recorder.flush()
    assert sorted(posted) == [f"p{i}" for i in range(5)]
    assert recorder.posted == 5
    await kube.aclose()


async def test_unavailable_is_retried_once_and_a_refusal_is_not() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        name = json.loads(request.content)["involvedObject"]["name"]
        calls.append(name)
        if name == "flaky" and calls.count("flaky") == 1:
            return httpx.Response(503, headers={"Retry-After": "0"}, json={"kind": "Status", "code": 503})
        if name == "closing":
            return httpx.Response(403, json={"kind": "Status", "code": 403, "message": "namespace is terminating"})
        return httpx.Response(201, json={})

    kube = _client(httpx.MockTransport(handler))
    async with EventRecorder(kube, consumers=1) as recorder:
        recorder.record(_event("flaky"))
        recorder.record(_event("closing"))
        await recorder.flush()
    assert calls == ["flaky", "flaky", "closing"]
    assert recorder.posted == 1
    await kube.aclose()


TERMINATING = {  # kube-apiserver v1.20's answer, recorded
    "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
    "message": 'events "e1" is forbidden: unable to create new content in namespace evtest because it is being '
    "terminated",
    "details": {"name": "e1", "kind": "events", "causes": [
        {"reason": "NamespaceTerminating", "message": "namespace evtest is being terminated",
         "field": "metadata.namespace"}]},
}  # fmt: skip


async def test_a_deleted_namespace_is_not_worth_a_warning_but_a_refusal_is(caplog: pytest.LogCaptureFixture) -> None:
    """Deleting a namespace of 2,000 pods made 306 warnings (their cleanup Events); RBAC refusing is a real one."""

    def handler(request: httpx.Request) -> httpx.Response:
        name = json.loads(request.content)["involvedObject"]["name"]
        if name == "closing":
            return httpx.Response(403, json=TERMINATING)
        if name == "gone":
            return httpx.Response(404, json={"kind": "Status", "reason": "NotFound", "code": 404})
        return httpx.Response(403, json={"kind": "Status", "reason": "Forbidden", "code": 403, "message": "RBAC"})

    kube = _client(httpx.MockTransport(handler))
    with caplog.at_level(logging.DEBUG, logger="slinky.clients.events"):
        async with EventRecorder(kube, consumers=1) as recorder:
            recorder.record(_event("closing"))
            recorder.record(_event("gone"))
            recorder.record(_event("refused"))
            await recorder.flush()
    levels = {r.getMessage().split(" on ")[1].split(" ")[0]: r.levelname for r in caplog.records}
    assert levels == {"ns/closing": "DEBUG", "ns/gone": "DEBUG", "ns/refused": "WARNING"}
    await kube.aclose()


async def test_a_full_queue_drops_and_counts_instead_of_blocking() -> None:
    gate = asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        await gate.wait()
        return httpx.Response(201, json={})

    kube = _client(httpx.MockTransport(handler))
    recorder = EventRecorder(kube, consumers=1, max_queue=2)
    before = telemetry.EVENTS_DROPPED._value.get()
    recorder.record(_event("p0"))
    await asyncio.sleep(0)  # the consumer takes p0 and waits on the slow server
    for i in range(1, 4):
        recorder.record(_event(f"p{i}"))  # p1, p2 fill the queue; p3 is dropped
    assert recorder.dropped == 1
    assert telemetry.EVENTS_DROPPED._value.get() == before + 1
    gate.set()
    await recorder.aclose()
    assert recorder.posted == 3
    await kube.aclose()


def test_pod_event_names_the_pod_and_cuts_long_messages() -> None:
    event = pod_event("ns", "p", "u1", "Bound", "x" * 5000, "Warning")
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "ns", "name": "p", "uid": "u1"}
    assert event["metadata"] == {"generateName": "p.", "namespace": "ns"}
    assert len(event["message"]) == 1024 and event["type"] == "Warning"
    assert event["source"] == {"component": "slurm-bridge"} and event["firstTimestamp"] == event["lastTimestamp"]
