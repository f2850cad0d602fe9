"""Followers' submits through the leader, so that their pods too get immediate allocations.

Only the leader runs the job watcher, so only it can tell that nodes are free (``workers/bridge/capacity.py``) and
announce a new job to the one Slurm poll. Without this, a follower replica's lifecycle queues its job with
``job/submit``, then waits for Slurm's scheduling pass and for the leader's poll to route the start.

With ``SLINKY_WORKER__SUBMIT_RELAY_PORT`` set, the leader listens on ``SLINKY_WORKER__SUBMIT_RELAY_HOST`` and that
port while it leads, and writes the address on its Lease (annotation ``scheduler.slinky.slurm.net/submit-relay``).
A follower's ``submit_placeholder_job`` sends its input there; the leader submits exactly as for its own
lifecycles (``SlurmActivities.submit``) and the follower returns the leader's answer (docs/bridge.md, "Several
replicas").

- **Authenticated** with the Slurm JWT every replica already holds, which is never sent: each request carries an
  HMAC-SHA256 of its body keyed by it. A request without a valid one gets 401 and changes nothing.
- **When the request surely did not reach the leader** (no leader known, connection refused, 401, 503 from a
  leader stepping down) the follower submits itself, as before the relay. **When it may have reached it** (reset,
  timeout or 500 after the request was sent) the activity fails and is retried: a retry looks for the job the
  first attempt may have made before submitting, so a leader killed mid-request never leaves two jobs.
- **One submit per lifecycle at a time** on the leader: a retry waits for the attempt before it to end.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from pydantic import BaseModel, ValidationError
from temporalio.exceptions import ApplicationError

from slinky import telemetry
from slinky.bridge.models.workload import SubmitInput, SubmitResult

logger = logging.getLogger(__name__)

PATH: Final = "/submit"
SIGNATURE_HEADER: Final = "x-slinky-signature"
MAX_BODY: Final = 16 * 1024 * 1024
"""A gang's job spec with every excluded node stays far below this."""
CONNECT_SECONDS: Final = 2.0
ANSWER_SECONDS: Final = 25.0
"""Below the submit activity's 30 s deadline: the follower's retry then still runs within its own attempt budget."""

Handler = Callable[[SubmitInput, int], Awaitable[SubmitResult]]
Key = Callable[[], str]
"""The current Slurm JWT (re-read when its file changes)."""


class RelayRequest(BaseModel):
    """One relayed submit: the follower's activity input and attempt number."""

    attempt: int
    input: SubmitInput


def sign(key: str, body: bytes) -> str:
    return hmac.new(key.encode(), body, hashlib.sha256).hexdigest()


async def serve(handler: Handler, key: Key, host: str, port: int) -> asyncio.Server:
    """Take followers' submits on ``host:port`` until the returned server is closed (the leader's term)."""
    locks: dict[str, tuple[asyncio.Lock, int]] = {}
    """Per lifecycle: its lock and how many requests hold or wait for it (dropped at 0)."""

    async def submit(request: RelayRequest) -> SubmitResult:
        wid = request.input.workflow_id
        lock, users = locks.get(wid, (asyncio.Lock(), 0))
        locks[wid] = (lock, users + 1)
        try:
            async with lock:
                return await handler(request.input, request.attempt)
        finally:
            lock, users = locks[wid]
            if users == 1:
                del locks[wid]
            else:
                locks[wid] = (lock, users - 1)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            status, body = await _answer(reader, key, submit)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, ValueError) as err:
            logger.info("submit relay: request dropped: %s", err)
            writer.close()
            return
        with contextlib.suppress(ConnectionError):
            writer.write(_response(status, body))
            await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, host, port)


