"""The development stack's kubelet log endpoint: request parsing, tail/limit, and a live TLS server."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import re
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from slinky.dev import kubelet_server as ks

STAMP = rb"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z "
NOW = dt.datetime(2026, 11, 25, 10, 0, 0, 123456, tzinfo=dt.UTC)


# -- parse_request ---------------------------------------------------------------------------------------------


def test_parse_plain_request() -> None:
    r = ks.parse_request("/containerLogs/slurm/slurm-controller-0/slurmctld")
    assert r == ks.LogRequest(namespace="slurm", pod="slurm-controller-0", container="slurmctld")


def test_parse_all_parameters() -> None:
    r = ks.parse_request(
        "/containerLogs/ns/p/c?follow=true&previous=true&timestamps=true&tailLines=10&limitBytes=500&sinceSeconds=60"
    )
    assert (r.follow, r.previous, r.timestamps) == (True, True, True)
    assert (r.tail_lines, r.limit_bytes, r.since_seconds, r.since_time) == (10, 500, 60, None)
    assert r.since(NOW) == NOW - dt.timedelta(seconds=60)


def test_parse_since_time_and_escapes() -> None:
    r = ks.parse_request("/containerLogs/n%2Ds/p/c?sinceTime=2026-11-25T09%3A00%3A00Z")
    assert r.namespace == "n-s"
    assert r.since_time == dt.datetime(2026, 11, 25, 9, tzinfo=dt.UTC)
    assert r.since(NOW) == r.since_time
    offset = ks.parse_request("/containerLogs/ns/p/c?sinceTime=2026-11-25T10:00:00.5%2B01:00")
    assert offset.since_time == dt.datetime(2026, 11, 25, 9, 0, 0, 500000, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("true", True), ("1", True), ("", True), ("yes", True), ("false", False), ("FALSE", False), ("0", False)],
)
def test_booleans_decode_like_the_apiserver_codec(value: str, expected: bool) -> None:
    assert ks.parse_request(f"/containerLogs/ns/p/c?follow={value}").follow is expected


def test_legacy_tail_parameter() -> None:
    assert ks.parse_request("/containerLogs/ns/p/c?tail=3").tail_lines == 3
    assert ks.parse_request("/containerLogs/ns/p/c?tail=all&tailLines=3").tail_lines is None


def test_unknown_parameters_are_ignored() -> None:
    assert ks.parse_request("/containerLogs/ns/p/c?stream=All&x=1") == ks.LogRequest("ns", "p", "c")


@pytest.mark.parametrize(
    "query",
    ["tailLines=abc", "tailLines=1.5", "tailLines= 1", "limitBytes=1_000", "sinceSeconds=", "tailLines=" + "9" * 20],
)
def test_undecodable_numbers_are_400(query: str) -> None:
    with pytest.raises(ks.LogError) as e:
        ks.parse_request(f"/containerLogs/ns/p/c?{query}")
    assert e.value.status == 400
    assert "Unable to decode query" in e.value.message


@pytest.mark.parametrize("value", ["yesterday", "2026-11-25", "2026-11-25T09:00:00", "2026-13-25T09:00:00Z"])
def test_undecodable_times_are_400(value: str) -> None:
    with pytest.raises(ks.LogError) as e:
        ks.parse_request(f"/containerLogs/ns/p/c?sinceTime={value}")
    assert e.value.status == 400


@pytest.mark.parametrize(
    ("query", "text"),
    [
        ("tailLines=-1", "tailLines"),
        ("limitBytes=0", "limitBytes"),
        ("sinceSeconds=0", "sinceSeconds"),
        ("sinceSeconds=5&sinceTime=2026-11-25T09:00:00Z", "at most one"),
    ],
)
def test_invalid_values_are_422_as_the_kubelet(query: str, text: str) -> None:
    with pytest.raises(ks.LogError) as e:
        ks.parse_request(f"/containerLogs/ns/p/c?{query}")
    assert e.value.status == 422
    assert text in e.value.message


@pytest.mark.parametrize("path", ["/containerLogs/ns/p", "/containerLogs/ns/p/c/x", "/logs/ns/p/c", "/"])
def test_other_paths_are_404(path: str) -> None:
    with pytest.raises(ks.LogError) as e:
        ks.parse_request(path)
    assert e.value.status == 404


def test_empty_names_are_400() -> None:
    with pytest.raises(ks.LogError) as e:
        ks.parse_request("/containerLogs/ns//c")
    assert e.value.status == 400


# -- tail, limit, timestamps -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "lines", "expected"),
    [
        (b"a\nb\nc\n", 2, b"b\nc\n"),
        (b"a\nb\nc\n", 1, b"c\n"),
        (b"a\nb\nc\n", 3, b"a\nb\nc\n"),
        (b"a\nb\nc\n", 10, b"a\nb\nc\n"),
        (b"a\nb\nc\n", 0, b""),
        (b"a\nb\nc", 1, b"c"),
        (b"a\nb\nc", 2, b"b\nc"),
        (b"a\n\n\n", 2, b"\n\n"),
        (b"", 3, b""),
        (b"a\nb\n", None, b"a\nb\n"),
    ],
)
def test_tail_lines(data: bytes, lines: int | None, expected: bytes) -> None:
    assert ks.tail(data, lines) == expected


def test_tail_then_limit() -> None:
    assert ks.tail(b"one\ntwo\nthree\n", 2, 5) == b"two\nt"
    assert ks.tail(b"one\ntwo\n", None, 3) == b"one"
    assert ks.tail(b"one\n", None, 100) == b"one\n"


def test_tail_offset_reads_backwards_across_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ks, "_CHUNK", 7)
    data = b"".join(b"line %d\n" % i for i in range(50))
    path = tmp_path / "log"
    path.write_bytes(data)
    with path.open("rb") as f:
        for lines in (0, 1, 3, 49, 50, 80):
            assert data[ks._tail_offset(f, len(data), lines) :] == ks.tail(data, lines)


def test_stamper_prefixes_each_line_across_pieces() -> None:
    s = ks.Stamper()
    out = s.feed(b"a\nb", NOW) + s.feed(b"c\n\nd\n", NOW) + s.feed(b"", NOW)
    stamp = b"2026-11-25T10:00:00.123456Z "
    assert out == stamp + b"a\n" + stamp + b"bc\n" + stamp + b"\n" + stamp + b"d\n"


# -- the live server -------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Pods:
    def __init__(self, tmp_path: Path) -> None:
        self.files: dict[tuple[str, str, str], Path] = {}
        self.previous: dict[tuple[str, str, str], Path] = {}
        self.stopped: set[tuple[str, str, str]] = set()
        self.dir = tmp_path

    def add(self, pod: str, text: bytes, container: str = "c") -> Path:
        path = self.dir / f"{pod}_{container}.log"
        path.write_bytes(text)
        self.files["ns", pod, container] = path
        return path

    def lookup(self, namespace: str, pod: str, container: str) -> Path | None:
        return self.files.get((namespace, pod, container))

    def lookup_previous(self, namespace: str, pod: str, container: str) -> Path | None:
        return self.previous.get((namespace, pod, container))

    def running(self, namespace: str, pod: str, container: str) -> bool:
        return (namespace, pod, container) not in self.stopped


@pytest.fixture
async def live(tmp_path: Path) -> AsyncIterator[tuple[Pods, httpx.AsyncClient, asyncio.Server]]:
    pods = Pods(tmp_path)
    server = await ks.serve(
        pods.lookup,
        "127.0.0.1",
        _free_port(),
        tmp_path / "certs",
        previous=pods.lookup_previous,
        running=pods.running,
        poll_interval=0.05,
    )
    port = server.sockets[0].getsockname()[1]
    async with httpx.AsyncClient(base_url=f"https://127.0.0.1:{port}", verify=False, timeout=10) as client:
        yield pods, client, server
    server.close()
    await server.wait_closed()


async def test_healthz_and_unknown_paths(live: tuple[Pods, httpx.AsyncClient, asyncio.Server]) -> None:
    _, client, _ = live
    r = await client.get("/healthz")
    assert (r.status_code, r.text) == (200, "ok")
    assert (await client.get("/stats/summary")).status_code == 404
    assert (await client.post("/containerLogs/ns/p/c")).status_code == 405


async def test_certificate_is_made_once(tmp_path: Path) -> None:
    cert, key = ks.ensure_certificate(tmp_path)
    before = cert.read_bytes()
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    assert ks.ensure_certificate(tmp_path) == (cert, key)
    assert cert.read_bytes() == before


async def test_logs_whole_tail_limit_and_timestamps(live: tuple[Pods, httpx.AsyncClient, asyncio.Server]) -> None:
    pods, client, _ = live
    pods.add("p", b"one\ntwo\nthree\n")
    r = await client.get("/containerLogs/ns/p/c")
    assert (r.status_code, r.content) == (200, b"one\ntwo\nthree\n")
    assert r.headers["content-type"].startswith("text/plain")
    assert (await client.get("/containerLogs/ns/p/c?tailLines=2")).content == b"two\nthree\n"
    assert (await client.get("/containerLogs/ns/p/c?tailLines=2&limitBytes=5")).content == b"two\nt"
    r = await client.get("/containerLogs/ns/p/c?tailLines=1&timestamps=true")
    assert re.fullmatch(STAMP + rb"three\n", r.content)


async def test_since_uses_the_files_modification_time(live: tuple[Pods, httpx.AsyncClient, asyncio.Server]) -> None:
    pods, client, _ = live
    path = pods.add("p", b"old\n")
    old = time.time() - 3600
    os.utime(path, (old, old))
    assert (await client.get("/containerLogs/ns/p/c?sinceSeconds=60")).content == b""
    assert (await client.get("/containerLogs/ns/p/c?sinceSeconds=7200")).content == b"old\n"


async def test_errors(live: tuple[Pods, httpx.AsyncClient, asyncio.Server]) -> None:
    pods, client, _ = live
    r = await client.get("/containerLogs/ns/nope/c")
    assert r.status_code == 404
    assert 'container "c" in pod "nope"' in r.text
    pods.files["ns", "gone", "c"] = pods.dir / "missing.log"
    assert (await client.get("/containerLogs/ns/gone/c")).status_code == 404
    pods.add("p", b"x\n")
    r = await client.get("/containerLogs/ns/p/c?previous=true")
    assert (r.status_code, r.text) == (400, 'previous terminated container "c" in pod "p" not found')
    pods.previous["ns", "p", "c"] = pods.add("p-old", b"before the restart\n")
    assert (await client.get("/containerLogs/ns/p/c?previous=true")).content == b"before the restart\n"
    assert (await client.get("/containerLogs/ns/p/c?tailLines=x")).status_code == 400
    assert (await client.get("/containerLogs/ns/p/c?limitBytes=0")).status_code == 422


async def test_lookup_may_raise_its_own_error(tmp_path: Path) -> None:
    def lookup(namespace: str, pod: str, container: str) -> Path | None:
        raise ks.LogError(400, f'container "{container}" in pod "{pod}" is waiting to start: ContainerCreating')

    server = await ks.serve(lookup, "127.0.0.1", _free_port(), tmp_path)
    port = server.sockets[0].getsockname()[1]
    try:
        async with httpx.AsyncClient(verify=False) as client:
            r = await client.get(f"https://127.0.0.1:{port}/containerLogs/ns/p/c")
        assert (r.status_code, r.text) == (400, 'container "c" in pod "p" is waiting to start: ContainerCreating')
    finally:
        server.close()
        await server.wait_closed()


async def _read_until(stream: AsyncIterator[bytes], wanted: bytes, got: bytearray) -> None:
    async for chunk in stream:
        got += chunk
        if wanted in got:
            return


async def test_follow_streams_appended_lines(live: tuple[Pods, httpx.AsyncClient, asyncio.Server]) -> None:
    pods, client, _ = live
    path = pods.add("p", b"first\nsecond\n")
    got = bytearray()
    async with client.stream("GET", "/containerLogs/ns/p/c?follow=true&tailLines=1") as r:
        assert r.status_code == 200
        chunks = r.aiter_raw()
        await asyncio.wait_for(_read_until(chunks, b"second\n", got), 5)
        with path.open("ab") as f:
            f.write(b"third\n")
        await asyncio.wait_for(_read_until(chunks, b"third\n", got), 5)
    assert bytes(got) == b"second\nthird\n"


async def test_follow_survives_truncation_and_ends_with_the_container(
    live: tuple[Pods, httpx.AsyncClient, asyncio.Server],
) -> None:
    pods, client, _ = live
    path = pods.add("p", b"long first line\n")
    got = bytearray()
    async with client.stream("GET", "/containerLogs/ns/p/c?follow=1") as r:
        chunks = r.aiter_raw()
        await asyncio.wait_for(_read_until(chunks, b"line\n", got), 5)
        path.write_bytes(b"new\n")  # truncated and rewritten (shorter): read again from the start
        await asyncio.wait_for(_read_until(chunks, b"new\n", got), 5)
        pods.stopped.add(("ns", "p", "c"))
        with path.open("ab") as f:
            f.write(b"last words\n")

        async def rest() -> None:
            async for chunk in chunks:
                got.extend(chunk)

        await asyncio.wait_for(rest(), 5)  # the stream ends by itself
    assert bytes(got) == b"long first line\nnew\nlast words\n"


async def test_follow_stops_at_limit_bytes(live: tuple[Pods, httpx.AsyncClient, asyncio.Server]) -> None:
    pods, client, _ = live
    path = pods.add("p", b"abc\n")
    async with client.stream("GET", "/containerLogs/ns/p/c?follow=true&limitBytes=6") as r:
        chunks = r.aiter_raw()
        got = bytearray()
        await asyncio.wait_for(_read_until(chunks, b"abc\n", got), 5)
        with path.open("ab") as f:
            f.write(b"defgh\n")

        async def rest() -> None:
            async for chunk in chunks:
                got.extend(chunk)

        await asyncio.wait_for(rest(), 5)
    assert bytes(got) == b"abc\nde"


async def test_closing_the_server_ends_follows(live: tuple[Pods, httpx.AsyncClient, asyncio.Server]) -> None:
    pods, client, server = live
    pods.add("p", b"x\n")
    async with client.stream("GET", "/containerLogs/ns/p/c?follow=true") as r:
        chunks = r.aiter_raw()
        got = bytearray()
        await asyncio.wait_for(_read_until(chunks, b"x\n", got), 5)
        server.close()

        async def rest() -> None:
            async for chunk in chunks:
                got.extend(chunk)

        await asyncio.wait_for(rest(), 5)
    assert bytes(got) == b"x\n"
