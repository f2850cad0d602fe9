"""The few workflow-service calls the command line makes (list, count, describe, query, cancel), on
``temporalio.service`` alone; and the way out of a process with a Temporal client, without finalizing.

``temporalio.client`` brings the whole SDK with it (workflows, activities, Nexus, the converters): 0.33 s of
imports before the first call on this machine, where ``temporalio.service`` costs 0.17 s, and a short command
like ``slinky workloads list`` is mostly its imports (0.75 s in all with the client, 0.49 s without;
docs/benchmarks.md, "Many open workloads").
Payloads here are the JSON that the workers' pydantic converter writes (``json/plain``), read back as JSON:
search attributes as plain values, a query's answer as the bytes the caller validates into its model.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, NoReturn

from temporalio.api.common.v1 import Payload, WorkflowExecution
from temporalio.api.enums.v1 import QueryRejectCondition, WorkflowExecutionStatus
from temporalio.api.query.v1 import WorkflowQuery
from temporalio.api.workflow.v1 import WorkflowExecutionInfo
from temporalio.api.workflowservice.v1 import (
    CountWorkflowExecutionsRequest,
    DescribeWorkflowExecutionRequest,
    ListWorkflowExecutionsRequest,
    QueryWorkflowRequest,
    RequestCancelWorkflowExecutionRequest,
)
from temporalio.service import ConnectConfig, RPCError, RPCStatusCode, ServiceClient

__all__ = [
    "QueryRejected",
    "RPCError",
    "RPCStatusCode",
    "TemporalUnreachable",
    "WorkflowRow",
    "WorkflowService",
    "decode_payload",
    "exit_without_finalizing",
]

_STATUS_PREFIX = "WORKFLOW_EXECUTION_STATUS_"
CONNECT_SECONDS = 10.0
"""How long a connect may take before the frontend counts as unreachable (an address that drops packets)."""


class QueryRejected(Exception):
    """The workflow did not run the query (its status did not allow it)."""


class TemporalUnreachable(Exception):
    """No connection to the frontend (wrong address, or Temporal down)."""


def decode_payload(payload: Payload) -> Any:
    """A JSON payload's value; ``None`` for a ``binary/null`` one."""
    if not payload.data:
        return None
    return json.loads(payload.data)


def _status(value: int) -> str:
    """``RUNNING``, ``COMPLETED``, ... as ``temporalio.client.WorkflowExecutionStatus`` names them."""
    return str(WorkflowExecutionStatus.Name(value)).removeprefix(_STATUS_PREFIX)  # type: ignore[arg-type]


@dataclass(frozen=True)
class WorkflowRow:
    """One execution as visibility or describe returns it."""

    id: str
    run_id: str
    status: str
    search_attributes: Mapping[str, Any] = field(default_factory=dict)

    def value(self, name: str) -> Any:
        """A search attribute's value: the first of a list (as the SDK's untyped API writes them), None when unset."""
        value = self.search_attributes.get(name)
        if isinstance(value, list):
            return value[0] if value else None
        return value

    def attribute(self, name: str) -> str:
        """A search attribute as text, ``""`` when unset."""
        value = self.value(name)
        return "" if value is None else str(value)

    @classmethod
    def from_info(cls, info: WorkflowExecutionInfo) -> WorkflowRow:
        """From visibility's or describe's ``WorkflowExecutionInfo``."""
        fields = info.search_attributes.indexed_fields
        return cls(
            id=info.execution.workflow_id,
            run_id=info.execution.run_id,
            status=_status(info.status),
            search_attributes={name: decode_payload(fields[name]) for name in fields},
        )


class WorkflowService:
    """A namespace's workflows through the frontend's gRPC service."""

    def __init__(self, service: ServiceClient, namespace: str) -> None:
        self._service = service.workflow_service
        self.namespace = namespace

    @classmethod
    async def connect(cls, address: str, namespace: str, timeout: float = CONNECT_SECONDS) -> WorkflowService:
        try:
            service = await asyncio.wait_for(ServiceClient.connect(ConnectConfig(target_host=address)), timeout)
        except (RuntimeError, TimeoutError) as err:  # RuntimeError: how the SDK's core reports a failed connect
            raise TemporalUnreachable(f"cannot reach Temporal at {address}: {err or 'no answer'}") from err
        return cls(service, namespace)

    async def list(self, query: str, limit: int | None = None) -> list[WorkflowRow]:
        """Executions matching a visibility query, in visibility's order; at most ``limit``."""
        rows: list[WorkflowRow] = []
        token = b""
        while True:
            page_size = min(1000, limit - len(rows)) if limit else 1000
            resp = await self._service.list_workflow_executions(
                ListWorkflowExecutionsRequest(
                    namespace=self.namespace, query=query, page_size=page_size, next_page_token=token
                ),
                retry=True,
            )
            rows.extend(WorkflowRow.from_info(info) for info in resp.executions)
            token = resp.next_page_token
            if not token or (limit and len(rows) >= limit):
                return rows[:limit] if limit else rows

    async def count(self, query: str) -> int:
        resp = await self._service.count_workflow_executions(
            CountWorkflowExecutionsRequest(namespace=self.namespace, query=query), retry=True
        )
        return int(resp.count)

    async def describe(self, workflow_id: str) -> WorkflowRow:
        resp = await self._service.describe_workflow_execution(
            DescribeWorkflowExecutionRequest(
                namespace=self.namespace, execution=WorkflowExecution(workflow_id=workflow_id)
            ),
            retry=True,
        )
        return WorkflowRow.from_info(resp.workflow_execution_info)

    async def query(
        self, workflow_id: str, name: str, timeout: timedelta | None = None, *, only_open: bool = False
    ) -> bytes:
        """The query's answer as the JSON its handler returned; ``RPCError`` when no worker answered in time.
        ``only_open``: a closed workflow's query is rejected by the server (``QueryRejected``), not replayed by a
        worker."""
        resp = await self._service.query_workflow(
            QueryWorkflowRequest(
                namespace=self.namespace,
                execution=WorkflowExecution(workflow_id=workflow_id),
                query=WorkflowQuery(query_type=name),
                query_reject_condition=(
                    QueryRejectCondition.QUERY_REJECT_CONDITION_NOT_OPEN
                    if only_open
                    else QueryRejectCondition.QUERY_REJECT_CONDITION_UNSPECIFIED
                ),
            ),
            timeout=timeout,
        )
        if resp.HasField("query_rejected"):
            raise QueryRejected(f"query {name!r} rejected: workflow {_status(resp.query_rejected.status)}")
        payloads = resp.query_result.payloads
        return bytes(payloads[0].data) if payloads else b"null"

    async def cancel(self, workflow_id: str) -> None:
        await self._service.request_cancel_workflow_execution(
            RequestCancelWorkflowExecutionRequest(
                namespace=self.namespace, workflow_execution=WorkflowExecution(workflow_id=workflow_id)
            ),
            retry=True,
        )


def exit_without_finalizing(code: int) -> NoReturn:
    """Exit with ``code`` once the work is done, without the interpreter's finalization.

    temporalio's Rust threads may still complete a call (one cancelled at shutdown, a client's last RPC) and take
    the GIL to hand back its result; if the interpreter is finalizing by then, CPython 3.11 aborts the process
    ("Fatal Python error: PyGILState_Release ... finalizing", exit -6): seen after short CLI commands and, under
    load, when a worker stopped on SIGTERM. Callers have stopped and closed their clients; only the logs and the
    standard streams need flushing.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
