"""The kubelet's log endpoint for the development stack: what ``kubectl logs`` reaches through the apiserver (and,
through ``kubelet_exec``, what ``kubectl exec`` reaches).

No kubelet runs in the development stack; the node agent plays it for Node objects and runs some pods as real
processes whose output goes to log files. ``kubectl logs POD`` makes kube-apiserver call the pod's node::

    GET https://<node address>:<daemonEndpoints.kubeletEndpoint.Port>/containerLogs/<ns>/<pod>/<container>?<query>

This module serves exactly that (plus ``/healthz``) over TLS from a pluggable lookup ``(namespace, pod,
container) -> log file``. The query is the kubelet's (v1 ``PodLogOptions``, as kube-apiserver 1.20's
``LogLocation`` builds it): ``follow``, ``previous``, ``timestamps``, ``sinceSeconds``, ``sinceTime`` (RFC 3339),
``tailLines``, ``limitBytes``, and the legacy ``tail`` (``all`` = no limit). Booleans decode as the apiserver's
parameter codec does: absent, ``false`` (any case) or ``0`` is false, anything else (even empty) is true. Unknown
parameters (``stream`` of newer apiservers, say) are ignored. An integer or time that does not parse is refused
with 400 (the kubelet's "Unable to decode query"); a parsed value that ``ValidatePodLogOptions`` refuses
(negative ``tailLines``, ``limitBytes`` or ``sinceSeconds`` below 1, both ``since*``) with 422, as the kubelet does.

Honest deviations from a kubelet, because our logs are plain files written by the processes themselves:

* ``timestamps=true`` prefixes each line with the time *this server read it* (RFC 3339, UTC, microseconds), not
  the time it was written: the files carry no per-line times. For the existing content that is "now"; for lines
  that ``follow`` picks up it is within one poll interval (0.2 s) of the write.
* ``sinceSeconds``/``sinceTime`` cannot select lines either: when the file was last modified before the cutoff,
  none of its existing content is sent (nothing was written since); otherwise all of it is (then ``tailLines``
  and ``limitBytes`` still apply). ``follow`` streams what is appended afterwards in both cases.
* ``follow=true`` streams appended bytes (polling every 0.2 s; a truncated or replaced file is read again from
  its start) until the client disconnects, ``limitBytes`` is reached, the server is closed, or the optional
  ``running`` callback says the container has stopped (then what is left is sent and the stream ends, as a
  kubelet ends it when the container exits). Without ``running`` it never ends by itself.
* ``previous=true`` is served from the optional ``previous`` lookup; without one (or when it returns None) the
  answer is the kubelet's 400 ``previous terminated container "c" in pod "p" not found``, which kube-apiserver
  relays to kubectl verbatim as a BadRequest.

The lookup returning None answers 404; a lookup may instead raise :class:`LogError` with any status and text
(a kubelet answers 400 ``container "c" in pod "p" is waiting to start: ContainerCreating``, for instance).
Lookups run on the event loop: they must be quick (an in-memory map, one small file read).

There is no authentication or authorization: kube-apiserver presents no client certificate unless started with
``--kubelet-client-certificate``/``--kubelet-client-key``, and without ``--kubelet-certificate-authority`` it
does not verify this server's self-signed certificate. Bind it to loopback only.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import fcntl
import logging
import os
import re
import ssl
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final
from urllib.parse import parse_qs, unquote, urlsplit

from slinky.dev import kubelet_exec

log = logging.getLogger(__name__)

Lookup = Callable[[str, str, str], Path | None]
"""(namespace, pod, container) -> the container's log file, or None when this node has none."""
Running = Callable[[str, str, str], bool]
"""(namespace, pod, container) -> whether the container still runs (a follow ends once it does not)."""

POLL_INTERVAL: Final = 0.2
CERT_FILE: Final = "kubelet.crt"
KEY_FILE: Final = "kubelet.key"
_CHUNK: Final = 64 * 1024
_MAX_HEAD: Final = 64 * 1024
_HEAD_TIMEOUT: Final = 30.0
_RUNNING_EVERY: Final = 1.0
_INT64 = re.compile(r"[+-]?[0-9]+")
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")
_REASONS: Final = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    422: "Unprocessable Entity",
    403: "Forbidden",
    500: "Internal Server Error",
}


