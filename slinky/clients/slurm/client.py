"""The async slurmrestd client.

One :class:`SlurmClient` per process holds one pooled ``httpx.AsyncClient`` with explicit timeouts and a
connection cap below slurmrestd's 124 connections. Reads (GET) are retried with exponential backoff on
:class:`~slinky.clients.errors.SlurmUnavailable`; writes are never retried automatically, because a
timed-out submit may already have created a job (slurm.md §5: a retried ``job/allocate`` made a duplicate).

Every slurmrestd quirk is mapped here and only here, in :func:`map_error` and the few methods that name
one:

* ``GET node/{name}`` of an unknown node answers **200** with an error entry (error_number 0): that is
  :class:`~slinky.clients.errors.SlurmNotFound`.
* ``DELETE job/{id}`` of an unknown job answers 200: :meth:`SlurmClient.cancel_job` returns normally.
* ``GET jobs?update_time=T`` answers ``last_update.number = 0`` when nothing changed:
  :meth:`SlurmClient.list_jobs` keeps ``T`` and reports ``changed=False``.
* ``GET nodes?update_time=T`` answers **304** with no body when no node changed since ``T`` (measured on 26.05):
  :meth:`SlurmClient.list_nodes_since` reports ``changed=False``.
* While slurmctld is down, GETs answer 500 (error_number -1) and POSTs 502 (1800): both are
  :class:`~slinky.clients.errors.SlurmUnavailable`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar

import httpx
from pydantic import ValidationError

from slinky.clients import http
from slinky.clients.errors import (
    ConfigError,
    SlurmConflict,
    SlurmError,
    SlurmErrorEntry,
    SlurmInvalidRequest,
    SlurmNotFound,
    SlurmRejected,
    SlurmUnavailable,
    SlurmUnsupported,
)
from slinky.clients.slurm import versions
from slinky.clients.slurm.auth import SlurmAuth, TokenProvider, token_from_settings
from slinky.clients.slurm.models import (
    CancelResponse,
    ControllerPing,
    Diag,
    DiagResponse,
    JobDescMsg,
    JobInfo,
    JobsResponse,
    JobStatesResponse,
    JobSubmitResponse,
    JobUpdateResponse,
    NewNodeRequest,
    Node,
    NodeResourceLayout,
    NodeResourcesResponse,
    NodesResponse,
    NodeUpdate,
    OpenapiResponse,
    Partition,
    PartitionsResponse,
    PingResponse,
    Reservation,
    ReservationDesc,
    ReservationsResponse,
    SlurmdbdDiag,
    SlurmdbdDiagResponse,
)
from slinky.config import SlurmSettings

__all__ = ["MAX_CONNECTIONS_LIMIT", "JobsPage", "SlurmApi", "SlurmClient", "map_error"]

logger = logging.getLogger(__name__)

# slurmrestd serves at most 124 connections at once; beyond that it stops accepting.
MAX_CONNECTIONS_LIMIT = 124

# Slurm error numbers with a meaning of their own (slurm_errno.h).
_NOT_FOUND_NUMBERS = frozenset({2017, 2018})  # invalid job id, invalid node name
RESERVATION_INVALID = 2053
"""ESLURM_RESERVATION_INVALID: what a DELETE of a reservation that does not exist answers."""
_CONFLICT_NUMBERS = frozenset({2016, 2168})  # nodes busy, node already exists
# An immediate allocation that cannot start now: insufficient priority (a higher-priority job waits), or
# the nodes are busy. Slurm keeps a FAILED record of the attempt (reason BadConstraints) for MinJobAge.
ALLOCATE_NOT_NOW_NUMBERS = frozenset({2013, 2016})
_INVALID_REQUEST_RANGE = range(9000, 10000)  # ESLURM_REST_* and ESLURM_DATA_* (parser) errors
# slurmctld unreachable (SLURMCTLD_COMMUNICATIONS_*) and socket timeouts (SLURM_PROTOCOL_SOCKET_*).
_UNAVAILABLE_RANGES = (range(1800, 1900), range(5000, 5100))
# SLURM_PROTOCOL_AUTHENTICATION_ERROR: a bad or expired token; slurmrestd answers it with HTTP 511,
# which must not look like a 5xx outage worth retrying.
_AUTH_NUMBERS = frozenset({1007})
_AUTH_STATUSES = frozenset({401, 403, 511})

_ResponseT = TypeVar("_ResponseT", bound=OpenapiResponse)


LIST_TIMEOUT_SECONDS = 60.0
"""Read timeout of ``GET jobs`` and ``GET nodes`` (a full list), at least the client's own."""


