"""The kubelet's exec endpoint for the development stack: what ``kubectl exec`` reaches through the apiserver.

``kubectl exec POD -- CMD`` asks kube-apiserver, which opens the kubelet's::

    POST https://<node>:10250/exec/<namespace>/<pod>/<container>?command=...&output=1&error=1[&input=1][&tty=1]

with ``Upgrade: SPDY/3.1`` and the remote-command protocols it speaks (``X-Stream-Protocol-Version``), and then
relays the upgraded connection byte for byte. This module serves that side: it answers ``101 Switching
Protocols`` with ``v4.channel.k8s.io`` and speaks SPDY/3.1 (draft-mbelshe-httpbis-spdy-00, as the Go
``spdystream`` package that kubectl 1.20 uses: no flow control, no settings) over the same TLS connection.

The client opens one stream per channel (header ``streamtype``: ``error``, ``stdin``, ``stdout``, ``stderr``,
``resize``); each gets a ``SYN_REPLY`` at once. When every stream the query asks for is open, the command runs
(``argv_for`` turns it into the argv that enters the pod: its namespaces and the Slurm rootfs), its output goes
out as DATA frames, stdin and terminal resizes come in, and at exit the ``error`` stream carries the
``metav1.Status`` of protocol v4 (``Success``, or ``Failure`` with reason ``NonZeroExitCode`` and the exit
code, which kubectl turns into its own exit code). Then every stream is closed (FIN) and the connection ends.

Header blocks are zlib streams, one per direction for the whole connection, primed with SPDY/3's dictionary.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import pty
import struct
import termios
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import parse_qs, unquote, urlsplit

log = logging.getLogger(__name__)

ArgvFor = Callable[[str, str, str, list[str]], list[str] | None]
"""(namespace, pod, container, command) -> argv that runs the command inside the pod, or None (no such pod)."""

PROTOCOL: Final = "v4.channel.k8s.io"
SPDY_VERSION: Final = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN: Final = 0x01
STREAM_CREATION_SECONDS: Final = 30.0
_CHUNK: Final = 32 * 1024

_WORDS = [
    *(
        "options head post put delete trace accept accept-charset accept-encoding accept-language accept-ranges age "
        "allow authorization cache-control connection content-base content-encoding content-language content-length "
        "content-location content-md5 content-range content-type date etag expect expires from host if-match "
        "if-modified-since if-none-match if-range if-unmodified-since last-modified location max-forwards pragma "
        "proxy-authenticate proxy-authorization range referer retry-after server te trailer transfer-encoding upgrade "
        "user-agent vary via warning www-authenticate method get status"
    ).split(),
    *("200 OK", "version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive", "origin"),
]
_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized"
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable"
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)
DICTIONARY: Final = b"".join(struct.pack(">I", len(w)) + w.encode() for w in _WORDS) + _TAIL.encode()
"""SPDY/3's header compression dictionary (the spec's: length-prefixed header names and values, then a text of
common values). zlib checks it: a peer primed with another one fails on the first header block."""


class ExecError(Exception):
    """A request answered before any upgrade, with an HTTP status and a plain-text body, as the kubelet answers
    (the log endpoint's ``LogError`` is one too)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ExecRequest:
    namespace: str
    pod: str
    container: str
    command: list[str]
    stdin: bool = False
    stdout: bool = False
    stderr: bool = False
    tty: bool = False

    def expected(self) -> set[str]:
        """The streams the client opens before the command runs."""
        wanted = {"error"}
        wanted |= {name for name, on in (("stdin", self.stdin), ("stdout", self.stdout)) if on}
        if self.stderr and not self.tty:
            wanted.add("stderr")
        if self.tty:
            wanted.add("resize")
        return wanted


def parse_request(target: str) -> ExecRequest:
    """``/exec/<ns>/<pod>[/<uid>]/<container>?command=...`` as kube-apiserver 1.20 builds it (``input``,
    ``output``, ``error``, ``tty`` are ``1`` when set)."""
    parts = urlsplit(target)
    names = [unquote(p) for p in parts.path.split("/")[2:] if p]
    if len(names) not in (3, 4):
        raise ExecError(400, f"exec path {parts.path!r}: want /exec/<namespace>/<pod>/<container>")
    query = parse_qs(parts.query, keep_blank_values=True)

    def on(key: str) -> bool:
        return (query.get(key) or [""])[0] == "1"

    command = query.get("command") or []
    if not command:
        raise ExecError(400, "you must specify a command")
    request = ExecRequest(names[0], names[1], names[-1], command, on("input"), on("output"), on("error"), on("tty"))
    if not (request.stdin or request.stdout or request.stderr):
        raise ExecError(400, "you must specify at least 1 of stdin, stdout, stderr")
    return request


# -- SPDY/3 frames --------------------------------------------------------------------------------------------


def control_frame(type_: int, flags: int, payload: bytes) -> bytes:
    return struct.pack(">HHI", 0x8000 | SPDY_VERSION, type_, (flags << 24) | len(payload)) + payload


def data_frame(stream_id: int, data: bytes, flags: int = 0) -> bytes:
    return struct.pack(">II", stream_id & 0x7FFFFFFF, (flags << 24) | len(data)) + data


@dataclass
class Frame:
    control: bool
    type: int  # control frame type; 0 for data
    flags: int
    stream_id: int
    payload: bytes


async def read_frame(reader: asyncio.StreamReader) -> Frame:
    head = await reader.readexactly(8)
    first, second = struct.unpack(">II", head)
    flags, length = second >> 24, second & 0xFFFFFF
    payload = await reader.readexactly(length) if length else b""
    if first & 0x80000000:
        type_ = first & 0xFFFF
        stream_id = struct.unpack(">I", payload[:4])[0] & 0x7FFFFFFF if len(payload) >= 4 else 0
        return Frame(True, type_, flags, stream_id, payload)
    return Frame(False, 0, flags, first & 0x7FFFFFFF, payload)


class HeaderCodec:
    """One direction's header compression: a zlib stream for the whole connection, flushed per block."""

    def __init__(self) -> None:
        self._deflate = zlib.compressobj(
            zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY, DICTIONARY
        )
        self._inflate = zlib.decompressobj(zdict=DICTIONARY)

    def encode(self, headers: dict[str, str]) -> bytes:
        raw = struct.pack(">I", len(headers))
        for name, value in headers.items():
            raw += struct.pack(">I", len(name)) + name.lower().encode() + struct.pack(">I", len(value)) + value.encode()
        return self._deflate.compress(raw) + self._deflate.flush(zlib.Z_SYNC_FLUSH)

    def decode(self, block: bytes) -> dict[str, str]:
        raw = self._inflate.decompress(block)
        (count,), at = struct.unpack(">I", raw[:4]), 4
        headers: dict[str, str] = {}
        for _ in range(count):
            (n,) = struct.unpack(">I", raw[at : at + 4])
            name = raw[at + 4 : at + 4 + n].decode()
            at += 4 + n
            (n,) = struct.unpack(">I", raw[at : at + 4])
            headers[name.lower()] = raw[at + 4 : at + 4 + n].decode()
            at += 4 + n
        return headers


# -- the session ------------------------------------------------------------------------------------------------


@dataclass
class _Session:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    request: ExecRequest
    codec: HeaderCodec = field(default_factory=HeaderCodec)
    streams: dict[str, int] = field(default_factory=dict)
    """stream type -> stream id."""
    all_open: asyncio.Event = field(default_factory=asyncio.Event)
    stdin: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)
    """Bytes for the command's stdin; None once the client closed it."""
    resize: Callable[[bytes], None] | None = None
    gone: asyncio.Event = field(default_factory=asyncio.Event)

    def send(self, frame: bytes) -> None:
        if not self.writer.is_closing():
            self.writer.write(frame)

    async def write(self, kind: str, data: bytes, *, fin: bool = False) -> None:
        stream = self.streams.get(kind)
        if stream is None:
            return
        for at in range(0, len(data), _CHUNK):
            self.send(data_frame(stream, data[at : at + _CHUNK]))
        if fin:
            self.send(data_frame(stream, b"", FLAG_FIN))
        await self.writer.drain()

    async def read_frames(self) -> None:
        """Every frame from the client: stream opens (replied at once), stdin, resizes, pings, the end."""
        by_id: dict[int, str] = {}
        try:
            while True:
                frame = await read_frame(self.reader)
                if frame.control and frame.type == SYN_STREAM:
                    headers = self.codec.decode(frame.payload[10:])
                    kind = headers.get("streamtype", "")
                    by_id[frame.stream_id] = kind
                    self.streams[kind] = frame.stream_id
                    reply = struct.pack(">I", frame.stream_id) + self.codec.encode({})
                    self.send(control_frame(SYN_REPLY, 0, reply))
                    await self.writer.drain()
                    if self.request.expected() <= set(self.streams):
                        self.all_open.set()
                    if frame.flags & FLAG_FIN and kind == "stdin":
                        self.stdin.put_nowait(None)
                elif frame.control and frame.type == PING:
                    self.send(control_frame(PING, 0, frame.payload[:4]))
                elif frame.control and frame.type == GOAWAY:
                    return
                elif not frame.control:
                    kind = by_id.get(frame.stream_id, "")
                    if kind == "stdin":
                        if frame.payload:
                            self.stdin.put_nowait(frame.payload)
                        if frame.flags & FLAG_FIN:
                            self.stdin.put_nowait(None)
                    elif kind == "resize" and frame.payload and self.resize is not None:
                        self.resize(frame.payload)
        except (asyncio.IncompleteReadError, ConnectionError, OSError, zlib.error, struct.error):
            return
        finally:
            self.gone.set()
            self.stdin.put_nowait(None)


