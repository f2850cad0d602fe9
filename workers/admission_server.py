"""The admission webhooks' HTTPS server, shared by the bridge's (``workers.bridge.webhook``) and the operator's
(``workers.operator.webhook``): ``POST`` of an AdmissionReview to a route, ``GET /healthz``. Standard library
only: one thread per connection, TLS handshakes in that thread, keep-alive for the API server's pooled
connections, and the serving certificate reloaded when its files change (cert-manager rotation, or a chart's
Secret updated). What a route answers is the caller's ``handle``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Container
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any, Final
from urllib.parse import urlsplit

log = logging.getLogger("slinky.webhook")

MAX_BODY: Final = 8 * 1024 * 1024
"""The API server's request limit is 3 MiB per object; a review carries two."""
IDLE_SECONDS: Final = 90.0

Handle = Callable[[str, dict[str, Any]], dict[str, Any]]
"""(route, the AdmissionReview) -> the answer; ValueError: a bad request (400)."""


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


class AdmissionServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], cert: ServingCert, routes: Container[str], handle: Handle) -> None:
        super().__init__(address, AdmissionHandler)
        self.cert = cert
        self.routes = routes
        self.handle = handle

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


class AdmissionHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = 64 * 1024  # buffered: handle_one_request flushes once per response
    server: AdmissionServer
    server_version = "slinky-webhook"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.client_address[0], *args)

    def do_GET(self) -> None:
        if urlsplit(self.path).path in ("/healthz", "/readyz", "/livez"):
            self._send(200, b"ok\n", "text/plain")
        else:
            self._send(404, b"not found\n", "text/plain")

    def do_POST(self) -> None:
        route = urlsplit(self.path).path.rstrip("/")
        length = int(self.headers.get("Content-Length") or 0)
        if route not in self.server.routes:
            self._drain(length)
            self._send(404, b"not found\n", "text/plain")
            return
        if not 0 < length <= MAX_BODY:
            self.close_connection = True
            self._send(413 if length else 411, b"bad request body length\n", "text/plain")
            return
        try:
            answer = self.server.handle(route, json.loads(self.rfile.read(length)))
        except ValueError as err:
            log.warning("bad admission request: %s", err, extra={"path": route})
            self._send(400, f"{err}\n".encode(), "text/plain")
            return
        self._send(200, json.dumps(answer, separators=(",", ":")).encode(), "application/json")

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


def serve_until_signalled(server: AdmissionServer) -> None:
    """Serve until SIGTERM or SIGINT, then stop accepting and return (in-flight reviews finish)."""

    def stop(signum: int, _frame: FrameType | None) -> None:
        log.info("stopping on signal %d", signum)
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    with server:
        server.serve_forever(poll_interval=0.5)
