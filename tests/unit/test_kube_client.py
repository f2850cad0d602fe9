"""The Kubernetes client's error mapping: one typed error per answer class, Retry-After kept."""

from __future__ import annotations

import json

import httpx
import pytest

from slinky.clients.errors import KubeConflict, KubeError, KubeNotFound, KubeRejected, KubeUnavailable
from slinky.clients.kube import KubeClient, KubeConfig, KubeGone, raise_for_status


@pytest.mark.parametrize(
    ("code", "headers", "cls", "retry_after"),
    [
        (404, {}, KubeNotFound, None),
        (409, {}, KubeConflict, None),
        (410, {}, KubeGone, None),
        (422, {}, KubeRejected, None),
        (429, {"Retry-After": "3"}, KubeUnavailable, 3.0),
        (503, {"Retry-After": "soon"}, KubeUnavailable, None),
        (500, {}, KubeUnavailable, None),
    ],
)
def test_answers_map_to_typed_errors(
    code: int, headers: dict[str, str], cls: type[KubeError], retry_after: float | None
) -> None:
    status = {"kind": "Status", "reason": "Why", "message": "because"}
    with pytest.raises(cls) as caught:
        raise_for_status(httpx.Response(code, headers=headers, json=status), "PATCH", "/api/v1/x")
    assert caught.value.status_code == code and caught.value.reason == "Why"
    assert f"PATCH /api/v1/x: HTTP {code} Why: because" in str(caught.value)
    if isinstance(caught.value, KubeUnavailable):
        assert caught.value.retry_after == retry_after


def test_success_raises_nothing() -> None:
    raise_for_status(httpx.Response(201, json={}), "POST", "/api/v1/x")


async def test_list_watch_pages_resumes_and_relists(monkeypatch: pytest.MonkeyPatch) -> None:
    """The informer loop: paged list, resume after a watch ends, relist after a silent or refused watch,
    resume (no list) after a dropped connection."""

    async def no_sleep(_: float) -> None:
        return None

    monkeypatch.setattr("slinky.clients.kube.asyncio.sleep", no_sleep)
    requests: list[str] = []
    watches = iter(
        [
            [{"type": "ADDED", "object": {"metadata": {"name": "c", "resourceVersion": "11"}}}],  # then ends
            [],  # silent: relist
            "refused",
            "dropped",
            [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "13"}}}],
            [{"type": "DELETED", "object": {"metadata": {"name": "a", "resourceVersion": "14"}}}],
        ]
    )
    lists = iter(["10", "12", "12"])
    current = {"rv": ""}

    def handler(request: httpx.Request) -> httpx.Response:
        q = request.url.params
        if q.get("watch") == "true":
            requests.append(f"watch@{q['resourceVersion']}")
            step = next(watches)
            if step == "refused":
                return httpx.Response(500, json={"kind": "Status", "reason": "InternalError"})
            if step == "dropped":
                raise httpx.ReadError("connection reset")
            return httpx.Response(200, content="\n".join(json.dumps(e) for e in step).encode())
        if "continue" in q:
            requests.append("list page 2")
            return httpx.Response(200, json={"metadata": {"resourceVersion": current["rv"]}, "items": [{"name": "b"}]})
        current["rv"] = next(lists)
        requests.append("list page 1")
        meta = {"resourceVersion": current["rv"], "continue": "c1"}
        return httpx.Response(200, json={"metadata": meta, "items": [{"name": "a"}]})

    kube = KubeClient(KubeConfig(server="https://kube.test", ssl_context=False), transport=httpx.MockTransport(handler))
    seen: list[tuple[str, object]] = []
    async for kind, obj in kube.list_watch("/api/v1/pods"):
        seen.append((kind, [i["name"] for i in obj["items"]] if kind == "SYNC" else obj["metadata"]["name"]))
        if kind == "DELETED":
            break
    await kube.aclose()
    assert seen == [("SYNC", ["a", "b"]), ("ADDED", "c"), ("SYNC", ["a", "b"]), ("SYNC", ["a", "b"]), ("DELETED", "a")]
    assert requests == [
        *("list page 1", "list page 2", "watch@10"),  # paged list, then a watch from its resourceVersion
        "watch@11",  # the watch ended: resumed where it stopped; this one stays silent
        *("list page 1", "list page 2", "watch@12"),  # silent: relisted; this watch is refused
        *("list page 1", "list page 2", "watch@12"),  # refused: relisted; this connection drops
        "watch@12",  # dropped: resumed without a list; a bookmark only moves the resourceVersion
        "watch@13",
    ]


