"""The bridge's admission webhook server: HTTPS, ``POST /mutate``, ``POST /validate``, ``GET /healthz``.

``python -m workers.bridge.webhook --cert C --key K [--port 16444] [--bind 127.0.0.1]``. The managed scope
comes from ``Settings().bridge`` (``SLINKY_BRIDGE__*``) unless a flag overrides it. The rules live in
``slinky.bridge.admission`` (pure); this module only speaks HTTP and TLS, with the standard library: one
thread per connection, TLS handshakes in that thread, keep-alive for the API server's pooled
connections, and the serving certificate reloaded when its files change (cert-manager rotation). Logs are
JSON lines, one per review.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any, Final
from urllib.parse import urlsplit

from slinky.bridge import admission
from slinky.config import Settings
from slinky.telemetry import configure_logging

log = logging.getLogger("slinky.webhook")

DEFAULT_PORT: Final = 16444
MAX_BODY: Final = 8 * 1024 * 1024
"""The API server's request limit is 3 MiB per object; a review carries two."""
IDLE_SECONDS: Final = 90.0
ROUTES: Final[dict[str, tuple[admission.Kind, bool]]] = {
    "/mutate": ("mutate", False),
    "/mutate/managed": ("mutate", True),
    "/validate": ("validate", False),
    "/validate/managed": ("validate", True),
}


class ServingCert:
    """The serving certificate, reloaded when its files change (cert-manager rotating the Secret, whose
    mounted files the kubelet swaps in place): new connections get the new certificate, no restart.

    The files are looked at (two ``stat`` calls) at most once per ``check_seconds``. A pair that does not
    load (a rotation caught half-written, a key that does not match) keeps the previous context and is
    tried again at the next check; the warning says why.
    """

    def __init__(self, cert: str, key: str, *, check_seconds: float = 1.0) -> None:
        self.cert, self.key = cert, key
        self.check_seconds = check_seconds
        self._lock = threading.Lock()
        self._checked = time.monotonic()
        self._signature = self._stat()
        self._context = self._load()  # a bad pair at start is fatal: better than serving nothing
        self.reloads = 0

    def _stat(self) -> tuple[tuple[int, int, int], ...]:
        out = []
        for path in (self.cert, self.key):
            st = os.stat(path)
            out.append((st.st_mtime_ns, st.st_ino, st.st_size))
        return tuple(out)

    def _load(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert, self.key)
        return context

    def context(self) -> ssl.SSLContext:
        now = time.monotonic()
        if now - self._checked < self.check_seconds:
            return self._context
        with self._lock:
            if now - self._checked < self.check_seconds:
                return self._context
            self._checked = now
            try:
                signature = self._stat()
                if signature != self._signature:
                    self._context = self._load()
                    self._signature = signature
                    self.reloads += 1
                    log.info("serving certificate reloaded", extra={"cert": self.cert})
            except (OSError, ssl.SSLError) as err:
                log.warning("serving certificate not reloaded (keeping the previous one): %s", err)
            return self._context


class WebhookServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], settings: admission.AdmissionSettings, cert: ServingCert) -> None:
        super().__init__(address, WebhookHandler)
        self.settings = settings
        self.cert = cert

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = super().get_request()
        # The handshake runs at the first read, in the connection's own thread: a slow client cannot
        # stall accept().
        sock.settimeout(IDLE_SECONDS)
        # Headers and body leave in one write (``wbufsize``), and never wait for the peer's delayed ACK:
        # without both, Nagle's algorithm held each answer about 20 ms (45 ms per pod create, measured).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self.cert.context().wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        err = sys.exc_info()[1]
        if isinstance(err, (ssl.SSLError, ConnectionError, TimeoutError)):
            log.debug("connection from %s dropped: %s", client_address, err)
            return
        log.exception("connection from %s failed", client_address)


class WebhookHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = 64 * 1024  # buffered: handle_one_request flushes once per response
    server: WebhookServer
    server_version = "slinky-webhook"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.client_address[0], *args)

    def do_GET(self) -> None:
        if urlsplit(self.path).path in ("/healthz", "/readyz", "/livez"):
            self._send(200, b"ok\n", "text/plain")
        else:
            self._send(404, b"not found\n", "text/plain")

    def do_POST(self) -> None:
        started = time.perf_counter()
        url = urlsplit(self.path)
        # /mutate and /validate; .../managed when the API server matched the managed namespace selector.
        kind, managed = ROUTES.get(url.path.rstrip("/"), (None, False))
        length = int(self.headers.get("Content-Length") or 0)
        if kind is None:
            self._drain(length)
            self._send(404, b"not found\n", "text/plain")
            return
        if not 0 < length <= MAX_BODY:
            self.close_connection = True
            self._send(413 if length else 411, b"bad request body length\n", "text/plain")
            return
        try:
            body = json.loads(self.rfile.read(length))
            answer = admission.review(
                body,
                self.server.settings,
                kind=kind,
                namespace_managed=managed,
            )
        except ValueError as err:
            log.warning("bad admission request: %s", err, extra={"path": url.path})
            self._send(400, f"{err}\n".encode(), "text/plain")
            return
        self._send(200, json.dumps(answer, separators=(",", ":")).encode(), "application/json")
        _log_review(kind, body, answer, managed, time.perf_counter() - started)

    def _drain(self, length: int) -> None:
        if 0 < length <= MAX_BODY:
            self.rfile.read(length)
        else:
            self.close_connection = True

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _log_review(kind: str, body: dict[str, Any], answer: dict[str, Any], managed: bool, seconds: float) -> None:
    request = body.get("request") or {}
    response = answer["response"]
    obj = request.get("object") or {}
    extra: dict[str, Any] = {
        "webhook": kind,
        "uid": request.get("uid"),
        "operation": request.get("operation"),
        "sub_resource": request.get("subResource") or None,
        "namespace": request.get("namespace"),
        "pod": request.get("name")
        or (obj.get("metadata") or {}).get("name")
        or (obj.get("metadata") or {}).get("generateName"),
        "user": (request.get("userInfo") or {}).get("username"),
        "scope_managed": managed,
        "allowed": response["allowed"],
        "patched": "patch" in response,
        "ms": round(seconds * 1000, 2),
    }
    if not response["allowed"]:
        extra["reason"] = response["status"]["message"]
        log.info("denied", extra=extra)
    else:
        log.info("allowed", extra=extra)


def settings_from(args: argparse.Namespace) -> admission.AdmissionSettings:
    bridge = Settings().bridge
    namespaces = args.managed_namespace or bridge.managed_namespaces
    selector = args.managed_namespace_selector
    if selector is None:  # an explicit "" means: no selector, use the list
        selector = bridge.managed_namespace_selector
    if selector:
        admission.parse_selector(selector)  # fail at start, not on the first request
    users = frozenset({admission.BRIDGE_SERVICE_ACCOUNT, *(args.bridge_username or [])})
    return admission.AdmissionSettings(
        scheduler_name=args.scheduler_name or bridge.scheduler_name,
        managed_namespaces=tuple(namespaces),
        managed_namespace_selector=selector or None,
        bridge_usernames=users,
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workers.bridge.webhook", description=__doc__.splitlines()[0])
    parser.add_argument("--cert", required=True, help="PEM serving certificate (chain) file")
    parser.add_argument("--key", required=True, help="PEM private key file")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--bind", default="127.0.0.1", help="address to listen on (0.0.0.0 in a pod)")
    parser.add_argument("--scheduler-name", help="default: SLINKY_BRIDGE__SCHEDULER_NAME")
    parser.add_argument(
        "--managed-namespace", action="append", help="repeatable; default: SLINKY_BRIDGE__MANAGED_NAMESPACES"
    )
    parser.add_argument(
        "--managed-namespace-selector", help="label selector; overrides the namespace list (must match registration)"
    )
    parser.add_argument(
        "--bridge-username",
        action="append",
        help=f"repeatable: users besides {admission.BRIDGE_SERVICE_ACCOUNT} allowed to change the jobid label",
    )
    return parser.parse_args(argv)


def serve(args: argparse.Namespace) -> None:
    settings = settings_from(args)
    server = WebhookServer((args.bind, args.port), settings, ServingCert(args.cert, args.key))

    def stop(signum: int, _frame: FrameType | None) -> None:
        log.info("stopping on signal %d", signum)
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info(
        "webhook listening",
        extra={
            "address": f"https://{args.bind}:{args.port}",
            "scheduler_name": settings.scheduler_name,
            "managed_namespaces": list(settings.managed_namespaces),
            "managed_namespace_selector": settings.managed_namespace_selector,
            "bridge_usernames": sorted(settings.bridge_usernames),
        },
    )
    with server:
        server.serve_forever(poll_interval=0.5)


def main(argv: Sequence[str] | None = None) -> None:
    telemetry = Settings().telemetry.model_copy(update={"log_json": True})
    configure_logging(telemetry)
    serve(parse_args(argv))


if __name__ == "__main__":
    main()
