"""The operator's external metrics API server (``external.metrics.k8s.io/v1beta1``), behind the apiserver's
aggregation layer, so a stock HorizontalPodAutoscaler scales NodeSets on Slurm's metrics (docs/autoscaling.md).

The apiserver proxies ``/apis/external.metrics.k8s.io/v1beta1/...`` here over TLS (the APIService
``v1beta1.external.metrics.k8s.io``), presenting its front-proxy client certificate and the caller in request
headers. As any extension apiserver, this one:

* reads ConfigMap ``kube-system/extension-apiserver-authentication`` for the front proxy's CA, its allowed
  names and header names, and trusts the headers only on a connection whose client certificate that CA signed
  (with an allowed name): anything else is 401;
* asks the apiserver whether the caller may ``list`` the metric in the namespace (a SubjectAccessReview; the
  answer kept 10 s): a refusal is 403;
* answers discovery (every metric served now) and ``namespaces/<ns>/<metric>?labelSelector=...`` with the
  samples of the operator's last metrics round (``slinky.operator.external_metrics``); it never calls Slurm.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from slinky.clients.errors import KubeError
from slinky.clients.kube import KubeClient, rfc3339
from slinky.operator import external_metrics as em
from slinky.operator import slurm_metrics
from slinky.operator.slurm_metrics import Family

logger = logging.getLogger(__name__)
Obj = dict[str, Any]

AUTH_CONFIGMAP = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
DECISION_SECONDS = 10.0
_HEAD_TIMEOUT = 30.0
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found"}


@dataclass
class FrontProxy:
    """Who may speak for callers: the front proxy's CA and names, and the headers it uses."""

    ca_pem: str
    allowed_names: list[str] = field(default_factory=list)
    user_headers: list[str] = field(default_factory=lambda: ["X-Remote-User"])
    group_headers: list[str] = field(default_factory=lambda: ["X-Remote-Group"])


async def read_front_proxy(kube: KubeClient) -> FrontProxy:
    """From ConfigMap kube-system/extension-apiserver-authentication (the apiserver writes it from its
    ``--requestheader-*`` flags)."""
    data = (await kube.get(AUTH_CONFIGMAP)).get("data") or {}
    ca = data.get("requestheader-client-ca-file") or ""
    if not ca:
        raise RuntimeError(
            "the apiserver has no aggregation layer: extension-apiserver-authentication names no "
            "requestheader-client-ca-file (start it with --requestheader-client-ca-file and --proxy-client-cert-file)"
        )

    def names(key: str, default: list[str]) -> list[str]:
        with contextlib.suppress(ValueError, TypeError):
            value = json.loads(data.get(key) or "null")
            if isinstance(value, list):
                return [str(v) for v in value] or default
        return default

    return FrontProxy(
        ca_pem=ca,
        allowed_names=names("requestheader-allowed-names", []),
        user_headers=names("requestheader-username-headers", ["X-Remote-User"]),
        group_headers=names("requestheader-group-headers", ["X-Remote-Group"]),
    )


def server_context(cert_file: str, key_file: str, proxy: FrontProxy) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    ctx.load_verify_locations(cadata=proxy.ca_pem)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def _common_name(peer: Any) -> str:
    for rdn in (peer or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""


def status(code: int, message: str) -> Obj:
    reason = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound"}.get(code, "InternalError")
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}  # fmt: skip