def status_json(code: int | None) -> bytes:
    """The v4 error stream's ``metav1.Status``: Success, or Failure with the exit code (None: killed)."""
    if code == 0:
        return json.dumps({"metadata": {}, "status": "Success"}).encode()
    why = f"exit status {code}" if code is not None and code > 0 else f"signal: {-(code or 0)}"
    return json.dumps(
        {
            "metadata": {},
            "status": "Failure",
            "message": f"command terminated with non-zero exit code: {why}",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code if code and code > 0 else 137)}]},
        }
    ).encode()


def _resize(fd: int) -> Callable[[bytes], None]:
    """Apply resize events (``{"Width":..,"Height":..}`` JSON, one per frame or several) to the terminal ``fd``."""

    def apply(data: bytes) -> None:
        for line in data.decode(errors="replace").replace("}{", "}\n{").splitlines():
            with contextlib.suppress(ValueError, OSError, KeyError, TypeError):
                size = json.loads(line)
                fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", int(size["Height"]), int(size["Width"]), 0, 0))

    return apply


async def serve_exec(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    target: str,
    headers: dict[str, list[str]],
    argv_for: ArgvFor,
) -> None:
    """One exec request, from its request head to the end of the command (the caller closes the connection).

    Raises:
        ExecError: Answered before the upgrade (bad request, no such pod, no SPDY or v4 offered).
    """
    request = parse_request(target)
    offered = [p.strip() for v in headers.get("x-stream-protocol-version", []) for p in v.split(",")]
    upgrade = " ".join(headers.get("upgrade", [])).lower()
    if "spdy/3.1" not in upgrade:
        raise ExecError(400, "exec needs Upgrade: SPDY/3.1 (websocket exec is not served)")
    if PROTOCOL not in offered:
        raise ExecError(403, f"exec speaks {PROTOCOL} only; the client offered {offered or 'none'}")
    argv = argv_for(request.namespace, request.pod, request.container, request.command)
    if argv is None:
        raise ExecError(404, f'pod "{request.pod}" container "{request.container}" runs no process on this node')
    writer.write(
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
        + f"X-Stream-Protocol-Version: {PROTOCOL}\r\n\r\n".encode()
    )
    await writer.drain()
    session = _Session(reader, writer, request)
    frames = asyncio.create_task(session.read_frames(), name="exec-frames")
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(session.all_open.wait(), STREAM_CREATION_SECONDS)
        if not session.all_open.is_set():
            log.warning("exec %s/%s: streams %s never opened", request.namespace, request.pod, request.expected())
            return
        log.info("exec %s/%s/%s: %s", request.namespace, request.pod, request.container, request.command)
        code = await _run(session, argv)
        await session.write("stdout", b"", fin=True)
        await session.write("stderr", b"", fin=True)
        await session.write("error", status_json(code), fin=True)
        with contextlib.suppress(TimeoutError):  # the client reads the status, then closes the connection
            await asyncio.wait_for(session.gone.wait(), 5)
    finally:
        frames.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await frames


