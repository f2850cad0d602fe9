"""The process's health endpoint for the kubelet's probes (`SLINKY_TELEMETRY__HEALTH_PORT`; the bridge's and the
operator's process alike, outside leader election, so a standby answers too).

* `GET /healthz`: 200 while the event loop answers (a hung loop times the probe out; the kubelet restarts it);
* `GET /readyz`: 200 once the replica leads or stands by for the Lease, 503 while it starts.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass


@dataclass
class Health:
    """What `/readyz` reports: starting, standby (waits for the Lease) or leading."""

    state: str = "starting"

    def ready(self) -> bool:
        return self.state in ("standby", "leading")


def answer(health: Health, request_line: str) -> tuple[int, str]:
    """Status code and body for one request line (`GET /readyz HTTP/1.1`)."""
    parts = request_line.split()
    path = parts[1] if len(parts) >= 2 else ""
    if path == "/healthz":
        return 200, "ok"
    if path == "/readyz":
        return (200, health.state) if health.ready() else (503, health.state)
    return 404, "not found"


async def serve(health: Health, port: int, address: str = "127.0.0.1") -> asyncio.Server:
    """Start the endpoint; the caller closes the returned server."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError):
            line = (await asyncio.wait_for(reader.readline(), 5)).decode("latin-1")
            code, body = answer(health, line)
            reason = {200: "OK", 503: "Service Unavailable", 404: "Not Found"}[code]
            payload = body.encode()
            writer.write(
                f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(payload)}\r\n"
                f"Connection: close\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, address, port)
