"""A small controller runtime for the operator's reconcilers, as controller-runtime and kopf give one.

A reconciler declares what it watches; the runtime does the rest:

* one list+watch per watched resource (per namespace when the operator is scoped), into a shared cache
  (:class:`Caches`): two reconcilers that watch Secrets share one watch;
* each event is mapped to keys of the reconciler's own kind (``Watch.keys``) and put on its work queue
  (``workers.operator.workqueue``: one key is reconciled by one worker at a time, a failure retried with its own
  backoff, never blocking the others); a relist of the primary kind queues every object;
* helpers every reconcile ends with: conditions (:func:`set_condition`, transition time kept while the status
  stays), a status write only when it changed, and Warning Events posted once per distinct problem.

So a reconciler file holds only its reconcile: the Controller, RestApi, Accounting, LoginSet, NodeSet and
Token reconcilers all run here, on one set of watches.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Coroutine, Iterable, Sequence
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
    """A resource a reconciler reads, and which of the reconciler's keys an event of it concerns.

    ``keys(obj)`` maps an object to keys (None: the object's own key, for the primary kind). ``on_change(type,
    obj, before)`` is the richer form, for a reconciler that compares with the cached object before the event
    or acts on a deletion itself (``type`` is ``SYNC`` for each object of a relist, else the watch event's);
    when set, it is used instead of ``keys``. Objects are cached per ``collection``: the path, plus the label
    selector when there is one.
    """

    path: str
    keys: Callable[[Obj], Iterable[Key]] | None = None
    label_selector: str = ""
    cluster_scoped: bool = False
    on_change: Callable[[str, Obj, Obj | None], Iterable[Key]] | None = None

    @property
    def collection(self) -> str:
        return f"{self.path}?labelSelector={self.label_selector}" if self.label_selector else self.path


class Reconciler(Protocol):
    kind: str
    primary: str
    """The collection path of the reconciled kind."""
    watches: Sequence[Watch]

    async def reconcile(self, key: Key) -> None: ...


class Caches:
    """The objects of every watched resource, by collection (path, and label selector if any), then
    (namespace, name); a cluster-scoped object's namespace is ``""``."""

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
    """Runs reconcilers: the watches they declare (shared), their queues and workers, and the background
    tasks they start (``spawn``), all stopped together."""

    def __init__(
        self, kube: KubeClient, events: EventRecorder, *, namespaces: Sequence[str] = (), workers: int = 2
    ) -> None:
        self.kube = kube
        self.events = events
        self.namespaces = tuple(namespaces)
        self.workers = workers
        self.caches = Caches()
        self._collections: dict[str, Watch] = {}
        self._listeners: dict[str, list[tuple[WorkQueue, Watch]]] = {}
        self._reconcilers: list[tuple[Reconciler, WorkQueue, int]] = []
        self._false_seen: dict[tuple[str, Key, str], str] = {}
        self.queues: dict[str, WorkQueue] = {}
        """The work queue of each reconciled kind (the operator's metrics read their counts)."""
        self._background: set[asyncio.Task[Any]] = set()

    def requeue_later(self, kind: str, key: Key, seconds: float, *, replace: bool = False) -> None:
        """Reconcile ``key`` of ``kind`` again in ``seconds``: for what no watch reports (a pod getting ready,
        a token's refresh). One timer per key: the earliest wins, or this one with ``replace``."""
        self.queues[kind].add_later(key, seconds, replace=replace)

    def cancel_requeue(self, kind: str, key: Key) -> None:
        self.queues[kind].cancel_later(key)

    def add(self, reconciler: Reconciler, *, workers: int | None = None) -> WorkQueue:
        queue = WorkQueue()
        self._reconcilers.append((reconciler, queue, workers or self.workers))
        self.queues[reconciler.kind] = queue
        for watch in (Watch(reconciler.primary), *reconciler.watches):
            self._collections.setdefault(watch.collection, watch)
            self._listeners.setdefault(watch.collection, []).append((queue, watch))
        return queue

    def watch_streams(self) -> int:
        """List+watch streams ``run`` keeps open (a connection each, in the Kubernetes client's stream pool)."""
        return sum(len(self._paths(watch)) for watch in self._collections.values())

    def _paths(self, watch: Watch) -> list[tuple[str | None, str]]:
        return watch_paths(watch.path, self.namespaces, cluster_scoped=watch.cluster_scoped)

    def all_synced(self) -> bool:
        """Whether every watched resource has been listed once (decisions before that see half the world)."""
        return all(self.synced(path).is_set() for path in self._listeners)

    def synced(self, collection: str) -> asyncio.Event:
        return self.caches.synced.setdefault(collection, asyncio.Event())

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        """A background task of a reconciler (a poll loop, a signal), cancelled when the runtime stops."""
        task = asyncio.create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(self._watch(ns, path, watch), name=f"watch-{watch.collection}-{ns or 'all'}")
            for watch in self._collections.values()
            for ns, path in self._paths(watch)
        ]
        tasks += [
            asyncio.create_task(queue.serve(r.reconcile, r.kind), name=f"{r.kind}-worker-{i}")
            for r, queue, workers in self._reconcilers
            for i in range(workers)
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in [*tasks, *self._background]:
                task.cancel()
            for task in [*tasks, *self._background]:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _watch(self, namespace: str | None, path: str, watch: Watch) -> None:
        collection = watch.collection
        cache = self.caches.of(collection)
        params = {"labelSelector": watch.label_selector} if watch.label_selector else None
        async for kind, obj in self.kube.list_watch(path, params):
            if kind == "SYNC":
                _typed(obj)
                before = {k: v for k, v in cache.items() if namespace is None or k[0] == namespace}
                replace_synced(cache, obj["items"], namespace)
                for item in obj["items"]:
                    self._dispatch(collection, "SYNC", item, before.get(_key(item)))
                self.synced(collection).set()
                continue
            key = _key(obj)
            previous = cache.get(key)
            if kind == "DELETED":
                cache.pop(key, None)
                self.clear_warnings(obj)  # one made again under the name is told its problems again
            else:
                cache[key] = obj
            self._dispatch(collection, kind, obj, previous)

    def _dispatch(self, collection: str, kind: str, obj: Obj, before: Obj | None) -> None:
        for queue, watch in self._listeners.get(collection, []):
            if watch.on_change is not None:
                keys: Iterable[Key] = watch.on_change(kind, obj, before)
            elif watch.keys is None:
                keys = (_key(obj),)
            else:
                keys = watch.keys(obj)
            for key in keys:
                queue.add(key)

    # -------------------------------------------------------------------------------- status and events
    async def write_status(self, path: str, current: Obj, status: Obj) -> None:
        """Merge-patch ``status`` onto the object at ``path`` unless every field of it is already so."""
        if all((current.get("status") or {}).get(k) == v for k, v in status.items()):
            return
        with contextlib.suppress(KubeNotFound):
            await self.kube.patch(f"{path}/status", {"status": status}, decode=False)

    def warn_once(self, obj: Obj, reason: str, message: str) -> None:
        """A Warning Event on ``obj``, once per distinct (reason, message) until the problem clears; not again
        after a restart when the object's conditions already show it (False with this reason)."""
        meta = obj["metadata"]
        key = (str(obj.get("kind")), (meta["namespace"], meta["name"]), reason)
        if self._false_seen.get(key) == message:
            return
        told = key not in self._false_seen and any(  # by this process before a restart, or another replica
            c.get("status") == "False" and c.get("reason") == reason
            for c in (obj.get("status") or {}).get("conditions") or []
        )
        self._false_seen[key] = message
        if told:
            return
        self.event(obj, reason, message, "Warning")

    def clear_warnings(self, obj: Obj) -> None:
        for key in [k for k in self._false_seen if k[:2] == (str(obj.get("kind")), _key(obj))]:
            del self._false_seen[key]

    def forget_warning(self, obj: Obj, reason: str) -> None:
        """The problem ``reason`` is gone: when it comes back, it is told again."""
        self._false_seen.pop((str(obj.get("kind")), _key(obj), reason), None)

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


def _key(obj: Obj) -> Key:
    return (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])


def _typed(listing: Obj) -> None:
    """Give a listing's items the apiVersion and kind a list leaves out (a watch event's object has them), so
    an Event about an object first seen in a listing names its kind."""
    kind = str(listing.get("kind") or "")
    for item in listing.get("items") or []:
        item.setdefault("apiVersion", listing.get("apiVersion", ""))
        if kind.endswith("List"):
            item.setdefault("kind", kind[: -len("List")])