@dataclass(frozen=True)
class JobsPage:
    """One answer of ``GET jobs[?update_time=T]``.

    Attributes:
        jobs: Every job slurmctld knows (slurmrestd sends the full list, not a delta, when anything
            changed), or [] when nothing changed.
        last_update: The value to pass as ``update_time`` next time. When nothing changed the server
            answers 0 and this keeps the ``update_time`` that was asked.
        changed: False when the server said "No job changes since update_time".
    """

    jobs: list[JobInfo] = field(default_factory=list)
    last_update: int | None = None
    changed: bool = True


@dataclass(frozen=True)
class NodesPage:
    """One answer of ``GET nodes?update_time=T``: every node when any changed (``changed``), else none."""

    nodes: list[Node] = field(default_factory=list)
    last_update: int | None = None
    changed: bool = True


def map_error(
    method: str,
    path: str,
    status_code: int | None,
    entries: list[SlurmErrorEntry],
    *,
    retry_after: float | None = None,
) -> SlurmError:
    """Turn a failed slurmrestd answer into a typed error.

    Slurm's ``error_number`` decides first, because slurmrestd uses 422 for almost everything; the HTTP
    status decides when the number says nothing specific.

    Args:
        method: HTTP method.
        path: Request path.
        status_code: HTTP status of the answer.
        entries: The answer's error entries, already redacted.
        retry_after: Parsed ``Retry-After`` header, if any.

    Returns:
        The error to raise.
    """
    number = entries[0].error_number if entries else None
    detail = "; ".join(f"{e.description or e.error} (error_number={e.error_number}, {e.error})" for e in entries)
    message = f"{method} {path} -> HTTP {status_code}" + (f": {detail}" if detail else "")
    common: dict[str, Any] = {"method": method, "path": path, "status_code": status_code, "errors": entries}
    if method == "GET" and status_code is not None and status_code < 300:
        # Quirk: GET node/{name} of an unknown node is HTTP 200 with an error entry.
        return SlurmNotFound(message, **common)
    if number in _NOT_FOUND_NUMBERS:
        return SlurmNotFound(message, **common)
    if number in _CONFLICT_NUMBERS:
        return SlurmConflict(message, **common)
    if number is not None and number in _INVALID_REQUEST_RANGE:
        return SlurmInvalidRequest(message, **common)
    if number in _AUTH_NUMBERS or status_code in _AUTH_STATUSES:
        return SlurmRejected(message, **common)
    if number is not None and any(number in span for span in _UNAVAILABLE_RANGES):
        return SlurmUnavailable(message, retry_after=retry_after, outcome_unknown=method != "GET", **common)
    if status_code == 404:
        return SlurmNotFound(message, **common)
    if status_code == 409:
        return SlurmConflict(message, **common)
    if status_code == 400:
        return SlurmInvalidRequest(message, **common)
    if status_code is not None and (status_code == 429 or status_code >= 500):
        # 500 (error_number -1) is what GETs answer while slurmctld is down; 502/503 likewise.
        return SlurmUnavailable(message, retry_after=retry_after, outcome_unknown=method != "GET", **common)
    return SlurmRejected(message, **common)


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # An HTTP date: slurmrestd never sends one, so not worth parsing.