class LogError(kubelet_exec.ExecError):
    """A request this server answers with an error: an HTTP status and a plain-text body (as the kubelet)."""


@dataclass(frozen=True)
class LogRequest:
    """One ``/containerLogs`` request: the path's names and the kubelet's ``PodLogOptions``."""

    namespace: str
    pod: str
    container: str
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    since_seconds: int | None = None
    since_time: dt.datetime | None = None
    tail_lines: int | None = None
    limit_bytes: int | None = None

    def since(self, now: dt.datetime) -> dt.datetime | None:
        """The cutoff ``sinceSeconds``/``sinceTime`` ask for, if any."""
        if self.since_time is not None:
            return self.since_time
        if self.since_seconds is not None:
            return now - dt.timedelta(seconds=self.since_seconds)
        return None


# -- pure parts ------------------------------------------------------------------------------------------------


def _q(value: str) -> str:
    """Go's %q, near enough for names: a double-quoted string."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _bool(query: dict[str, list[str]], key: str) -> bool:
    values = query.get(key)
    if not values:
        return False
    return not (values[0] == "0" or values[0].lower() == "false")


def _int(query: dict[str, list[str]], key: str) -> int | None:
    values = query.get(key)
    if not values:
        return None
    value = values[0]
    if not _INT64.fullmatch(value) or not -(2**63) <= int(value) < 2**63:
        raise LogError(400, f"Unable to decode query: {key}={_q(value)} is not an integer")
    return int(value)


def _time(query: dict[str, list[str]], key: str) -> dt.datetime | None:
    values = query.get(key)
    if not values or values[0] in ("", "null"):
        return None
    value = values[0]
    if not _RFC3339.fullmatch(value):
        raise LogError(400, f"Unable to decode query: {key}={_q(value)} is not an RFC 3339 time")
    try:
        return dt.datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:
        raise LogError(400, f"Unable to decode query: {key}={_q(value)} is not an RFC 3339 time") from None


def parse_request(path_with_query: str) -> LogRequest:
    """``/containerLogs/{namespace}/{pod}/{container}?query`` -> LogRequest; raises LogError (400, 404, 422)."""
    parts = urlsplit(path_with_query)
    segments = parts.path.split("/")
    if len(segments) != 5 or segments[0] != "" or segments[1] != "containerLogs":
        raise LogError(404, "404 page not found")
    namespace, pod, container = (unquote(s) for s in segments[2:])
    for what, value in (("podNamespace", namespace), ("podID", pod), ("container name", container)):
        if not value:
            raise LogError(400, f'{{"message": "Missing {what}."}}')
    query = parse_qs(parts.query, keep_blank_values=True)
    if tail := query.get("tail", [""])[0]:  # the kubelet's backwards-compatible spelling of tailLines
        query["tailLines"] = [tail]
        if tail == "all":
            del query["tailLines"]
    request = LogRequest(
        namespace=namespace,
        pod=pod,
        container=container,
        follow=_bool(query, "follow"),
        previous=_bool(query, "previous"),
        timestamps=_bool(query, "timestamps"),
        since_seconds=_int(query, "sinceSeconds"),
        since_time=_time(query, "sinceTime"),
        tail_lines=_int(query, "tailLines"),
        limit_bytes=_int(query, "limitBytes"),
    )
    problems = []
    if request.tail_lines is not None and request.tail_lines < 0:
        problems.append("tailLines: must be greater than or equal to 0")
    if request.limit_bytes is not None and request.limit_bytes < 1:
        problems.append("limitBytes: must be greater than 0")
    if request.since_seconds is not None and request.since_time is not None:
        problems.append("at most one of `sinceTime` or `sinceSeconds` may be specified")
    elif request.since_seconds is not None and request.since_seconds < 1:
        problems.append("sinceSeconds: must be greater than 0")
    if problems:
        raise LogError(422, "Invalid request: " + "; ".join(problems))
    return request


def tail_start(data: bytes, lines: int) -> int:
    """Where the last ``lines`` lines of ``data`` begin (a final line without a newline counts as a line)."""
    if lines <= 0:
        return len(data)
    pos = len(data) - 1 if data.endswith(b"\n") else len(data)
    for _ in range(lines):
        found = data.rfind(b"\n", 0, pos)
        if found < 0:
            return 0
        pos = found
    return pos + 1


def tail(data: bytes, lines: int | None = None, limit: int | None = None) -> bytes:
    """The last ``lines`` lines of ``data`` (None: all), then at most the first ``limit`` bytes of those."""
    if lines is not None:
        data = data[tail_start(data, lines) :]
    if limit is not None:
        data = data[: max(limit, 0)]
    return data


def timestamp(now: dt.datetime) -> bytes:
    """The prefix ``timestamps=true`` puts before a line: RFC 3339 UTC with microseconds, and a space."""
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ ").encode()


class Stamper:
    """Prefixes every line of a byte stream, fed in arbitrary pieces, with the time given for its piece."""

    def __init__(self) -> None:
        self._at_line_start = True

    def feed(self, data: bytes, now: dt.datetime) -> bytes:
        if not data:
            return b""
        stamp = timestamp(now)
        lines = data.split(b"\n")
        out = [stamp + lines[0] if self._at_line_start else lines[0]]
        out.extend(stamp + line for line in lines[1:-1])
        if len(lines) > 1:
            out.append(stamp + lines[-1] if lines[-1] else b"")
        self._at_line_start = data.endswith(b"\n")
        return b"\n".join(out)


# -- files -----------------------------------------------------------------------------------------------------


def _tail_offset(f: BinaryIO, size: int, lines: int) -> int:
    """The file offset where its last ``lines`` lines begin, reading backwards in blocks."""
    if lines <= 0:
        return size
    start = size
    buf = b""
    while start > 0:
        start = max(start - _CHUNK, 0)
        f.seek(start)
        buf = f.read(size - start)
        newlines = buf.count(b"\n") - (1 if buf.endswith(b"\n") else 0)
        if newlines >= lines:
            break
    return start + tail_start(buf, lines)


class _Follower:
    """An open log file read from an offset onwards; notices truncation and replacement (by inode)."""

    def __init__(self, path: Path, f: BinaryIO, offset: int) -> None:
        self.path = path
        self.f = f
        self.offset = offset
        self.ino = os.fstat(f.fileno()).st_ino

    def read(self, size: int = _CHUNK) -> bytes:
        try:
            st = os.stat(self.path)
        except OSError:
            st = None
        if st is not None and st.st_ino != self.ino:  # replaced: finish the old file, then start the new one
            rest = self._read_current(size)
            if rest:
                return rest
            self.f.close()
            self.f = self.path.open("rb")
            self.ino = os.fstat(self.f.fileno()).st_ino
            self.offset = 0
        elif os.fstat(self.f.fileno()).st_size < self.offset:  # truncated
            self.offset = 0
        return self._read_current(size)

    def _read_current(self, size: int) -> bytes:
        self.f.seek(self.offset)
        data = self.f.read(size)
        self.offset += len(data)
        return data

    def close(self) -> None:
        self.f.close()


# -- HTTP ------------------------------------------------------------------------------------------------------


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _reply(writer: asyncio.StreamWriter, status: int, body: str) -> None:
    data = body.encode()
    headers = {
        "Content-Type": "text/plain; charset=utf-8",
        "Content-Length": str(len(data)),
        "Connection": "close",
    }
    writer.write(_head(status, headers) + data)
    await writer.drain()


class _Stream:
    """A chunked 200 response that honours ``timestamps`` and ``limitBytes``."""

    def __init__(self, writer: asyncio.StreamWriter, request: LogRequest) -> None:
        self.writer = writer
        self.stamper = Stamper() if request.timestamps else None
        self.remaining = request.limit_bytes
        self.started = False

    @property
    def full(self) -> bool:
        return self.remaining is not None and self.remaining <= 0

    async def send(self, data: bytes) -> None:
        if not self.started:
            self.started = True
            headers = {
                "Content-Type": "text/plain; charset=utf-8",
                "Transfer-Encoding": "chunked",
                "Connection": "close",
            }
            self.writer.write(_head(200, headers))
        if self.stamper is not None:
            data = self.stamper.feed(data, dt.datetime.now(dt.UTC))
        if self.remaining is not None:
            data = data[: max(self.remaining, 0)]
            self.remaining -= len(data)
        if data:
            self.writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        await self.writer.drain()

    async def finish(self) -> None:
        if not self.started:
            await self.send(b"")
        self.writer.write(b"0\r\n\r\n")
        await self.writer.drain()


@dataclass
class _Config:
    lookup: Lookup
    previous: Lookup | None
    running: Running | None
    poll_interval: float
    server: asyncio.Server | None = None
    exec_argv: kubelet_exec.ArgvFor | None = None


def _log_path(config: _Config, request: LogRequest) -> Path:
    names = (request.namespace, request.pod, request.container)
    if request.previous:
        path = config.previous(*names) if config.previous is not None else None
        if path is None:
            raise LogError(
                400, f"previous terminated container {_q(request.container)} in pod {_q(request.pod)} not found"
            )
        return path
    path = config.lookup(*names)
    if path is None:
        raise LogError(
            404,
            f"container {_q(request.container)} in pod {_q(request.pod)} (namespace {_q(request.namespace)}) "
            "has no log on this node",
        )
    return path


def _open_at_start(path: Path, request: LogRequest) -> tuple[BinaryIO, int]:
    """The open file and the offset its answer starts at (after ``since*`` and ``tailLines``)."""
    f = path.open("rb")
    try:
        st = os.fstat(f.fileno())
        size = st.st_size
        cutoff = request.since(dt.datetime.now(dt.UTC))
        if cutoff is not None and dt.datetime.fromtimestamp(st.st_mtime, dt.UTC) < cutoff:
            return f, size  # nothing written since the cutoff
        if request.tail_lines is not None:
            return f, _tail_offset(f, size, request.tail_lines)
        return f, 0
    except BaseException:
        f.close()
        raise


async def _serve_logs(
    config: _Config, request: LogRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    path = _log_path(config, request)
    try:
        f, offset = _open_at_start(path, request)
    except FileNotFoundError:
        raise LogError(
            404, f"log file of container {_q(request.container)} in pod {_q(request.pod)} not found"
        ) from None
    follower = _Follower(path, f, offset)
    stream = _Stream(writer, request)
    try:
        size = os.fstat(f.fileno()).st_size
        while follower.offset < size and not stream.full:
            data = follower.read(min(_CHUNK, size - follower.offset))
            if not data:
                break
            await stream.send(data)
        if request.follow and not request.previous:
            await _follow(config, request, follower, stream, reader)
        await stream.finish()
    except (ConnectionError, ssl.SSLError):
        raise
    except OSError as e:  # a read failed mid-answer: end without the last chunk, so the client sees an error
        log.warning("kubelet server: reading %s: %s", path, e)
    finally:
        follower.close()


async def _follow(
    config: _Config, request: LogRequest, follower: _Follower, stream: _Stream, reader: asyncio.StreamReader
) -> None:
    names = (request.namespace, request.pod, request.container)
    hangup = asyncio.ensure_future(reader.read(1))  # EOF (or anything) from the client ends the stream
    loop = asyncio.get_running_loop()
    next_check = loop.time() + _RUNNING_EVERY
    try:
        await stream.send(b"")  # the headers now: kubectl -f shows nothing until the first line otherwise
        while not stream.full:
            stopped = False
            if config.running is not None and loop.time() >= next_check:
                next_check = loop.time() + _RUNNING_EVERY
                stopped = not config.running(*names)
            while data := follower.read():
                await stream.send(data)
                if stream.full:
                    return
            if stopped or (config.server is not None and not config.server.is_serving()):
                return
            done, _ = await asyncio.wait({hangup}, timeout=config.poll_interval)
            if done:
                return
    finally:
        hangup.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError, ssl.SSLError):
            await hangup


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, list[str]]] | None:
    """(method, target, headers by lower-case name) of the request, or None when the client went away or sent
    garbage."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_TIMEOUT)
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError, ssl.SSLError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return None
    headers: dict[str, list[str]] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers.setdefault(name.strip().lower(), []).append(value.strip())
    return parts[0], parts[1], headers


