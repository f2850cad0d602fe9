"""A small controller runtime for the operator's reconcilers, as controller-runtime and kopf give one.

A reconciler declares what it watches; the runtime does the rest:

* one list+watch per watched resource (per namespace when the operator is scoped), into a shared cache
  (:class:`Caches`): two reconcilers that watch Secrets share one watch;
* each event is mapped to keys of the reconciler's own kind (``Watch.keys``) and put on its work queue
  (``workers.operator.workqueue``: one key is reconciled by one worker at a time, a failure retried with its own
  backoff, never blocking the others); a relist of the primary kind queues every object;
* helpers every reconcile ends with: conditions (:func:`set_condition`, transition time kept while the status
  stays), a status write only when it changed, and Warning Events posted once per distinct problem.

So a reconciler file holds only its reconcile. The NodeSet and Token controllers predate it and run their own
loops of the same shape.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from slinky.clients.errors import KubeNotFound
from slinky.clients.events import EventRecorder, object_event
from slinky.clients.kube import KubeClient
from slinky.operator.conditions import set_condition as set_condition  # the reconcilers' import
from workers.operator.scoping import replace_synced, watch_paths
from workers.operator.workqueue import Key, WorkQueue

logger = logging.getLogger(__name__)
Obj = dict[str, Any]
COMPONENT = "slurm-operator"


@dataclasses.dataclass(frozen=True)
class Watch:
    """A resource a reconciler reads: its collection path and which of the reconciler's keys an object of it
    concerns (None: the object's own key, for the primary kind)."""

    path: str
    keys: Callable[[Obj], Iterable[Key]] | None = None


class Reconciler(Protocol):
    kind: str
    primary: str
    """The collection path of the reconciled kind."""
    watches: Sequence[Watch]

    async def reconcile(self, key: Key) -> None: ...


class Caches:
    """The objects of every watched resource, by collection path, then (namespace, name)."""

    def __init__(self) -> None:
        self.by_path: dict[str, dict[Key, Obj]] = {}
        self.synced: dict[str, asyncio.Event] = {}

    def of(self, path: str) -> dict[Key, Obj]:
        return self.by_path.setdefault(path, {})

    def get(self, path: str, namespace: str, name: str) -> Obj | None:
        return self.of(path).get((namespace, name))

    def in_namespace(self, path: str, namespace: str) -> list[Obj]:
        return [obj for (ns, _), obj in sorted(self.of(path).items()) if ns == namespace]


class Runtime:
    """Runs reconcilers: the watches they declare (shared), their queues and workers."""

    def __init__(
        self, kube: KubeClient, events: EventRecorder, *, namespaces: Sequence[str] = (), workers: int = 2
    ) -> None:
        self.kube = kube
        self.events = events
        self.namespaces = tuple(namespaces)
        self.workers = workers
        self.caches = Caches()
        self._listeners: dict[str, list[tuple[WorkQueue, Watch]]] = {}
        self._reconcilers: list[tuple[Reconciler, WorkQueue]] = []
        self._false_seen: dict[tuple[str, Key, str], str] = {}
        self._queues: dict[str, WorkQueue] = {}

    def requeue_later(self, kind: str, key: Key, seconds: float) -> None:
        """Reconcile ``key`` of ``kind`` again in ``seconds``: for what no watch reports (a pod getting ready)."""
        self._queues[kind].add_later(key, seconds)

    def add(self, reconciler: Reconciler) -> WorkQueue:
        queue = WorkQueue()
        self._reconcilers.append((reconciler, queue))
        self._queues[reconciler.kind] = queue
        self._listeners.setdefault(reconciler.primary, []).append((queue, Watch(reconciler.primary)))
        for watch in reconciler.watches:
            self._listeners.setdefault(watch.path, []).append((queue, watch))
        return queue

    def all_synced(self) -> bool:
        """Whether every watched resource has been listed once (decisions before that see half the world)."""
        return all(self.synced(path).is_set() for path in self._listeners)

    def synced(self, path: str) -> asyncio.Event:
        return self.caches.synced.setdefault(path, asyncio.Event())

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(self._watch(ns, path, collection), name=f"watch-{collection}-{ns or 'all'}")
            for collection in self._listeners
            for ns, path in watch_paths(collection, self.namespaces)
        ]
        tasks += [
            asyncio.create_task(queue.serve(r.reconcile, r.kind), name=f"{r.kind}-worker-{i}")
            for r, queue in self._reconcilers
            for i in range(self.workers)
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _watch(self, namespace: str | None, path: str, collection: str) -> None:
        cache = self.caches.of(collection)
        async for kind, obj in self.kube.list_watch(path):
            if kind == "SYNC":
                replace_synced(cache, obj["items"], namespace)
                for item in obj["items"]:
                    self._dispatch(collection, item)
                self.synced(collection).set()
                continue
            key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            if kind == "DELETED":
                cache.pop(key, None)
            else:
                cache[key] = obj
            self._dispatch(collection, obj)

    def _dispatch(self, collection: str, obj: Obj) -> None:
        for queue, watch in self._listeners.get(collection, []):
            if watch.keys is None:
                queue.add((obj["metadata"]["namespace"], obj["metadata"]["name"]))
                continue
            for key in watch.keys(obj):
                queue.add(key)

    # -------------------------------------------------------------------------------- status and events
    async def write_status(self, path: str, current: Obj, status: Obj) -> None:
        """Merge-patch ``status`` onto the object at ``path`` unless every field of it is already so."""
        if all((current.get("status") or {}).get(k) == v for k, v in status.items()):
            return
        with contextlib.suppress(KubeNotFound):
            await self.kube.patch(f"{path}/status", {"status": status}, decode=False)

    def warn_once(self, obj: Obj, reason: str, message: str) -> None:
        """A Warning Event on ``obj``, once per distinct (reason, message) until the problem clears."""
        meta = obj["metadata"]
        key = (str(obj.get("kind")), (meta["namespace"], meta["name"]), reason)
        if self._false_seen.get(key) == message:
            return
        self._false_seen[key] = message
        self.event(obj, reason, message, "Warning")

    def clear_warnings(self, obj: Obj) -> None:
        meta = obj["metadata"]
        for key in [k for k in self._false_seen if k[:2] == (str(obj.get("kind")), (meta["namespace"], meta["name"]))]:
            del self._false_seen[key]

    def event(self, obj: Obj, reason: str, message: str, type_: str = "Normal") -> None:
        meta = obj["metadata"]
        self.events.record(
            object_event(
                str(obj.get("apiVersion", "")),
                str(obj.get("kind", "")),
                meta["namespace"],
                meta["name"],
                str(meta.get("uid", "")),
                reason,
                message,
                type_,
                COMPONENT,
            )
        )