class SlurmApi(Protocol):
    """What the product needs from Slurm; :class:`SlurmClient` and the fake both provide it."""

    api_version: str

    async def ping(self) -> list[ControllerPing]: ...
    async def submit_job(self, job: JobDescMsg, *, script: str | None = None) -> int: ...
    async def allocate_job(self, job: JobDescMsg) -> int: ...
    async def get_job(self, job_id: int) -> JobInfo: ...
    async def list_jobs(self, update_time: int | None = None) -> JobsPage: ...
    async def job_states(self, job_ids: Collection[int] | None = None) -> dict[int, list[str]]: ...
    async def update_job(self, job_id: int, update: JobDescMsg) -> None: ...
    async def cancel_job(self, job_id: int, *, signal: str | None = None) -> None: ...
    async def get_job_resources(self, job_id: int) -> list[NodeResourceLayout]: ...
    async def list_nodes(self, update_time: int | None = None) -> list[Node]: ...
    async def list_nodes_since(self, update_time: int | None) -> NodesPage: ...
    async def get_node(self, name: str) -> Node: ...
    async def update_node(self, name: str, update: NodeUpdate) -> None: ...
    async def drain_node(self, name: str, reason: str) -> None: ...
    async def resume_node(self, name: str) -> None: ...
    async def create_node(self, node_conf: str) -> None: ...
    async def delete_node(self, name: str) -> None: ...
    async def list_partitions(self) -> list[Partition]: ...
    async def list_reservations(self) -> list[Reservation]: ...
    async def get_reservation(self, name: str) -> Reservation: ...
    async def upsert_reservation(self, desc: ReservationDesc) -> None: ...
    async def delete_reservation(self, name: str) -> None: ...
    async def diag(self) -> Diag: ...
    async def slurmdbd_diag(self) -> SlurmdbdDiag: ...
    async def reconfigure(self) -> None: ...
    async def aclose(self) -> None: ...