async def _answer(
    reader: asyncio.StreamReader, key: Key, submit: Callable[[RelayRequest], Awaitable[SubmitResult]]
) -> tuple[int, bytes]:
    first, headers, body = await asyncio.wait_for(_read_message(reader), ANSWER_SECONDS)
    method, path = first[0], first[1]
    if method != "POST" or path != PATH:
        return 404, b"not found"
    if not hmac.compare_digest(headers.get(SIGNATURE_HEADER, ""), sign(key(), body)):
        logger.warning("submit relay: a request with a wrong signature was refused")
        return 401, b"wrong signature"
    try:
        request = RelayRequest.model_validate_json(body)
    except ValidationError as err:
        return 400, str(err).encode()
    try:
        result = await submit(request)
    except Exception as err:  # the follower retries; its retry looks for the job this one may have made
        logger.warning("submit relay: submit for %s failed: %s", request.input.workflow_id, err)
        return 500, f"{type(err).__name__}: {err}".encode()
    logger.info("submit relay: submitted for %s: job %s", request.input.workflow_id, result.job_id)
    return 200, result.model_dump_json().encode()


async def _read_message(reader: asyncio.StreamReader) -> tuple[list[str], dict[str, str], bytes]:
    """One HTTP/1.1 message: its first line (split), its headers (names in lower case), its body."""
    first = (await reader.readline()).decode("latin-1").split()
    if len(first) < 2:
        raise ValueError("no request or status line")
    headers = await _read_headers(reader)
    length = int(headers.get("content-length", "0"))
    if not 0 <= length <= MAX_BODY:
        raise ValueError(f"a body of {length} bytes")
    return first, headers, await reader.readexactly(length)


async def _read_headers(reader: asyncio.StreamReader) -> dict[str, str]:
    headers: dict[str, str] = {}
    while True:
        raw = (await reader.readline()).decode("latin-1")
        if raw in ("\r\n", "\n", ""):
            return headers
        name, _, value = raw.partition(":")
        headers[name.strip().lower()] = value.strip()


def _response(status: int, body: bytes) -> bytes:
    reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 500: "Internal Server Error"}
    kind = "application/json" if status == 200 else "text/plain"
    head = (
        f"HTTP/1.1 {status} {reason.get(status, 'Error')}\r\nContent-Type: {kind}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class SubmitRelayClient:
    """Implements ``activities.slurm.SubmitRelay`` for a follower.

    Args:
        leader: The leader's relay address (``host:port``) as its Lease says, or None (no leader, or no relay).
        key: The current Slurm JWT.
    """

    def __init__(self, leader: Callable[[], str | None], key: Key) -> None:
        self.leader = leader
        self.key = key

    async def submit(self, data: SubmitInput, attempt: int) -> SubmitResult | None:
        address = self.leader()
        if not address:
            return self._local()
        host, _, port = address.rpartition(":")
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), CONNECT_SECONDS)
        except (OSError, TimeoutError, ValueError) as err:
            logger.info("submit relay: leader at %s not reached (%s); submitting here", address, err)
            return self._local()
        body = RelayRequest(attempt=attempt, input=data).model_dump_json().encode()
        head = (
            f"POST {PATH} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{SIGNATURE_HEADER}: {sign(self.key(), body)}\r\nConnection: close\r\n\r\n"
        )
        try:
            writer.write(head.encode() + body)
            await writer.drain()
            first, _, answer = await asyncio.wait_for(_read_message(reader), ANSWER_SECONDS)
            status = int(first[1])
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as err:
            telemetry.SUBMIT_RELAY.labels("unanswered").inc()
            raise ApplicationError(
                f"the leader's submit relay at {address} did not answer ({type(err).__name__}: {err}); the retry "
                "looks for the job it may have made",
                type="SubmitRelayUnanswered",
            ) from err
        finally:
            writer.close()
        if status == 200:
            telemetry.SUBMIT_RELAY.labels("relayed").inc()
            return SubmitResult.model_validate_json(answer)
        if status == 500:
            telemetry.SUBMIT_RELAY.labels("failed").inc()
            raise ApplicationError(
                f"the leader's submit failed: {answer.decode(errors='replace')[:500]}", type="SubmitRelayFailed"
            )
        # 401 (a JWT rotated between replicas), 404 or 400 (another version): the leader did nothing.
        logger.warning("submit relay at %s answered %s (%s); submitting here", address, status, answer[:200])
        return self._local()

    @staticmethod
    def _local() -> SubmitResult | None:
        """None: the caller submits here (the leader was not reached, or refused before doing anything)."""
        telemetry.SUBMIT_RELAY.labels("local").inc()
        return None