async def _handle(config: _Config, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        head = await _read_head(reader)
        if head is None:
            return
        method, target, headers = head
        try:
            if urlsplit(target).path.startswith("/exec/") and method in ("GET", "POST"):
                if config.exec_argv is None:
                    raise LogError(404, "exec is not served by this node")
                await kubelet_exec.serve_exec(reader, writer, target, headers, config.exec_argv)
                return
            if method != "GET":
                raise LogError(405, "Method Not Allowed")
            if urlsplit(target).path == "/healthz":
                await _reply(writer, 200, "ok")
                return
            request = parse_request(target)
            log.debug("containerLogs %s", request)
            await _serve_logs(config, request, reader, writer)
        except kubelet_exec.ExecError as e:  # LogError too
            await _reply(writer, e.status, e.message)
        except (ConnectionError, ssl.SSLError):
            raise
        except OSError as e:  # opening the log failed (permissions, say): nothing was sent yet
            log.warning("kubelet server: %s %s: %s", method, target, e)
            await _reply(writer, 500, f"reading the log: {e}")
    except (ConnectionError, ssl.SSLError):
        pass  # the client went away
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError, TimeoutError):
            await asyncio.wait_for(writer.wait_closed(), 2)


# -- certificate and server ------------------------------------------------------------------------------------


