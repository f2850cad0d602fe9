"""The operator's Slurm client per Controller: slurmrestd, with a JWT it mints from the Controller's key.

Upstream's slurmclient controller does the same: user `slurm`, lifetime 15 min, a new token at 80 %. The key
is the Controller's `jwtKeyRef` Secret, re-read at most every few seconds, so a rotated key signs the next
request. A missing Controller, key or Secret is a `ControllerProblem` with a reason the NodeSet's condition
shows.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass

from slinky import wellknown
from slinky.clients.errors import KubeNotFound
from slinky.clients.kube import KubeClient
from slinky.clients.slurm import SlurmApi, SlurmClient
from slinky.clients.slurm.joblist import JobList
from slinky.clients.slurm.jwt import MintedToken
from slinky.clients.slurm.nodelist import NodeList
from slinky.operator.api.controller import Controller
from slinky.operator.models import ControllerKey

KEY_TTL_SECONDS = 5.0
RESTAPI_PORT = 6820


class ControllerProblem(Exception):
    """The Controller cannot be talked to; `reason` is the condition reason, the message says what to fix."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def controller_path(namespace: str, name: str) -> str:
    return f"/apis/slinky.slurm.net/v1beta1/namespaces/{namespace}/controllers/{name}"


@dataclass
class _Entry:
    client: SlurmClient
    key: dict[str, bytes]
    """The signing key the client's MintedToken reads on every request."""
    read_at: float
    url: str
    jobs: JobList
    """The Controller's job list, shared by the node poll, the metrics rounds and the drains (see JobList)."""
    nodes: NodeList
    """The Controller's node list, read by its node poll with ``update_time`` (see NodeList)."""


class SlurmClients:
    """One `SlurmClient` per Controller, created on first use."""

    def __init__(self, kube: KubeClient, rest_url: str, *, service_addresses: str = "dns") -> None:
        self.kube = kube
        self.rest_url = rest_url
        self.service_addresses = service_addresses
        self._entries: dict[tuple[str, str], _Entry] = {}

    async def controller(self, key: ControllerKey) -> Controller:
        try:
            raw = await self.kube.get(controller_path(key.namespace, key.name))
        except KubeNotFound:
            raise ControllerProblem(
                "ControllerNotFound", f"Controller {key.namespace}/{key.name} does not exist (spec.controllerRef)"
            ) from None
        return Controller.model_validate(raw)

    async def _read_key(self, key: ControllerKey) -> tuple[bytes, str]:
        """The Controller's signing key and its slurmrestd URL."""
        controller = await self.controller(key)
        annotations = controller.metadata.get("annotations") or {}
        if controller.spec.external:
            url = str(annotations.get(wellknown.ANNOTATION_CONTROLLER_REST_URL) or self.rest_url)
        else:
            url = await self._managed_url(key)
        ref = controller.spec.jwt_key()
        if ref is None:
            raise ControllerProblem(
                "JwtKeyMissing", f"Controller {key.namespace}/{key.name} has no spec.jwtKeyRef to sign tokens with"
            )
        try:
            secret = await self.kube.get(f"/api/v1/namespaces/{key.namespace}/secrets/{ref.name}")
        except KubeNotFound:
            raise ControllerProblem(
                "JwtKeySecretNotFound", f"Secret {key.namespace}/{ref.name} (jwtKeyRef of {key.name}) does not exist"
            ) from None
        data = (secret.get("data") or {}).get(ref.key)
        if not data:
            raise ControllerProblem("JwtKeySecretNotFound", f"Secret {key.namespace}/{ref.name} has no key {ref.key}")
        return base64.b64decode(data), url

    async def _managed_url(self, key: ControllerKey) -> str:
        """A managed Controller's slurmrestd: its oldest RestApi's Service (upstream's slurmclient controller),
        by DNS name, or (``service_addresses="endpoints"``: an operator outside cluster DNS) a ready address
        of its Endpoints."""
        listing = await self.kube.get(f"/apis/slinky.slurm.net/v1beta1/namespaces/{key.namespace}/restapis")
        mine = [
            r
            for r in listing.get("items") or []
            if ((r.get("spec") or {}).get("controllerRef") or {}).get("name") == key.name
            and not r["metadata"].get("deletionTimestamp")
        ]
        if not mine:
            raise ControllerProblem(
                "RestApiNotFound",
                f"Controller {key.namespace}/{key.name} is managed and no RestApi names it: the operator reaches "
                "a managed cluster through its RestApi (slurmrestd)",
            )
        oldest = min(mine, key=lambda r: (r["metadata"].get("creationTimestamp") or "", r["metadata"]["name"]))
        service = f"{oldest['metadata']['name']}-restapi"
        if self.service_addresses != "endpoints":
            return f"http://{service}.{key.namespace}:{RESTAPI_PORT}"
        try:
            endpoints = await self.kube.get(f"/api/v1/namespaces/{key.namespace}/endpoints/{service}")
        except KubeNotFound:
            endpoints = {}
        for subset in endpoints.get("subsets") or []:
            for address in subset.get("addresses") or []:
                return f"http://{address['ip']}:{RESTAPI_PORT}"
        raise ControllerProblem(
            "RestApiNotReady", f"RestApi {key.namespace}/{oldest['metadata']['name']} has no ready slurmrestd pod yet"
        )

    async def client(self, key: ControllerKey) -> SlurmApi:
        """The client of `key`, its signing key (and URL) re-read when older than a few seconds."""
        entry = self._entries.get((key.namespace, key.name))
        now = time.monotonic()
        if entry is None or now - entry.read_at > KEY_TTL_SECONDS:
            signing, url = await self._read_key(key)
            if entry is not None and entry.url != url:
                await entry.client.aclose()
                entry = None
            if entry is None:
                holder = {"key": signing}
                token = MintedToken(read_key=lambda: holder["key"])
                client = SlurmClient(url, token=token)
                entry = _Entry(client, holder, now, url, JobList(client), NodeList(client))
                self._entries[(key.namespace, key.name)] = entry
            entry.key["key"], entry.read_at = signing, now
        return entry.client

    async def job_list(self, key: ControllerKey) -> JobList:
        """The job list of `key`'s client (the one `client` returns), shared by every reader in this process."""
        await self.client(key)
        return self._entries[(key.namespace, key.name)].jobs

    async def node_list(self, key: ControllerKey) -> NodeList:
        """The node list of `key`'s client (the one `client` returns)."""
        await self.client(key)
        return self._entries[(key.namespace, key.name)].nodes

    async def aclose(self) -> None:
        for entry in self._entries.values():
            await entry.client.aclose()