async def _run(session: _Session, argv: list[str]) -> int | None:
    """Run ``argv`` with the session's channels; its exit code (negative: the signal that ended it)."""
    request = session.request
    if request.tty:
        parent, child = pty.openpty()
        session.resize = _resize(parent)
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=child, stdout=child, stderr=child, start_new_session=True, preexec_fn=_controlling_tty
        )
        os.close(child)
        output = [asyncio.create_task(_pump_fd(session, parent, "stdout"))]
        feeding = [asyncio.create_task(_feed_fd(session, parent))]
    else:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if request.stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        assert proc.stdout is not None and proc.stderr is not None
        output = [
            asyncio.create_task(_pump(session, proc.stdout, "stdout")),
            asyncio.create_task(_pump(session, proc.stderr, "stderr")),
        ]
        feeding = [asyncio.create_task(_feed(session, proc.stdin))] if proc.stdin is not None else []
    gone = asyncio.create_task(session.gone.wait())
    exited = asyncio.create_task(proc.wait())
    await asyncio.wait([exited, gone], return_when=asyncio.FIRST_COMPLETED)
    if not exited.done():  # the client went away: end the command as a kubelet's runtime would
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
    code = await exited
    gone.cancel()
    with contextlib.suppress(TimeoutError):  # what the command wrote before it ended still goes out
        await asyncio.wait_for(asyncio.gather(*output, return_exceptions=True), 5)
    for task in [*output, *feeding]:
        task.cancel()
    if request.tty:
        with contextlib.suppress(OSError):
            os.close(parent)
    return code


