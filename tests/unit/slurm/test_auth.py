"""Token handling: static and rotating file tokens; a token never reaches logs, reprs or errors."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import httpx
import pytest

from slinky.clients.errors import ConfigError, SlurmError, SlurmRejected, SlurmUnavailable
from slinky.clients.slurm.auth import SlurmAuth, StaticToken, TokenFile, clean_token
from slinky.clients.slurm.models import JobDescMsg
from tests.unit.slurm.helpers import TOKEN, Router, make_client

V = "/slurm/v0.0.44"


@pytest.mark.parametrize(
    ("raw", "token"),
    [("abc", "abc"), ("SLURM_JWT=abc\n", "abc"), ("  SLURM_JWT= abc \n", "abc"), ("", "")],
    ids=["bare", "scontrol-output", "whitespace", "empty"],
)
def test_clean_token(raw: str, token: str) -> None:
    assert clean_token(raw) == token


def _bump(path: Path, text: str) -> None:
    # Rewrite with a distinct mtime even on coarse-grained filesystems.
    path.write_text(text)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


def test_token_file_is_reread_only_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "jwt"
    path.write_text("SLURM_JWT=one\n")
    provider = TokenFile(path)
    assert provider.token() == "one" and provider.token() == "one"
    assert provider.reads == 1
    _bump(path, "SLURM_JWT=two\n")
    assert provider.token() == "two"
    assert provider.reads == 2


def test_token_file_missing_at_start_is_a_config_error_without_the_content(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        TokenFile(tmp_path / "absent")


def test_token_file_briefly_missing_keeps_the_last_token(tmp_path: Path) -> None:
    path = tmp_path / "jwt"
    path.write_text("one")
    provider = TokenFile(path)
    path.unlink()
    assert provider.token() == "one"


async def test_rotation_while_requests_are_in_flight(tmp_path: Path) -> None:
    path = tmp_path / "jwt"
    path.write_text("SLURM_JWT=old-token")
    release = asyncio.Event()
    seen: list[str] = []

    async def slow(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["X-SLURM-USER-TOKEN"])
        await release.wait()
        return httpx.Response(200, json={"pings": []})

    client = make_client(Router(), token=TokenFile(path))
    client._http._transport = httpx.MockTransport(slow)
    async with client:
        in_flight = [asyncio.create_task(client.ping()) for _ in range(5)]
        while len(seen) < 5:
            await asyncio.sleep(0)
        _bump(path, "SLURM_JWT=new-token")
        after = [asyncio.create_task(client.ping()) for _ in range(5)]
        while len(seen) < 10:
            await asyncio.sleep(0)
        release.set()
        await asyncio.gather(*in_flight, *after)
    assert seen[:5] == ["old-token"] * 5
    assert seen[5:] == ["new-token"] * 5


def test_reprs_hide_the_token(tmp_path: Path) -> None:
    path = tmp_path / "jwt"
    path.write_text(TOKEN)
    for obj in (StaticToken(TOKEN), TokenFile(path), SlurmAuth("slurm", StaticToken(TOKEN))):
        assert TOKEN not in repr(obj) and TOKEN not in str(obj)


async def test_token_never_reaches_logs_or_errors(caplog: pytest.LogCaptureFixture) -> None:
    # A server that echoes the token back in its error text, the worst case.
    echo = {"errors": [{"description": f"bad token {TOKEN}", "error_number": 1, "error": TOKEN,
                        "source": f"auth {TOKEN}"}]}  # fmt: skip

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"refused while sending {request.headers.get('X-SLURM-USER-TOKEN')}")

    router = (
        Router()
        .add("POST", f"{V}/job/submit", (401, echo))
        .add("GET", f"{V}/job/1", (500, echo))
        .add("GET", f"{V}/ping", refuse)
    )
    caught: list[SlurmError] = []
    caplog.set_level(logging.DEBUG)
    async with make_client(router, read_retries=1) as client:
        for call in (
            client.submit_job(JobDescMsg(partition="p", flags=["EXTERNAL_JOB"])),
            client.get_job(1),
            client.ping(),
        ):
            with pytest.raises(SlurmError) as info:
                await call
            caught.append(info.value)
        assert TOKEN not in repr(client)
    assert [type(e) for e in caught] == [SlurmRejected, SlurmUnavailable, SlurmUnavailable]
    for error in caught:
        texts = [str(error), repr(error), error.error, error.description, error.source]
        assert all(TOKEN not in text for text in texts), texts
    assert "***" in caught[0].error  # redacted, not dropped
    assert caplog.records, "the client should log at DEBUG"
    assert all(TOKEN not in record.getMessage() for record in caplog.records)
    assert TOKEN not in caplog.text
