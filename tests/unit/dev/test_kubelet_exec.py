"""The kubelet's exec endpoint (kubectl exec): SPDY/3.1 framing, header compression with SPDY/3's dictionary,
and a whole session as kubectl's client drives it, against a real subprocess."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import zlib

import pytest

from slinky.dev import kubelet_exec as ke


def test_the_dictionary_is_spdy3s() -> None:
    """1423 bytes (Chromium's kV3DictionarySize) and its zlib id: a peer checks the id on the first block."""
    assert len(ke.DICTIONARY) == 1423
    assert zlib.adler32(ke.DICTIONARY) == 0xE3C6A7C2
    assert ke.DICTIONARY.startswith(b"\x00\x00\x00\x07options\x00\x00\x00\x04head")
    assert ke.DICTIONARY.endswith(b"utf-,*,enq=0.")


def test_header_blocks_round_trip_on_one_stream_per_direction() -> None:
    ours, theirs = ke.HeaderCodec(), ke.HeaderCodec()
    for headers in ({"streamtype": "error"}, {"streamtype": "stdout"}, {}):
        assert theirs.decode(ours.encode(headers)) == headers


def test_parse_request_as_the_apiserver_builds_it() -> None:
    request = ke.parse_request("/exec/slinky/login-1/login?command=sinfo&command=-h&output=1&error=1")
    assert (request.namespace, request.pod, request.container, request.command) == (
        "slinky",
        "login-1",
        "login",
        ["sinfo", "-h"],
    )
    assert request.expected() == {"error", "stdout", "stderr"}
    tty = ke.parse_request("/exec/ns/p/c?command=bash&input=1&output=1&error=1&tty=1")
    assert tty.expected() == {"error", "stdin", "stdout", "resize"}, "a terminal has no separate stderr"
    with pytest.raises(ke.ExecError, match="at least 1"):
        ke.parse_request("/exec/ns/p/c?command=true")
    with pytest.raises(ke.ExecError, match="command"):
        ke.parse_request("/exec/ns/p/c?output=1")


def test_status_is_v4s() -> None:
    assert json.loads(ke.status_json(0)) == {"metadata": {}, "status": "Success"}
    failed = json.loads(ke.status_json(3))
    assert failed["reason"] == "NonZeroExitCode" and failed["details"]["causes"] == [
        {"reason": "ExitCode", "message": "3"}
    ]


class Client:
    """kubectl's side: opens streams with SYN_STREAM, reads replies and data."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.codec = reader, writer, ke.HeaderCodec()
        self.next_id = 1
        self.ids: dict[str, int] = {}

    def open(self, kind: str) -> None:
        block = self.codec.encode({"streamtype": kind})
        payload = struct.pack(">IIBB", self.next_id, 0, 0, 0) + block
        self.writer.write(ke.control_frame(ke.SYN_STREAM, 0, payload))
        self.ids[kind] = self.next_id
        self.next_id += 2

    def send(self, kind: str, data: bytes, fin: bool = False) -> None:
        self.writer.write(ke.data_frame(self.ids[kind], data, ke.FLAG_FIN if fin else 0))

    async def collect(self) -> tuple[dict[str, bytes], set[int]]:
        """Data per stream type until every stream was closed by the server; the replied stream ids."""
        by_id = {v: k for k, v in self.ids.items()}
        out: dict[str, bytes] = {k: b"" for k in self.ids}
        open_ids, replied = {i for k, i in self.ids.items() if k not in ("stdin", "resize")}, set()
        while open_ids:
            frame = await ke.read_frame(self.reader)
            if frame.control and frame.type == ke.SYN_REPLY:
                self.codec.decode(frame.payload[4:])
                replied.add(frame.stream_id)
            elif not frame.control:
                out[by_id[frame.stream_id]] += frame.payload
                if frame.flags & ke.FLAG_FIN:
                    open_ids.discard(frame.stream_id)
        return out, replied


async def _session(
    query: str, argv: list[str], streams: list[str], stdin: bytes | None = None
) -> tuple[Client, dict[str, bytes], set[int], bytes]:
    left, right = socket.socketpair()
    server_r, server_w = await asyncio.open_connection(sock=left)
    client_r, client_w = await asyncio.open_connection(sock=right)
    headers = {"upgrade": ["SPDY/3.1"], "x-stream-protocol-version": ["v4.channel.k8s.io", "v3.channel.k8s.io"]}
    served = asyncio.create_task(ke.serve_exec(server_r, server_w, f"/exec/ns/p/c?{query}", headers, lambda *_: argv))
    head = await client_r.readuntil(b"\r\n\r\n")
    client = Client(client_r, client_w)
    for kind in streams:
        client.open(kind)
    if stdin is not None:
        client.send("stdin", stdin, fin=True)
    out, replied = await asyncio.wait_for(client.collect(), 10)
    client_w.close()
    await asyncio.wait_for(served, 10)
    server_w.close()
    return client, out, replied, head


async def test_a_command_runs_with_its_output_stdin_and_exit_code() -> None:
    argv = ["sh", "-c", "cat; echo out; echo err >&2; exit 3"]
    client, out, replied, head = await _session(
        "command=x&input=1&output=1&error=1", argv, ["error", "stdin", "stdout", "stderr"], stdin=b"in\n"
    )
    assert head.startswith(b"HTTP/1.1 101") and b"X-Stream-Protocol-Version: v4.channel.k8s.io" in head
    assert replied == set(client.ids.values()), "every stream is replied to"
    assert out["stdout"] == b"in\nout\n" and out["stderr"] == b"err\n"
    status = json.loads(out["error"])
    assert status["reason"] == "NonZeroExitCode" and status["details"]["causes"][0]["message"] == "3"


async def test_a_terminal_session_runs_on_a_pty() -> None:
    _, out, _, _ = await _session(
        "command=x&input=1&output=1&tty=1",
        ["sh", "-c", "tty -s && echo on-a-tty"],
        ["error", "stdin", "stdout", "resize"],
    )
    assert b"on-a-tty" in out["stdout"]
    assert json.loads(out["error"])["status"] == "Success"


async def test_no_spdy_or_no_v4_is_refused_before_the_upgrade() -> None:
    reader = asyncio.StreamReader()
    with pytest.raises(ke.ExecError, match="SPDY"):
        await ke.serve_exec(reader, None, "/exec/ns/p/c?command=x&output=1", {}, lambda *_: ["true"])  # type: ignore[arg-type]
    with pytest.raises(ke.ExecError, match="v4"):
        headers = {"upgrade": ["SPDY/3.1"], "x-stream-protocol-version": ["channel.k8s.io"]}
        await ke.serve_exec(reader, None, "/exec/ns/p/c?command=x&output=1", headers, lambda *_: ["true"])  # type: ignore[arg-type]
    with pytest.raises(ke.ExecError, match="runs no process"):
        headers = {"upgrade": ["SPDY/3.1"], "x-stream-protocol-version": ["v4.channel.k8s.io"]}
        await ke.serve_exec(reader, None, "/exec/ns/p/c?command=x&output=1", headers, lambda *_: None)  # type: ignore[arg-type]