def _controlling_tty() -> None:
    """In the child, after setsid: the terminal on stdin becomes its controlling terminal (job control works)."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


async def _pump(session: _Session, stream: asyncio.StreamReader, kind: str) -> None:
    while data := await stream.read(_CHUNK):
        await session.write(kind, data)


async def _feed(session: _Session, stdin: asyncio.StreamWriter) -> None:
    try:
        while (data := await session.stdin.get()) is not None:
            stdin.write(data)
            await stdin.drain()
    except (ConnectionError, BrokenPipeError):
        return
    finally:
        with contextlib.suppress(OSError):
            stdin.close()


async def _pump_fd(session: _Session, fd: int, kind: str) -> None:
    loop = asyncio.get_running_loop()
    while True:
        try:
            data = await loop.run_in_executor(None, os.read, fd, _CHUNK)
        except OSError:  # EIO: the terminal's last writer is gone
            return
        if not data:
            return
        await session.write(kind, data)


async def _feed_fd(session: _Session, fd: int) -> None:
    loop = asyncio.get_running_loop()
    while (data := await session.stdin.get()) is not None:
        with contextlib.suppress(OSError):
            await loop.run_in_executor(None, os.write, fd, data)


def header_map(raw: list[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, value in raw:
        out.setdefault(name.lower(), []).append(value)
    return out