class ExternalMetricsServer:
    """Serves the families that ``families()`` returns (the operator's last metrics rounds)."""

    def __init__(self, kube: KubeClient, families: Callable[[], Sequence[Family]], proxy: FrontProxy) -> None:
        self.kube = kube
        self.families = families
        self.proxy = proxy
        self._decisions: dict[tuple[str, tuple[str, ...], str, str], tuple[float, bool]] = {}
        self.requests = 0

    async def serve(self, address: str, port: int, cert_file: str, key_file: str) -> asyncio.Server:
        return await asyncio.start_server(
            self._connection,
            address,
            port,
            ssl=server_context(cert_file, key_file, self.proxy),
            ssl_handshake_timeout=10,
            reuse_address=True,
        )

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peercert")
        try:
            while True:  # keep-alive: the aggregator reuses its connections
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_TIMEOUT)
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, target = [*lines[0].split(" "), "", ""][:2]
                headers: dict[str, list[str]] = {}
                for line in lines[1:]:
                    name, sep, value = line.partition(":")
                    if sep:
                        headers.setdefault(name.strip().lower(), []).append(value.strip())
                code, body = await self.answer(method, target, headers, peer)
                data = json.dumps(body).encode()
                reply = f"HTTP/1.1 {code} {_REASONS.get(code, 'Error')}\r\nContent-Type: application/json\r\n"
                writer.write(reply.encode() + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            return
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError, TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), 2)

    async def answer(self, method: str, target: str, headers: dict[str, list[str]], peer: Any) -> tuple[int, Obj]:
        """(HTTP status, JSON body) of one request."""
        self.requests += 1
        parts = urlsplit(target)
        path = parts.path.rstrip("/")
        if path in ("/healthz", "/readyz", "/livez"):
            return 200, {"status": "ok"}
        if method != "GET":
            return 404, status(404, f"{method} {path} is not served")
        if not peer or (self.proxy.allowed_names and _common_name(peer) not in self.proxy.allowed_names):
            return 401, status(401, "only the apiserver's front proxy may call this server")
        user = next((v for h in self.proxy.user_headers for v in headers.get(h.lower(), [])), "")
        groups = tuple(v for h in self.proxy.group_headers for v in headers.get(h.lower(), []))
        if not user:
            return 401, status(401, "the front proxy named no user")
        base = f"/apis/{em.GROUP_VERSION}"
        families = self.families()
        if path in (f"/apis/{em.GROUP}", base):
            if path == base:
                return 200, em.resource_list({*slurm_metrics.metric_names(), *(f.name for f in families)})
            version = {"groupVersion": em.GROUP_VERSION, "version": em.VERSION}
            return 200, {"kind": "APIGroup", "apiVersion": "v1", "name": em.GROUP, "versions": [version],
                         "preferredVersion": version}  # fmt: skip
        pieces = [unquote(p) for p in path[len(base) :].split("/") if p] if path.startswith(base + "/") else []
        if len(pieces) != 3 or pieces[0] != "namespaces":
            return 404, status(404, f"{path} is not served (want {base}/namespaces/<namespace>/<metric>)")
        namespace, metric = pieces[1], pieces[2]
        if not await self._allowed(user, groups, namespace, metric):
            message = (
                f'user "{user}" cannot list resource "{metric}" in API group "{em.GROUP}" in namespace "{namespace}"'
            )
            return 403, status(403, message)
        selector = (parse_qs(parts.query).get("labelSelector") or [""])[0]
        try:
            body = em.value_list(families, metric, namespace, selector, rfc3339())
        except em.SelectorError as err:
            return 400, status(400, str(err))
        return 200, body

    async def _allowed(self, user: str, groups: tuple[str, ...], namespace: str, metric: str) -> bool:
        key = (user, groups, namespace, metric)
        cached = self._decisions.get(key)
        if cached is not None and time.monotonic() - cached[0] < DECISION_SECONDS:
            return cached[1]
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": list(groups),
                "resourceAttributes": {
                    "group": em.GROUP,
                    "version": em.VERSION,
                    "resource": metric,
                    "namespace": namespace,
                    "verb": "list",
                },
            },
        }
        try:
            answer = await self.kube.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
        except KubeError as err:
            logger.warning("SubjectAccessReview of %s failed: %s", user, err)
            return False
        allowed = bool((answer.get("status") or {}).get("allowed"))
        now = time.monotonic()
        # Keep only live decisions: the callers are few, but their namespaces and metrics are not bounded.
        self._decisions = {k: v for k, v in self._decisions.items() if now - v[0] < DECISION_SECONDS}
        self._decisions[key] = (now, allowed)
        return allowed
