"""The HTTP transport under both clients (Kubernetes, slurmrestd): httpx on asyncio's own streams.

httpx runs its connections through anyio by default, which wraps every read and write in a cancel scope and
asks the running task and library each time. On the bridge worker that bookkeeping was a tenth of its CPU in
a burst of pods (py-spy: ``current_task``, cancel scopes, the socket attributes ``has_expired`` asks for
before every request). :class:`AsyncioBackend` is httpcore's network backend written on asyncio streams:
``asyncio.timeout`` for deadlines, the loop's TLS, the socket looked up once per connection. It raises
httpcore's exceptions, which httpx maps to its own (``httpx.ConnectError``, ``httpx.ReadTimeout``...), so
callers see what they saw before.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

SocketOption = tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]

READ_ERRORS = (OSError, EOFError, asyncio.IncompleteReadError)


class AsyncioStream(httpcore.AsyncNetworkStream):
    """One connection: an asyncio stream pair."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._socket: socket.socket | None = writer.get_extra_info("socket")

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            async with asyncio.timeout(timeout):
                return await self._reader.read(max_bytes)
        except TimeoutError as err:
            raise httpcore.ReadTimeout(str(err) or "read timed out") from err
        except READ_ERRORS as err:
            raise httpcore.ReadError(str(err) or type(err).__name__) from err

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        try:
            async with asyncio.timeout(timeout):
                self._writer.write(buffer)
                await self._writer.drain()
        except TimeoutError as err:
            raise httpcore.WriteTimeout(str(err) or "write timed out") from err
        except READ_ERRORS as err:
            raise httpcore.WriteError(str(err) or type(err).__name__) from err

    async def aclose(self) -> None:
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (OSError, ssl.SSLError):
            pass  # closing a broken connection: nothing left to do

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                await self._writer.start_tls(ssl_context, server_hostname=server_hostname)
        except TimeoutError as err:
            await self.aclose()
            raise httpcore.ConnectTimeout(str(err) or "TLS handshake timed out") from err
        except (OSError, ssl.SSLError, EOFError) as err:
            await self.aclose()
            raise httpcore.ConnectError(str(err) or type(err).__name__) from err
        return self

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            # httpcore asks before reusing a pooled connection: readable while idle means closed by the server. The
            # loop reads every connection as data comes, so the stream's state tells it without a select() per
            # request (4 % of the bridge worker in a burst of pods, py-spy).
            return self._reader.at_eof() or self._writer.is_closing()
        if info == "ssl_object":
            return self._writer.get_extra_info("ssl_object")
        if info == "client_addr":
            return self._writer.get_extra_info("sockname")
        if info == "server_addr":
            return self._writer.get_extra_info("peername")
        if info == "socket":
            return self._socket
        return None


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend on asyncio streams (see the module's docstring)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, local_addr=(local_address, 0) if local_address else None
                )
        except TimeoutError as err:
            raise httpcore.ConnectTimeout(str(err) or f"connecting to {host}:{port} timed out") from err
        except OSError as err:
            raise httpcore.ConnectError(str(err) or type(err).__name__) from err
        sock: socket.socket | None = writer.get_extra_info("socket")
        if sock is not None:
            for option in socket_options or ():
                sock.setsockopt(*option)
        return AsyncioStream(reader, writer)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[SocketOption] | None = None
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_unix_connection(path)
        except TimeoutError as err:
            raise httpcore.ConnectTimeout(str(err) or f"connecting to {path} timed out") from err
        except OSError as err:
            raise httpcore.ConnectError(str(err) or type(err).__name__) from err
        return AsyncioStream(reader, writer)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def transport(*, verify: ssl.SSLContext | bool = True, limits: httpx.Limits) -> httpx.AsyncHTTPTransport:
    """httpx's own transport (its exception mapping, its pool) on :class:`AsyncioBackend`."""
    result = httpx.AsyncHTTPTransport(verify=verify, limits=limits)
    pool = result._pool  # httpx 0.28 takes no backend: the pool is rebuilt with the same settings
    result._pool = httpcore.AsyncConnectionPool(
        ssl_context=pool._ssl_context,
        max_connections=pool._max_connections,
        max_keepalive_connections=pool._max_keepalive_connections,
        keepalive_expiry=pool._keepalive_expiry,
        http1=pool._http1,
        http2=pool._http2,
        network_backend=AsyncioBackend(),
    )
    return result