# --- remove_finalizer: a JSON patch that tests before it removes ------------------------------------------
OURS = "slinky.slurm.net/scheduler"


class _OnePod:
    """An API server holding one pod; applies JSON patches with ``test`` and ``remove`` as the real one does."""

    def __init__(self, uid: str, finalizers: list[str]) -> None:
        self.pod: dict[str, object] | None = {"metadata": {"uid": uid, "finalizers": list(finalizers)}}
        self.calls: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls.append(request.method)
        if self.pod is None:
            return httpx.Response(404, json={"kind": "Status", "reason": "NotFound"})
        meta = self.pod["metadata"]
        assert isinstance(meta, dict)
        if request.method == "GET":
            return httpx.Response(200, json=self.pod)
        for op in json.loads(request.content):
            parts = op["path"].strip("/").split("/")
            value = meta["uid"] if parts[-1] == "uid" else None
            if parts[1] == "finalizers":
                index = int(parts[2])
                value = meta["finalizers"][index] if index < len(meta["finalizers"]) else None
            if op["op"] == "test" and value != op["value"]:
                return httpx.Response(422, json={"kind": "Status", "reason": "Invalid"})
            if op["op"] == "remove":
                del meta["finalizers"][index]
        return httpx.Response(200, json=self.pod)


def _client(server: _OnePod) -> KubeClient:
    return KubeClient(KubeConfig(server="https://kube.test", ssl_context=False), transport=httpx.MockTransport(server))


@pytest.mark.parametrize(
    ("finalizers", "uid", "removed", "left", "calls"),
    [
        ([OURS], "u1", True, [], ["PATCH"]),  # the common case: one write, no read
        (["other", OURS], "u1", True, ["other"], ["PATCH", "GET", "PATCH"]),  # another one first: read, retry
        (["other"], "u1", False, ["other"], ["PATCH", "GET"]),  # removed already: a repeat never writes
        ([OURS], "u2", False, [OURS], ["PATCH", "GET"]),  # a newer pod under the same name keeps its own
    ],
    ids=["only-ours", "after-another", "repeat", "other-uid"],
)
async def test_remove_finalizer_tests_before_it_removes(
    finalizers: list[str], uid: str, removed: bool, left: list[str], calls: list[str]
) -> None:
    server = _OnePod("u1", finalizers)
    async with _client(server) as kube:
        assert await kube.remove_finalizer("/api/v1/namespaces/ns/pods/p", uid, OURS) is removed
    assert server.pod is not None and server.pod["metadata"]["finalizers"] == left  # type: ignore[index]
    assert server.calls == calls


async def test_remove_finalizer_of_a_deleted_pod_is_nothing_to_do() -> None:
    server = _OnePod("u1", [OURS])
    server.pod = None
    async with _client(server) as kube:
        assert await kube.remove_finalizer("/api/v1/namespaces/ns/pods/p", "u1", OURS) is False
    assert server.calls == ["PATCH"]


async def test_a_wedged_pool_is_replaced_after_five_pool_timeouts_in_a_row() -> None:
    wedged = {"left": 6}

    def handler(request: httpx.Request) -> httpx.Response:
        if wedged["left"]:
            wedged["left"] -= 1
            raise httpx.PoolTimeout("no connection", request=request)
        return httpx.Response(200, json={"kind": "Pod"})

    kube = KubeClient(KubeConfig(server="https://kube.test", ssl_context=False), transport=httpx.MockTransport(handler))
    first = kube._http
    for _ in range(4):
        with pytest.raises(KubeUnavailable, match="PoolTimeout"):
            await kube.get("/api/v1/namespaces/a/pods/p")
    assert kube.pools_replaced == 0 and kube._http is first, "four timeouts: a slow server, not a wedged pool"
    with pytest.raises(KubeUnavailable):
        await kube.get("/api/v1/namespaces/a/pods/p")
    assert kube.pools_replaced == 1 and kube._http is not first
    with pytest.raises(KubeUnavailable):
        await kube.get("/api/v1/namespaces/a/pods/p")  # one more timeout on the new pool: counted afresh
    assert (await kube.get("/api/v1/namespaces/a/pods/p"))["kind"] == "Pod"
    assert kube.pools_replaced == 1
    await kube.aclose()
