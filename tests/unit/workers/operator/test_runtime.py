"""The operator's controller runtime: shared watches (one per collection, a label selector its own), events
mapped to keys, a listing's items typed, Warning Events told once (not again after a restart), and the watch
count the operator sizes its connection pool by."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, cast

from slinky.clients.events import EventRecorder
from slinky.clients.kube import KubeClient
from workers.operator.runtime import Runtime, Watch
from workers.operator.workqueue import Key

Obj = dict[str, Any]


class ScriptedKube:
    """list_watch answers: a listing, then the scripted events of that path."""

    def __init__(self, script: Mapping[str, Sequence[tuple[str, Obj]]]) -> None:
        self.script = script
        self.opened: list[tuple[str, Mapping[str, Any] | None]] = []

    async def list_watch(self, path: str, params: Mapping[str, Any] | None = None) -> AsyncIterator[tuple[str, Obj]]:
        self.opened.append((path, params))
        for event in self.script.get(path, ()):
            yield event
        await asyncio.Event().wait()


class Recorder:
    def __init__(self) -> None:
        self.events: list[Obj] = []

    def record(self, event: Obj) -> None:
        self.events.append(event)


def _pod(name: str, owner: str = "", node: str = "") -> Obj:
    refs = [{"kind": "NodeSet", "name": owner, "controller": True}] if owner else []
    return {"metadata": {"namespace": "ns", "name": name, "ownerReferences": refs}, "spec": {"nodeName": node}}


class Recon:
    kind = "NodeSet"
    primary = "/apis/slinky.slurm.net/v1beta1/nodesets"

    def __init__(self, runtime: Runtime) -> None:
        self.seen: list[tuple[str, str, bool]] = []
        self.reconciled: list[Key] = []
        self.watches = (Watch("/api/v1/pods", label_selector="app=slurmd", on_change=self.changed),)

    def changed(self, kind: str, obj: Obj, before: Obj | None) -> Iterable[Key]:
        self.seen.append((kind, obj["metadata"]["name"], before is not None))
        return [("ns", "from-" + obj["metadata"]["name"])]

    async def reconcile(self, key: Key) -> None:
        self.reconciled.append(key)


async def test_watches_are_shared_typed_and_mapped_to_keys() -> None:
    nodeset = {"metadata": {"namespace": "ns", "name": "cpu"}}
    listing = {"kind": "NodeSetList", "apiVersion": "slinky.slurm.net/v1beta1", "items": [nodeset]}
    pods = {"kind": "PodList", "apiVersion": "v1", "items": [_pod("cpu-0", "cpu")]}
    kube = ScriptedKube(
        {
            "/apis/slinky.slurm.net/v1beta1/nodesets": [("SYNC", listing)],
            "/api/v1/pods": [("SYNC", pods), ("MODIFIED", _pod("cpu-0", "cpu", "n1")), ("DELETED", _pod("cpu-0"))],
        }
    )
    runtime = Runtime(cast(KubeClient, kube), cast(EventRecorder, Recorder()))
    recon = Recon(runtime)
    runtime.add(recon)
    runtime.add(Recon(runtime))  # a second reconciler of the same collections: no second watch
    task = asyncio.create_task(runtime.run())
    await asyncio.sleep(0.05)
    task.cancel()
    assert sorted(kube.opened, key=str) == sorted(
        [("/apis/slinky.slurm.net/v1beta1/nodesets", None), ("/api/v1/pods", {"labelSelector": "app=slurmd"})],
        key=str,
    )
    assert recon.seen == [("SYNC", "cpu-0", False), ("MODIFIED", "cpu-0", True), ("DELETED", "cpu-0", True)]
    assert ("ns", "cpu") in recon.reconciled and ("ns", "from-cpu-0") in recon.reconciled
    cached = runtime.caches.get("/apis/slinky.slurm.net/v1beta1/nodesets", "ns", "cpu")
    assert cached is not None and (cached["kind"], cached["apiVersion"]) == ("NodeSet", "slinky.slurm.net/v1beta1")
    assert runtime.caches.of("/api/v1/pods?labelSelector=app=slurmd") == {}, "the deleted pod left the cache"
    assert runtime.watch_streams() == 2


def test_a_warning_is_told_once_and_not_again_after_a_restart() -> None:
    recorder = Recorder()
    runtime = Runtime(cast(KubeClient, ScriptedKube({})), cast(EventRecorder, recorder))
    obj: Obj = {"kind": "Accounting", "apiVersion": "v", "metadata": {"namespace": "ns", "name": "a", "uid": "u"}}
    runtime.warn_once(obj, "DatabaseUnreachable", "down")
    runtime.warn_once(obj, "DatabaseUnreachable", "down")
    assert len(recorder.events) == 1
    runtime.forget_warning(obj, "DatabaseUnreachable")
    runtime.warn_once(obj, "DatabaseUnreachable", "down")
    assert len(recorder.events) == 2, "a problem that cleared and came back is told again"
    restarted = Runtime(cast(KubeClient, ScriptedKube({})), cast(EventRecorder, recorder))
    obj["status"] = {"conditions": [{"type": "Ready", "status": "False", "reason": "DatabaseUnreachable"}]}
    restarted.warn_once(obj, "DatabaseUnreachable", "down")
    assert len(recorder.events) == 2, "the object's condition shows it was told"