class SlurmClient:
    """Typed async client for slurmrestd.

    Create one per process (it owns a connection pool) and close it with :meth:`aclose` or ``async with``.

    Args:
        base_url: slurmrestd's URL, e.g. ``http://127.0.0.1:6820``.
        user_name: Sent as ``X-SLURM-USER-NAME``.
        token: Where the JWT comes from; None sends no token.
        api_version: Data parser version, v0.0.42-v0.0.45.
        timeout_seconds: Read/write timeout per request.
        connect_timeout_seconds: Connect timeout.
        max_connections: Pool size; must stay below slurmrestd's 124.
        read_retries: Extra attempts for a GET that failed with :class:`SlurmUnavailable`.
        retry_backoff_seconds: First backoff; doubles per attempt, with jitter.
        transport: An httpx transport, e.g. ``httpx.MockTransport`` in tests.

    Raises:
        ConfigError: An unsupported version or a connection cap out of range.
    """

    def __init__(
        self,
        base_url: str,
        *,
        user_name: str = "slurm",
        token: TokenProvider | None = None,
        api_version: str = versions.DEFAULT_API_VERSION,
        timeout_seconds: float = 10.0,
        connect_timeout_seconds: float = 3.0,
        max_connections: int = 32,
        read_retries: int = 2,
        retry_backoff_seconds: float = 0.2,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.api_version = versions.validate_version(api_version)
        if not 0 < max_connections < MAX_CONNECTIONS_LIMIT:
            raise ConfigError(
                f"max_connections must be between 1 and {MAX_CONNECTIONS_LIMIT - 1}, got {max_connections}"
            )
        self._auth = SlurmAuth(user_name, token)
        self._read_retries = max(0, read_retries)
        self._backoff = retry_backoff_seconds
        self._list_timeout = httpx.Timeout(
            max(LIST_TIMEOUT_SECONDS, timeout_seconds), connect=connect_timeout_seconds, pool=2 * timeout_seconds
        )
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            auth=self._auth,
            # A request waits for a pooled connection up to twice the read timeout: under load (thousands of
            # lifecycles submitting after a restart) a queue is the answer, and the caller's deadline bounds it.
            timeout=httpx.Timeout(timeout_seconds, connect=connect_timeout_seconds, pool=2 * timeout_seconds),
            limits=limits,
            transport=transport or http.transport(limits=limits),
            headers={"Accept": "application/json"},
        )

    @classmethod
    def from_settings(cls, settings: SlurmSettings, **overrides: Any) -> SlurmClient:
        """Build a client from ``Settings().slurm``; a token file wins over a static token.

        Args:
            settings: The Slurm settings group.
            **overrides: Keyword arguments of the constructor to override (e.g. ``transport``).
        """
        token = token_from_settings(settings)
        kwargs: dict[str, Any] = {
            "user_name": settings.user_name,
            "token": token,
            "api_version": settings.api_version,
            "timeout_seconds": settings.timeout_seconds,
            "connect_timeout_seconds": settings.connect_timeout_seconds,
            "max_connections": settings.max_connections,
        }
        kwargs.update(overrides)
        return cls(settings.rest_url, **kwargs)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    def __repr__(self) -> str:
        return f"SlurmClient({str(self._http.base_url)!r}, api_version={self.api_version!r})"

    # --- plumbing ---------------------------------------------------------------------------------------

    def _path(self, tail: str, *, version: str | None = None) -> str:
        return f"/slurm/{version or self.api_version}/{tail}"

    def _redact(self, text: str) -> str:
        token = self._auth.current_token()
        return text.replace(token, "***") if token and token in text else text

    def _entries(self, data: Any) -> list[SlurmErrorEntry]:
        raw = data.get("errors") if isinstance(data, dict) else None
        entries: list[SlurmErrorEntry] = []
        for item in raw or []:
            if not isinstance(item, dict):
                continue
            number = item.get("error_number")
            entries.append(
                SlurmErrorEntry(
                    error_number=number if isinstance(number, int) else None,
                    error=self._redact(str(item.get("error", ""))),
                    description=self._redact(str(item.get("description", ""))),
                    source=self._redact(str(item.get("source", ""))),
                )
            )
        return entries

    async def _send(
        self, method: str, path: str, *, params: Mapping[str, Any] | None, body: Any
    ) -> tuple[int, bytes, httpx.Headers]:
        """One HTTP request: status, the raw body, headers. A full list of jobs or nodes gets a longer read
        timeout: thousands of jobs are tens of megabytes (4,000: 33 MB in 4.6 s, measured)."""
        started = time.perf_counter()
        listing = method == "GET" and path.endswith(("/jobs", "/nodes"))
        try:
            response = await self._http.request(
                method,
                path,
                params=params,
                json=body,
                timeout=self._list_timeout if listing else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.TransportError as exc:
            # A connect failure means nothing reached the server; any later failure of a write may
            # have been applied.
            not_sent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
            logger.debug("%s %s failed: %s", method, path, type(exc).__name__)
            raise SlurmUnavailable(
                f"{method} {path}: slurmrestd unreachable ({type(exc).__name__})",
                method=method,
                path=path,
                outcome_unknown=method != "GET" and not not_sent,
            ) from exc
        elapsed_ms = (time.perf_counter() - started) * 1000
        logger.debug("%s %s -> %s in %.1f ms", method, path, response.status_code, elapsed_ms)
        return response.status_code, response.content, response.headers

    async def _call(
        self,
        method: str,
        path: str,
        model: type[_ResponseT],
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
    ) -> _ResponseT:
        attempts = 1 + (self._read_retries if method == "GET" else 0)
        delay = self._backoff
        for attempt in range(attempts):
            try:
                return await self._call_once(method, path, model, params=params, body=body)
            except SlurmUnavailable as exc:
                if attempt + 1 >= attempts:
                    raise
                wait = exc.retry_after if exc.retry_after is not None else delay * (1 + random.random() / 2)
                logger.debug("retrying %s %s in %.2f s after %s", method, path, wait, type(exc).__name__)
                await asyncio.sleep(wait)
                delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    async def _call_once(
        self,
        method: str,
        path: str,
        model: type[_ResponseT],
        *,
        params: Mapping[str, Any] | None,
        body: Any,
    ) -> _ResponseT:
        status, content, headers = await self._send(method, path, params=params, body=body)
        return self._answer(method, path, model, status, content, headers)

    def _answer(
        self, method: str, path: str, model: type[_ResponseT], status: int, content: bytes, headers: httpx.Headers
    ) -> _ResponseT:
        """The validated answer, or the typed error it carries."""
        if status < 300 and content:
            # The common case, parsed and validated in one pass by pydantic-core (no Python JSON tree first:
            # json.loads was the largest single cost of the bridge worker's job polls).
            try:
                answer = model.model_validate_json(content)
            except ValidationError:
                pass  # an error entry or an unexpected shape: the slow path below says which
            else:
                if not answer.errors:
                    for note in answer.warnings:
                        logger.debug("slurmrestd warning on %s %s: %s", method, path, note.description)
                    return answer
        data: Any = None
        if content:
            try:
                data = json.loads(content)
            except ValueError:
                data = None
        entries = self._entries(data)
        if status >= 300 or entries:
            raise map_error(method, path, status, entries, retry_after=_retry_after(headers))
        for warning in (data or {}).get("warnings", []) if isinstance(data, dict) else []:
            if isinstance(warning, dict):
                logger.debug("slurmrestd warning on %s %s: %s", method, path, warning.get("description"))
        return _validate(model, data or {}, method, path, status)

    # --- ping, diag, versions ---------------------------------------------------------------------------

    async def ping(self) -> list[ControllerPing]:
        """Ping the controllers.

        slurmrestd answers 200 even when slurmctld is down (``responding`` is False then) and even with a
        bad token, so this is no auth check.
        """
        return (await self._call("GET", self._path("ping"), PingResponse)).pings

    async def diag(self) -> Diag:
        """Controller statistics (``sdiag``)."""
        return (await self._call("GET", self._path("diag"), DiagResponse)).statistics

    async def slurmdbd_diag(self) -> SlurmdbdDiag:
        """slurmdbd's statistics (``GET /slurmdb/<version>/diag``, the slurmdbd plugin of slurmrestd).

        slurmdbd answers only with its database: a database down raises :class:`SlurmUnavailable` whose
        ``error`` is slurmdbd's own ("Unable to connect to database", error 7000).
        """
        path = f"/slurmdb/{self.api_version}/diag"
        return (await self._call("GET", path, SlurmdbdDiagResponse)).statistics

    async def reconfigure(self) -> None:
        """``scontrol reconfigure`` (``GET reconfigure``): slurmctld re-reads its configuration, re-executing
        itself in place (its statistics' ``req_time_start`` moves to now). A config it rejects ends it."""
        await self._call("GET", self._path("reconfigure") + "/", OpenapiResponse)

    async def served_versions(self) -> tuple[str, ...]:
        """Ask which of the supported API versions the server serves (one ping per version).

        Returns:
            The served versions, oldest first.

        Raises:
            SlurmUnavailable: slurmrestd does not answer.
        """
        served: list[str] = []
        for version in versions.SUPPORTED_API_VERSIONS:
            try:
                await self._call_once("GET", self._path("ping", version=version), PingResponse, params=None, body=None)
            except SlurmNotFound:
                continue
            except SlurmRejected:
                # Answered, so the path exists (e.g. 401 for this version's auth).
                pass
            served.append(version)
        return tuple(served)

    async def check_version(self) -> None:
        """Check that the server serves this client's API version.

        Raises:
            SlurmUnsupported: It does not.
        """
        served = await self.served_versions()
        if self.api_version not in served:
            raise SlurmUnsupported(
                f"API {self.api_version} (server serves {', '.join(served) or 'none'})",
                self.api_version,
                self.api_version,
            )

    # --- jobs -------------------------------------------------------------------------------------------

    async def submit_job(self, job: JobDescMsg, *, script: str | None = None) -> int:
        """Submit a job; never retried automatically.

        Args:
            job: The job description. An external job sets ``flags=["EXTERNAL_JOB"]`` and no script.
            script: A batch script, for jobs that run on real slurmd nodes.

        Returns:
            The new job ID.

        Raises:
            SlurmUnsupported: ``EXTERNAL_JOB`` on v0.0.42.
            SlurmRejected: Slurm refused the job (2014 no such node configuration, 2000 bad partition...).
            SlurmInvalidRequest: Malformed, e.g. no script and no ``EXTERNAL_JOB`` (9000).
            SlurmUnavailable: slurmctld is unreachable; ``outcome_unknown`` tells if a job may exist.
        """
        if job.flags and "EXTERNAL_JOB" in job.flags:
            versions.require(self.api_version, versions.Feature.EXTERNAL_JOB)
        body: dict[str, Any] = {"job": job.to_request()}
        if script is not None:
            body["script"] = script
        answer = await self._call("POST", self._path("job/submit"), JobSubmitResponse, body=body)
        if answer.job_id is None:
            raise SlurmRejected(
                "POST job/submit answered without a job_id", method="POST", path=self._path("job/submit")
            )
        return answer.job_id

    async def allocate_job(self, job: JobDescMsg) -> int:
        """Allocate nodes for an external job now, or not at all (``job/allocate`` with ``immediate``).

        Unlike :meth:`submit_job`, whose job waits for slurmctld's next scheduler tick (about 0.4 s with
        the tuned ``SchedulerParameters``, 3 s by default), this answers in milliseconds with a RUNNING job.
        Without ``immediate`` slurmrestd would block while no nodes are free, so it is always set. Slurm
        still honours priority: a job that is not at the top of its partition is refused. Never retried.

        Returns:
            The new job ID; the job is RUNNING (read it for its nodes).

        Raises:
            SlurmRejected: It cannot start now (``error_number`` in :data:`ALLOCATE_NOT_NOW_NUMBERS`: 2013
                insufficient priority, 2016 nodes busy; Slurm keeps a FAILED record of the attempt), or
                the same rejections as :meth:`submit_job`.
            SlurmUnsupported: ``EXTERNAL_JOB`` on v0.0.42.
            SlurmUnavailable: slurmctld is unreachable; ``outcome_unknown`` tells if a job may exist.
        """
        if job.flags and "EXTERNAL_JOB" in job.flags:
            versions.require(self.api_version, versions.Feature.EXTERNAL_JOB)
        body = {"job": {**job.to_request(), "immediate": True}}
        path = self._path("job/allocate")
        answer = await self._call("POST", path, JobSubmitResponse, body=body)
        if answer.job_id is None:
            raise SlurmRejected("POST job/allocate answered without a job_id", method="POST", path=path)
        return answer.job_id

    async def get_job(self, job_id: int) -> JobInfo:
        """Read one job.

        Raises:
            SlurmNotFound: Unknown job, or purged after ``MinJobAge``.
        """
        path = self._path(f"job/{job_id}")
        jobs = (await self._call("GET", path, JobsResponse)).jobs
        for job in jobs:
            if job.job_id == job_id:
                return job
        raise SlurmNotFound(f"GET {path} -> job {job_id} not in the answer", method="GET", path=path)

    async def list_jobs(self, update_time: int | None = None) -> JobsPage:
        """List all jobs, or only if anything changed since ``update_time``.

        Args:
            update_time: The ``last_update`` of the previous page; None for a full list.

        Returns:
            The page; ``changed`` is False and ``last_update == update_time`` when nothing changed.
        """
        params = {"update_time": str(update_time)} if update_time is not None else None
        answer = await self._call("GET", self._path("jobs"), JobsResponse, params=params)
        if not answer.last_update:
            # Quirk: last_update.number = 0 means "no job changes since update_time"; keep ours.
            return JobsPage(jobs=answer.jobs, last_update=update_time, changed=bool(answer.jobs))
        return JobsPage(jobs=answer.jobs, last_update=answer.last_update, changed=True)

    async def job_states(self, job_ids: Collection[int] | None = None) -> dict[int, list[str]]:
        """Every job's state flags by ID (``GET jobs/state``): a few bytes per job, about 10x cheaper than
        ``GET jobs``, whose answer slurmrestd renders at roughly 10 KB per job.

        ``job_ids``: only these jobs (an unknown id is left out, not an error). They go as repeated ``job_id``
        parameters: 26.05 answers a comma-separated list (as its OpenAPI describes it) with 500 "Unspecified
        error" (measured). With 10,000 jobs in Slurm, 50 ids took 2 ms and 2,000 ids 44 ms, the whole list 540 ms.
        An empty ``job_ids`` asks nothing.
        """
        if job_ids is not None:
            if not job_ids:
                return {}
            params: dict[str, Any] | None = {"job_id": [str(job_id) for job_id in job_ids]}
        else:
            params = None
        data = await self._call("GET", self._path("jobs/state"), JobStatesResponse, params=params)
        return {int(entry["job_id"]): entry["state"] for entry in data.jobs}

    async def update_job(self, job_id: int, update: JobDescMsg) -> None:
        """Update a job (pending or running); only the fields set in ``update`` are sent.

        The body is a bare ``job_desc_msg``, not wrapped in ``{"job": ...}``.
        """
        await self._call("POST", self._path(f"job/{job_id}"), JobUpdateResponse, body=update.to_request())

    async def cancel_job(self, job_id: int, *, signal: str | None = None) -> None:
        """Cancel a job (or send it ``signal``). Cancelling an unknown or finished job succeeds.

        slurmrestd answers 200 for an unknown job ID, so this is idempotent by construction; an older
        version's 404 is treated the same way.
        """
        params = {"signal": signal} if signal else None
        try:
            await self._call("DELETE", self._path(f"job/{job_id}"), CancelResponse, params=params)
        except SlurmNotFound:
            return

    async def get_job_resources(self, job_id: int) -> list[NodeResourceLayout]:
        """The per-node resource layout of a running job (``GET resources/{job_id}``, v0.0.44+).

        Raises:
            SlurmUnsupported: The API version is older than v0.0.44.
        """
        versions.require(self.api_version, versions.Feature.JOB_RESOURCES)
        return (await self._call("GET", self._path(f"resources/{job_id}"), NodeResourcesResponse)).nodes

    # --- nodes ------------------------------------------------------------------------------------------

    async def list_nodes(self, update_time: int | None = None) -> list[Node]:
        """List nodes (all of them if anything changed since ``update_time``, else [])."""
        params = {"update_time": str(update_time)} if update_time is not None else None
        return (await self._call("GET", self._path("nodes"), NodesResponse, params=params)).nodes

    async def list_nodes_since(self, update_time: int | None) -> NodesPage:
        """Every node if any changed since ``update_time`` (the ``last_update`` of the previous page), else an
        unchanged page that keeps ``update_time``: a 304 with no body, a few bytes instead of ~3 KB per node."""
        params = {"update_time": str(update_time)} if update_time is not None else None
        status, content, headers = await self._send("GET", self._path("nodes"), params=params, body=None)
        if status == 304 and update_time is not None:
            return NodesPage(last_update=update_time, changed=False)
        answer = self._answer("GET", self._path("nodes"), NodesResponse, status, content, headers)
        return NodesPage(nodes=answer.nodes, last_update=answer.last_update or update_time)

    async def get_node(self, name: str) -> Node:
        """Read one node.

        Raises:
            SlurmNotFound: No such node (slurmrestd answers 200 with an error entry).
        """
        path = self._path(f"node/{name}")
        for node in (await self._call("GET", path, NodesResponse)).nodes:
            if node.name == name:
                return node
        raise SlurmNotFound(f"GET {path} -> node {name} not in the answer", method="GET", path=path)

    async def update_node(self, name: str, update: NodeUpdate) -> None:
        """Update a node's state, reason, comment, features...

        Raises:
            SlurmRejected: e.g. 2180 "Invalid node state transition" for ``state=["EXTERNAL"]``.
        """
        await self._call("POST", self._path(f"node/{name}"), OpenapiResponse, body=update.to_request())

    async def drain_node(self, name: str, reason: str) -> None:
        """Drain a node: no new jobs; running jobs keep running. The reason is required by Slurm."""
        await self.update_node(name, NodeUpdate(state=["DRAIN"], reason=reason))

    async def resume_node(self, name: str) -> None:
        """Undo a drain or a down state."""
        await self.update_node(name, NodeUpdate(state=["RESUME"]))

    async def create_node(self, node_conf: str) -> None:
        """Create a node from one ``scontrol create`` line (``POST new/node``, v0.0.44+).

        Args:
            node_conf: e.g. ``NodeName=n1 Sockets=1 CoresPerSocket=8 CPUs=8 RealMemory=16000
                State=EXTERNAL Feature=k8s``. Only CLOUD, EXTERNAL and FUTURE states are accepted.

        Raises:
            SlurmUnsupported: The API version is older than v0.0.44.
            SlurmConflict: The node exists (2168).
            SlurmRejected: Bad state (2028) or another refusal.
        """
        versions.require(self.api_version, versions.Feature.NEW_NODE)
        body = NewNodeRequest(node_conf=node_conf).model_dump(mode="json")
        await self._call("POST", self._path("new/node"), OpenapiResponse, body=body)

    async def delete_node(self, name: str) -> None:
        """Delete a node; only idle or drained nodes can go.

        Raises:
            SlurmConflict: The node is busy (2016).
            SlurmNotFound: No such node (2018).
        """
        await self._call("DELETE", self._path(f"node/{name}"), OpenapiResponse)

    # --- partitions, reservations -----------------------------------------------------------------------

    async def list_partitions(self) -> list[Partition]:
        """List partitions."""
        return (await self._call("GET", self._path("partitions"), PartitionsResponse)).partitions

    async def get_partition(self, name: str) -> Partition:
        """Read one partition.

        Raises:
            SlurmNotFound: No such partition.
        """
        path = self._path(f"partition/{name}")
        for partition in (await self._call("GET", path, PartitionsResponse)).partitions:
            if partition.name == name:
                return partition
        raise SlurmNotFound(f"GET {path} -> partition {name} not in the answer", method="GET", path=path)

    async def list_reservations(self) -> list[Reservation]:
        """List reservations."""
        return (await self._call("GET", self._path("reservations"), ReservationsResponse)).reservations

    async def get_reservation(self, name: str) -> Reservation:
        """Read one reservation, from the list: ``GET reservation/{name}`` of a missing one answers 9000 while
        other reservations exist, and HTTP 422 with error 0 "Unable to query reservations" when none does.

        Raises:
            SlurmNotFound: No such reservation.
        """
        for reservation in await self.list_reservations():
            if reservation.name == name:
                return reservation
        path = self._path(f"reservation/{name}")
        raise SlurmNotFound(f"GET {self._path('reservations')} -> no reservation {name}", method="GET", path=path)

    async def upsert_reservation(self, desc: ReservationDesc) -> None:
        """Create the reservation, or update the one of that name (``POST reservation``).

        Raises:
            SlurmNotFound: a node of ``node_list`` is not in Slurm (2018 "Invalid node name specified").
            SlurmRejected: Slurm refuses it (e.g. nodes busy in another reservation).
        """
        await self._call("POST", self._path("reservation"), OpenapiResponse, body=desc.to_request())

    async def delete_reservation(self, name: str) -> None:
        """Delete a reservation.

        Raises:
            SlurmNotFound: No such reservation (2053 "Requested reservation is invalid").
        """
        path = self._path(f"reservation/{name}")
        try:
            await self._call("DELETE", path, OpenapiResponse)
        except SlurmRejected as err:
            if any(e.error_number == RESERVATION_INVALID for e in err.errors):
                raise SlurmNotFound(str(err), method="DELETE", path=path, errors=err.errors) from None
            raise


def _validate(model: type[_ResponseT], data: Any, method: str, path: str, status: int) -> _ResponseT:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        # Not the server's fault we cannot read it, but callers treat it as a broken answer.
        raise SlurmRejected(
            f"{method} {path} -> HTTP {status}: answer does not match {model.__name__} ({exc.error_count()} errors)",
            method=method,
            path=path,
            status_code=status,
        ) from None