def ensure_certificate(cert_dir: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> tuple[Path, Path]:
    """A self-signed serving certificate and key in ``cert_dir``, made with openssl once and reused after."""
    cert, key = cert_dir / CERT_FILE, cert_dir / KEY_FILE
    cert_dir.mkdir(parents=True, exist_ok=True)
    with (cert_dir / ".kubelet-cert.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cert.is_file() and key.is_file():
            return cert, key
        san = ",".join(("IP:" if re.fullmatch(r"[0-9.]+|.*:.*", h) else "DNS:") + h for h in hosts)
        with tempfile.TemporaryDirectory(dir=cert_dir) as tmp:
            tmp_cert, tmp_key = Path(tmp) / CERT_FILE, Path(tmp) / KEY_FILE
            subprocess.run(
                [
                    "openssl",
                    "req",
                    "-x509",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-keyout",
                    str(tmp_key),
                    "-out",
                    str(tmp_cert),
                    "-days",
                    "3650",
                    "-subj",
                    "/CN=slinky-dev-kubelet",
                    "-addext",
                    f"subjectAltName={san}",
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            tmp_key.chmod(0o600)
            os.replace(tmp_key, key)
            os.replace(tmp_cert, cert)
    return cert, key


def server_ssl_context(cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert), str(key))
    ctx.set_alpn_protocols(["http/1.1"])  # kube-apiserver's transport offers h2 too: keep it on HTTP/1.1
    return ctx


async def serve(
    lookup: Lookup,
    host: str,
    port: int,
    cert_dir: Path,
    *,
    previous: Lookup | None = None,
    running: Running | None = None,
    poll_interval: float = POLL_INTERVAL,
    exec_argv: kubelet_exec.ArgvFor | None = None,
) -> asyncio.Server:
    """Start serving ``/containerLogs``, ``/exec`` (with ``exec_argv``: ``kubectl exec``, see
    ``kubelet_exec``) and ``/healthz`` over TLS on host:port; close the returned server to stop.

    ``previous`` answers ``previous=true``; ``running`` lets a ``follow`` end when the container stops. Closing
    the server also ends the follows in progress (within one poll interval).
    """
    cert, key = await asyncio.to_thread(ensure_certificate, cert_dir, _hosts(host))
    config = _Config(
        lookup=lookup, previous=previous, running=running, poll_interval=poll_interval, exec_argv=exec_argv
    )

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _handle(config, reader, writer)

    server = await asyncio.start_server(
        handle,
        host,
        port,
        ssl=server_ssl_context(cert, key),
        ssl_handshake_timeout=10,
        reuse_address=True,
        limit=_MAX_HEAD,
    )
    config.server = server
    return server


def _hosts(host: str) -> tuple[str, ...]:
    hosts = ["127.0.0.1", "localhost"]
    if host and host not in hosts and host not in ("0.0.0.0", "::"):
        hosts.append(host)
    return tuple(hosts)
