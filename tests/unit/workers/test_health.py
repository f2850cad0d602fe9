"""The process's health endpoint: /healthz while the loop answers, /readyz once leading or standing by."""

from __future__ import annotations

import asyncio

from slinky.config import Settings
from workers.health import Health, answer, serve
from workers.leading import run_as_leader


async def _get(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    raw = (await reader.read()).decode()
    writer.close()
    head, _, body = raw.partition("\r\n\r\n")
    return int(head.split()[1]), body


async def test_ready_only_once_leading_or_standing_by() -> None:
    health = Health()
    server = await serve(health, 0)
    port = server.sockets[0].getsockname()[1]
    try:
        assert await _get(port, "/healthz") == (200, "ok")
        assert await _get(port, "/readyz") == (503, "starting")
        health.state = "standby"
        assert await _get(port, "/readyz") == (200, "standby")
        assert (await _get(port, "/nope"))[0] == 404
    finally:
        server.close()


def test_answers_from_the_request_line() -> None:
    assert answer(Health("leading"), "GET /readyz HTTP/1.1") == (200, "leading")
    assert answer(Health(), "garbage")[0] == 404


async def test_without_leader_election_the_body_runs_as_leading() -> None:
    health = Health()
    seen: list[str] = []

    async def body(settings: Settings, stop: asyncio.Event) -> None:
        seen.append(health.state)

    await run_as_leader(Settings(), "lease", body, asyncio.Event(), health)
    assert seen == ["leading"]
