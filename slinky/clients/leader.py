"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's ``leaderelection`` package does it.

Several bridge replicas may run; only the leader runs the pod watcher, the Slurm poll, the garbage collector,
node sync and the Temporal worker. The others wait in :meth:`LeaderElector.acquire`. Durable state lives in
Temporal, so a new leader simply picks the lifecycles up.

The rules are client-go's:

- A lease is free when it has no holder, or when its record has not changed for ``lease_seconds`` as
  observed on *this* process's clock. Comparing local observation times, not the ``renewTime`` written by
  another machine, makes clock skew between nodes harmless.
- Every write is a PUT carrying the ``resourceVersion`` that was read, so two candidates cannot both win: the
  slower one gets 409 Conflict.
- The leader renews every ``retry_seconds``. If it cannot renew for ``renew_deadline_seconds`` (shorter than the
  lease), or finds another holder, :meth:`hold` raises :class:`LeadershipLost`. The process must then stop
  everything and exit before the lease expires for the others; ``workers/bridge/worker.py`` does.
- :meth:`release` on a graceful stop clears the holder, so a standby takes over at its next retry instead of
  after a whole lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

from slinky import wellknown
from slinky.clients.errors import KubeConflict, KubeError, KubeNotFound
from slinky.clients.kube import KubeClient, micro_time

logger = logging.getLogger(__name__)

Obj = dict[str, Any]


class LeadershipLost(Exception):
    """The lease could not be renewed in time, or another candidate holds it now."""


class LeaderElector:
    """One candidate for one Lease.

    Args:
        kube: The API client.
        namespace: The Lease's namespace.
        name: The Lease's name (one per bridge installation).
        identity: This candidate's unique name (pod name and a random suffix in production).
        lease_seconds: How long a silent leader keeps the lease for the others (client-go: 15 s).
        renew_deadline_seconds: How long the leader tries to renew before giving up (client-go: 10 s).
        retry_seconds: The wait between tries, for candidates and for the leader's renewals (client-go: 2 s).
    """

    def __init__(
        self,
        kube: KubeClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_seconds: float = 15.0,
        renew_deadline_seconds: float = 10.0,
        retry_seconds: float = 2.0,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        if not retry_seconds < renew_deadline_seconds < lease_seconds:
            raise ValueError("leader election needs retry < renew deadline < lease duration")
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.renew_deadline_seconds = renew_deadline_seconds
        self.retry_seconds = retry_seconds
        self._observed: tuple[str, str] | None = None
        """(holder, renewTime) of the lease record as last read."""
        self._observed_at = 0.0
        """When this process first saw that record, on its own monotonic clock (expiry is judged by it)."""
        self.is_leader = False
        self.annotations = dict(annotations or {})
        """Written on the Lease with every acquire and renewal: what the others should know of the leader (the
        bridge's submit relay address)."""
        self._holder_annotations: dict[str, str] = {}
        """The Lease's annotations as last read (``holder_annotation`` trusts them only when written by the holder)."""

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"

    def holder_annotation(self, key: str) -> str | None:
        """Annotation ``key`` of the Lease as last read, while another candidate holds it and has not let it
        expire (as this process observes it); None otherwise, and always while this candidate leads."""
        if self.is_leader or self._observed is None or self._observed[0] in ("", self.identity):
            return None
        if time.monotonic() - self._observed_at >= self.lease_seconds:
            return None
        if self._holder_annotations.get(wellknown.ANNOTATION_LEASE_WRITER) != self._observed[0]:
            return None  # written by an earlier holder: the present one wrote none
        return self._holder_annotations.get(key)

    async def acquire(self, stop: asyncio.Event | None = None) -> bool:
        """Wait until this candidate holds the lease (True), or until ``stop`` is set (False)."""
        stop = stop or asyncio.Event()
        while not stop.is_set():
            if await self._try_acquire_or_renew():
                logger.info("leader election: %s now holds lease %s/%s", self.identity, self.namespace, self.name)
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.retry_seconds)
        return False

    async def hold(self) -> None:
        """Renew the lease until cancelled; raise :class:`LeadershipLost` when it slips away."""
        last_renewed = time.monotonic()
        while True:
            await asyncio.sleep(self.retry_seconds)
            if await self._try_acquire_or_renew():
                last_renewed = time.monotonic()
                continue
            if self._observed is not None and self._observed[0] not in ("", self.identity):
                self.is_leader = False
                raise LeadershipLost(f"lease {self.namespace}/{self.name} is held by {self._observed[0]}")
            if time.monotonic() - last_renewed >= self.renew_deadline_seconds:
                self.is_leader = False
                raise LeadershipLost(
                    f"lease {self.namespace}/{self.name} not renewed for {self.renew_deadline_seconds} s"
                )

    async def release(self) -> None:
        """Give the lease up (graceful stop): the next candidate takes over at its next try."""
        if not self.is_leader:
            return
        self.is_leader = False
        try:
            lease = await self.kube.get(self.path)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            lease["spec"] = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": micro_time()}
            await self.kube.request("PUT", self.path, body=lease)
            logger.info("leader election: %s released lease %s/%s", self.identity, self.namespace, self.name)
        except KubeError as err:
            logger.warning("leader election: release failed (the lease expires on its own): %s", err)

    async def _try_acquire_or_renew(self) -> bool:
        """One read and at most one write; True when this candidate holds the lease afterwards."""
        now = micro_time()
        try:
            lease = await self.kube.get(self.path)
        except KubeNotFound:
            return await self._create(now)
        except KubeError as err:
            logger.warning("leader election: reading the lease failed: %s", err)
            return False
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        record = (holder, str(spec.get("renewTime") or ""))
        if record != self._observed:
            self._observed, self._observed_at = record, time.monotonic()
        self._holder_annotations = dict((lease.get("metadata") or {}).get("annotations") or {})
        duration = float(spec.get("leaseDurationSeconds") or self.lease_seconds)
        expired = time.monotonic() - self._observed_at >= duration
        if holder and holder != self.identity and not expired:
            self.is_leader = False
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        new_spec = {
            **spec,
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_seconds),
            "renewTime": now,
        }
        if holder != self.identity:
            new_spec["acquireTime"] = now
            new_spec["leaseTransitions"] = transitions + 1
        lease["spec"] = new_spec
        if self.annotations:
            metadata = lease.setdefault("metadata", {})
            metadata["annotations"] = {**(metadata.get("annotations") or {}), **self._written()}
        return await self._write("PUT", self.path, lease)

    async def _create(self, now: str) -> bool:
        lease: Obj = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace, "annotations": self._written()},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_seconds),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        return await self._write("POST", f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases", lease)

    def _written(self) -> dict[str, str]:
        """The annotations to write, signed with this candidate's identity (none when it has none to write)."""
        return {**self.annotations, wellknown.ANNOTATION_LEASE_WRITER: self.identity} if self.annotations else {}

    async def _write(self, method: str, path: str, lease: Obj) -> bool:
        """Create or replace the lease as its holder; False when another candidate wrote first (409)."""
        try:
            written = await self.kube.request(method, path, body=lease)
        except KubeConflict:
            return False  # read again at the next try
        except KubeError as err:
            logger.warning("leader election: writing the lease failed: %s", err)
            return False
        self._remember(written)
        self.is_leader = True
        return True

    def _remember(self, lease: Obj) -> None:
        spec = lease.get("spec") or {}
        self._observed = (str(spec.get("holderIdentity") or ""), str(spec.get("renewTime") or ""))
        self._observed_at = time.monotonic()
