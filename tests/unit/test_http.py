"""``slinky.clients.http``: httpx on asyncio streams behaves as httpx on anyio did, errors included.

Against a small HTTP/1.1 server on loopback (TLS is exercised by every integration test: the API server's).
"""

from __future__ import annotations

import asyncio
import contextlib
import select
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from slinky.clients import http

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
LIMITS = httpx.Limits(max_connections=4, max_keepalive_connections=4)


async def _request(reader: asyncio.StreamReader) -> bytes:
    return await reader.readuntil(b"\r\n\r\n")


def _answer(body: bytes, *, close: bool = False) -> bytes:
    extra = b"Connection: close\r\n" if close else b""
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


@contextlib.asynccontextmanager
async def serve(handler: Handler) -> AsyncIterator[str]:
    """A server on a free port running ``handler`` per connection; every connection is closed at the end."""
    writers: list[asyncio.StreamWriter] = []

    async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await handler(reader, writer)

    server = await asyncio.start_server(tracked, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        for writer in writers:
            writer.close()
        await server.wait_closed()


def client(url: str, timeout: float = 5.0) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, timeout=timeout, transport=http.transport(limits=LIMITS))


@pytest.fixture
def no_select(monkeypatch: pytest.MonkeyPatch) -> None:
    """No select()/poll() per request: whether a pooled connection is still open comes from the stream's state."""

    def fail(*args: object) -> None:
        pytest.fail("select() called")

    monkeypatch.setattr(select, "poll", fail)  # what httpcore's own readability check calls on Linux
    monkeypatch.setattr(select, "select", fail)


@pytest.mark.usefixtures("no_select")
async def test_requests_reuse_one_connection_and_bodies_arrive_whole() -> None:
    connections = 0
    big = b"x" * 300_000  # more than the stream's buffer: read in pieces

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await _request(reader)
                writer.write(_answer(big if b"/big" in head else b"ok"))
                await writer.drain()

    async with serve(handler) as url, client(url) as c:
        assert (await c.get("/a")).text == "ok"
        assert (await c.get("/big")).content == big
        assert (await c.post("/c", content=b"body")).text == "ok"
    assert connections == 1, "keep-alive: one connection for every request"


@pytest.mark.usefixtures("no_select")
async def test_a_connection_the_server_closed_while_idle_is_replaced() -> None:
    """httpcore asks the stream whether it is readable before reusing it: a closed one is dropped, not used."""
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await _request(reader)
        writer.write(_answer(b"once"))  # no Connection: close, yet the server hangs up
        await writer.drain()
        writer.close()

    async with serve(handler) as url, client(url) as c:
        assert (await c.get("/")).text == "once"
        await asyncio.sleep(0.1)
        assert (await c.get("/")).text == "once"
    assert connections == 2


async def test_a_slow_answer_is_a_read_timeout() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await reader.read()  # never answers: waits until the client gives up and hangs up

    async with serve(handler) as url, client(url, timeout=0.2) as c:
        with pytest.raises(httpx.ReadTimeout):
            await c.get("/")


async def test_no_server_is_a_connect_error() -> None:
    async with serve(lambda r, w: asyncio.sleep(0)) as url:
        pass  # closed: nothing listens on that port any more
    async with client(url) as c:
        with pytest.raises(httpx.ConnectError):
            await c.get("/")


async def test_a_server_that_hangs_up_mid_answer_is_a_read_error() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")
        await writer.drain()
        writer.close()

    async with serve(handler) as url, client(url) as c:
        with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
            await c.get("/")
