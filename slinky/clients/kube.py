"""A small async Kubernetes API client on httpx: the only code of the product that talks to the API server.

Why not the official client for I/O: it is synchronous (a thread per in-flight call), its pod binding call
raises although the binding succeeded, and its watch needs a thread per stream. The lifecycle makes a few
small calls per pod, so one pooled ``httpx.AsyncClient`` is both simpler and faster. Configuration still
follows the official client's rules (kubeconfig or in-cluster service account).

Errors map to ``slinky.clients.errors`` by status code (never by message): 404 → KubeNotFound,
409 → KubeConflict, 410 → KubeGone, other 4xx → KubeRejected, 429/5xx and transport failures →
KubeUnavailable.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime as dt
import json
import logging
import os
import ssl
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Final, Literal

import httpx
import yaml

from slinky.clients import http
from slinky.clients.errors import KubeConflict, KubeError, KubeNotFound, KubeRejected, KubeUnavailable

logger = logging.getLogger(__name__)
Obj = dict[str, Any]
PatchType = Literal["merge", "strategic", "json"]
CONTENT_TYPES: Final = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
}
IN_CLUSTER_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeGone(KubeRejected):
    """410 Gone: a watch or list resourceVersion is too old; relist."""


@dataclasses.dataclass(frozen=True)
class KubeConfig:
    """Where the API server is and how to trust and reach it."""

    server: str
    ssl_context: ssl.SSLContext | bool
    token: str | None = None


def load_kubeconfig(path: str | Path | None = None, context: str | None = None) -> KubeConfig:
    """Load a kubeconfig file, or the in-cluster service account when ``path`` is None and one exists.

    Supported: server; ``certificate-authority-data`` or ``certificate-authority`` (relative to the file);
    ``insecure-skip-tls-verify``; ``token`` or ``tokenFile``; client certificates as files or data.
    """
    if path is None:
        path = os.environ.get("KUBECONFIG") or None
    if path is None and (IN_CLUSTER_DIR / "token").is_file():
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        return KubeConfig(
            server=f"https://{host}:{port}",
            ssl_context=ssl.create_default_context(cafile=str(IN_CLUSTER_DIR / "ca.crt")),
            token=(IN_CLUSTER_DIR / "token").read_text().strip(),
        )
    if path is None:
        path = Path.home() / ".kube" / "config"
    path = Path(path)
    doc = yaml.safe_load(path.read_text()) or {}
    base = path.parent
    ctx_name = context or doc.get("current-context")
    contexts = {c["name"]: c.get("context", {}) for c in doc.get("contexts") or []}
    if ctx_name not in contexts:
        raise ValueError(f"kubeconfig {path}: context {ctx_name!r} not found")
    ctx = contexts[ctx_name]
    clusters = {c["name"]: c.get("cluster", {}) for c in doc.get("clusters") or []}
    users = {u["name"]: u.get("user", {}) or {} for u in doc.get("users") or []}
    cluster = clusters.get(ctx.get("cluster"))
    if cluster is None:
        raise ValueError(f"kubeconfig {path}: cluster {ctx.get('cluster')!r} not found")
    user = users.get(ctx.get("user"), {})
    server = str(cluster["server"]).rstrip("/")

    verify: ssl.SSLContext | bool = True
    if server.startswith("https://"):
        if cluster.get("insecure-skip-tls-verify"):
            verify = False
        elif "certificate-authority-data" in cluster:
            pem = base64.b64decode(cluster["certificate-authority-data"]).decode()
            verify = ssl.create_default_context(cadata=pem)
        elif "certificate-authority" in cluster:
            verify = ssl.create_default_context(cafile=str(base / cluster["certificate-authority"]))
        else:
            verify = ssl.create_default_context()
        if isinstance(verify, ssl.SSLContext):
            _load_client_cert(verify, user, base)

    token = user.get("token")
    if token is None and "tokenFile" in user:
        token = (base / user["tokenFile"]).read_text().strip()
    return KubeConfig(server=server, ssl_context=verify, token=token)


def _load_client_cert(ctx: ssl.SSLContext, user: Mapping[str, Any], base: Path) -> None:
    """``load_cert_chain`` only reads files, so inline data goes through a private temporary directory."""
    if "client-certificate" in user and "client-key" in user:
        ctx.load_cert_chain(str(base / user["client-certificate"]), str(base / user["client-key"]))
    elif "client-certificate-data" in user and "client-key-data" in user:
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = Path(tmp, "cert.pem"), Path(tmp, "key.pem")
            cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
            key.write_bytes(base64.b64decode(user["client-key-data"]))
            ctx.load_cert_chain(str(cert), str(key))


def raise_for_status(resp: httpx.Response, method: str, path: str) -> None:
    """Map a non-2xx answer to the typed error tree (Status ``reason`` kept, message cut to 300 chars)."""
    code = resp.status_code
    if code < 400:
        return
    reason, message = "", ""
    causes: tuple[str, ...] = ()
    try:
        status = resp.json()
        if isinstance(status, dict) and status.get("kind") == "Status":
            reason, message = str(status.get("reason", "")), str(status.get("message", ""))[:300]
            found = (status.get("details") or {}).get("causes") or []
            causes = tuple(str(c.get("reason", "")) for c in found if isinstance(c, dict))
    except ValueError:
        pass
    text = f"{method} {path}: HTTP {code} {reason}: {message}".rstrip(": ")
    cls: type[KubeError]
    if code == 404:
        cls = KubeNotFound
    elif code == 409:
        cls = KubeConflict
    elif code == 410:
        cls = KubeGone
    elif code == 429 or code >= 500:
        raise KubeUnavailable(text, status_code=code, reason=reason, retry_after=_retry_after(resp))
    else:
        cls = KubeRejected
    raise cls(text, status_code=code, reason=reason, causes=causes)


def _retry_after(resp: httpx.Response) -> float | None:
    """``Retry-After`` in seconds (the API server sends seconds under load shedding), else None."""
    try:
        return max(0.0, float(resp.headers["Retry-After"]))
    except (KeyError, ValueError):
        return None


def rfc3339(t: float | None = None) -> str:
    """Kubernetes ``Time`` (Events, conditions): RFC 3339 in UTC with second precision; now by default."""
    return _utc(t).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(t: float | None = None) -> str:
    """Kubernetes ``MicroTime`` (Lease acquire and renew times): microsecond precision, required by the schema."""
    return _utc(t).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _utc(t: float | None) -> dt.datetime:
    return dt.datetime.now(dt.UTC) if t is None else dt.datetime.fromtimestamp(t, dt.UTC)


def pod_path(namespace: str, name: str | None = None, sub: str | None = None) -> str:
    path = f"/api/v1/namespaces/{namespace}/pods"
    if name:
        path += f"/{name}"
    if sub:
        path += f"/{sub}"
    return path


POOL_TIMEOUTS_BEFORE_RESET = 5
_closing: set[asyncio.Task[None]] = set()


class KubeClient:
    """One pooled async connection set to one API server."""

    def __init__(
        self,
        config: KubeConfig,
        *,
        timeout: float = 30.0,
        max_connections: int = 8,
        transport: httpx.AsyncBaseTransport | None = None,
        user_agent: str | None = None,
    ) -> None:
        headers = {"Accept": "application/json"}
        if user_agent:
            headers["User-Agent"] = user_agent  # the API server names managedFields entries after it
        if config.token:
            headers["Authorization"] = f"Bearer {config.token}"
        self.config = config

        def requests_client() -> httpx.AsyncClient:
            limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
            return httpx.AsyncClient(
                base_url=config.server,
                verify=config.ssl_context,
                headers=headers,
                timeout=httpx.Timeout(timeout, connect=5.0),
                limits=limits,
                # A small pool: httpcore walks every pooled connection (a readability syscall each) to place each
                # request and again when it ends; with 64 connections a burst spent a fifth of the worker's CPU
                # in that bookkeeping (py-spy). HTTP/2 was faster still, but its long watch streams stalled other
                # requests for tens of seconds against kube-apiserver 1.20 (measured), so it is not used.
                transport=transport or http.transport(verify=config.ssl_context, limits=limits),
            )

        self._requests_client = requests_client
        self._http = requests_client()
        self._pool_timeouts = 0
        self.pools_replaced = 0
        # Watches hold their connection for minutes: they get a pool of their own, so they neither take the
        # short requests' connections nor lengthen the walk above.
        streams = httpx.Limits(max_connections=None, max_keepalive_connections=16)
        self._streams = httpx.AsyncClient(
            base_url=config.server,
            verify=config.ssl_context,
            headers=headers,
            limits=streams,
            transport=transport or http.transport(verify=config.ssl_context, limits=streams),
        )

    @classmethod
    def from_kubeconfig(cls, path: str | Path | None = None, **kwargs: Any) -> KubeClient:
        return cls(load_kubeconfig(path), **kwargs)

    async def aclose(self) -> None:
        await self._http.aclose()
        await self._streams.aclose()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        decode: bool = True,
    ) -> Obj:
        """One API call; the answer parsed, or ``{}`` with ``decode=False`` (writes whose answer, the whole
        object, nobody reads: parsing a pod costs more CPU than sending the request)."""
        resp = await self._send(method, path, body=body, params=params, content_type=content_type)
        if not decode:
            return {}
        data = resp.json() if resp.content else {}
        return data if isinstance(data, dict) else {"items": data}

    async def get_text(self, path: str, params: Mapping[str, Any] | None = None) -> str:
        """A GET whose answer is text, not JSON: a container's log (``.../pods/<name>/log``)."""
        return (await self._send("GET", path, params=params)).text

    async def _send(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> httpx.Response:
        content = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if content is not None else None
        try:
            resp = await self._http.request(method, path, content=content, params=params, headers=headers)
        except httpx.TransportError as err:
            if isinstance(err, httpx.PoolTimeout):
                self._pool_wedged()
            raise KubeUnavailable(f"{method} {path}: {type(err).__name__}", status_code=None) from err
        self._pool_timeouts = 0
        raise_for_status(resp, method, path)
        return resp

    def _pool_wedged(self) -> None:
        """After ``POOL_TIMEOUTS_BEFORE_RESET`` pool timeouts in a row with no answer in between, start a new pool.

        A pool whose every connection stays taken although the API server answers others at once was seen once,
        after a 1,000-pod gang's calls were cancelled by their deadline: every later call of the process
        timed out waiting for a connection (GC, other lifecycles), for minutes, until a restart. The old pool's
        requests still in flight fail and are retried by their callers.
        """
        self._pool_timeouts += 1
        if self._pool_timeouts < POOL_TIMEOUTS_BEFORE_RESET:
            return
        logger.warning("Kubernetes client: %d pool timeouts in a row; starting a new pool", self._pool_timeouts)
        old, self._http = self._http, self._requests_client()
        self._pool_timeouts = 0
        self.pools_replaced += 1
        task = asyncio.get_running_loop().create_task(old.aclose())
        _closing.add(task)
        task.add_done_callback(_closing.discard)

    async def get(self, path: str, params: Mapping[str, Any] | None = None) -> Obj:
        return await self.request("GET", path, params=params)

    async def create(self, path: str, body: Obj, *, decode: bool = True) -> Obj:
        return await self.request("POST", path, body=body, decode=decode)

    async def patch(self, path: str, body: Any, patch_type: PatchType = "merge", *, decode: bool = True) -> Obj:
        return await self.request("PATCH", path, body=body, content_type=CONTENT_TYPES[patch_type], decode=decode)

    async def delete(
        self, path: str, *, grace_seconds: int | None = None, uid: str | None = None, decode: bool = True
    ) -> Obj:
        """Delete; a precondition on ``uid`` never deletes a newer object that reuses the name."""
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        if uid is not None:
            body["preconditions"] = {"uid": uid}
        return await self.request("DELETE", path, body=body, decode=decode)

    async def remove_finalizer(self, path: str, uid: str, finalizer: str, *, attempts: int = 5) -> bool:
        """Remove ``finalizer`` from the object at ``path`` if it is the one with ``uid``; True when a write
        removed it, False when there was nothing to remove (gone, replaced by a newer object, removed already).

        A JSON patch that tests the UID and the exact entry before removing it, so a repeat never writes and a
        concurrent change of the list is never overwritten. Not ``$deleteFromPrimitiveList``: before Kubernetes
        1.23 it ADDS the entry to an absent list (kubernetes#105146), so a repeated removal (a local activity
        run again after a failed workflow task) would put the finalizer back. The first try guesses that ours
        is the only finalizer (no read); when a test fails the object is read and the removal tried again.

        Raises:
            KubeConflict: The list kept changing under us for ``attempts`` tries.
        """
        index = 0
        for _ in range(attempts):
            entry = f"/metadata/finalizers/{index}"
            patch = [
                {"op": "test", "path": "/metadata/uid", "value": uid},
                {"op": "test", "path": entry, "value": finalizer},
                {"op": "remove", "path": entry},
            ]
            try:
                await self.patch(path, patch, patch_type="json", decode=False)
                return True
            except KubeNotFound:
                return False
            except KubeRejected as err:
                if err.status_code != 422:  # 422: a test failed (another UID, or the list is not as guessed)
                    raise
            try:
                obj = await self.get(path)
            except KubeNotFound:
                return False
            meta = obj.get("metadata") or {}
            finalizers = meta.get("finalizers") or []
            if meta.get("uid") != uid or finalizer not in finalizers:
                return False
            index = finalizers.index(finalizer)
        raise KubeConflict(f"PATCH {path}: finalizer {finalizer} kept moving", status_code=409)

    async def watch(self, path: str, params: Mapping[str, Any] | None = None) -> AsyncIterator[Obj]:
        """Yield watch events (``{"type": ..., "object": ...}``) until the server closes the stream.

        An in-stream ERROR event with code 410 raises KubeGone, like a 410 answer: the caller relists.
        """
        query = {**(params or {}), "watch": "true", "allowWatchBookmarks": "true"}
        try:
            async with self._streams.stream("GET", path, params=query, timeout=httpx.Timeout(None, connect=5.0)) as r:
                if r.status_code >= 400:
                    await r.aread()
                    raise_for_status(r, "WATCH", path)
                async for line in r.aiter_lines():
                    if not line:
                        continue
                    event: Obj = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        code = int(status.get("code") or 500)
                        if code == 410:
                            raise KubeGone(f"WATCH {path}: 410 Expired", status_code=410, reason="Expired")
                        raise KubeUnavailable(f"WATCH {path}: error event {code}", status_code=code)
                    yield event
        except httpx.TransportError as err:
            raise KubeUnavailable(f"WATCH {path}: {type(err).__name__}", status_code=None) from err

    async def list_all(self, path: str, params: Mapping[str, Any] | None = None, *, page_size: int = 500) -> Obj:
        """A whole collection, read in pages of ``page_size``: one listing, items of every page, the
        resourceVersion of the list (to watch from)."""
        query: dict[str, Any] = {**(params or {}), "limit": page_size}
        listing = await self.get(path, query)
        items = list(listing.get("items") or [])
        while cont := (listing.get("metadata") or {}).get("continue"):
            listing = await self.get(path, {**query, "continue": cont})
            items.extend(listing.get("items") or [])
        return {**listing, "items": items}

    async def list_watch(
        self, path: str, params: Mapping[str, Any] | None = None, *, timeout_seconds: int = 300
    ) -> AsyncIterator[tuple[str, Obj]]:
        """Yield ``("SYNC", listing)`` after every (re)list, then ``(event type, object)`` for each change.

        The informer loop every watcher of ours needs, written once:

        * a watch that ends is resumed from the last resourceVersion, and a dropped connection too;
        * 410 Gone, or any answer that refuses the watch, relists (after a backoff, for the refusals:
          RBAC being set up, a resourceVersion from before an etcd wipe);
        * a watch that delivered nothing at all, not even a bookmark, relists: a 1.20 server silently never
          answers a watch from a resourceVersion it has not reached (etcd wiped under us), so a quiet
          watch bounds that blindness to one ``timeout_seconds``;
        * bookmarks only advance the resourceVersion.
        """
        rv = ""
        backoff = 0.5
        while True:
            try:
                if not rv:
                    listing = await self.list_all(path, params)
                    rv = listing["metadata"]["resourceVersion"]
                    yield "SYNC", listing
                query = {**(params or {}), "resourceVersion": rv, "timeoutSeconds": timeout_seconds}
                delivered = 0
                async for event in self.watch(path, query):
                    delivered += 1
                    obj = event["object"]
                    rv = obj["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        yield event["type"], obj
                if not delivered:
                    rv = ""
                backoff = 0.5
            except KubeGone:
                rv = ""
            except (KubeError, ValueError) as err:
                dropped = isinstance(err, KubeUnavailable) and err.status_code is None
                if not dropped:
                    rv = ""  # refused (or a garbled stream): relist rather than insist
                logger.warning(
                    "watch %s failed: %s; %s in %.1fs", path, err, "resuming" if dropped else "relisting", backoff
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
