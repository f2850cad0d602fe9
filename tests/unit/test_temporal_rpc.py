"""``slinky.clients.temporal_rpc``: rows and answers read back as the workers' converter wrote them, and a
process leaves without finalizing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from temporalio.api.common.v1 import SearchAttributes, WorkflowExecution
from temporalio.api.enums.v1 import WorkflowExecutionStatus
from temporalio.api.workflow.v1 import WorkflowExecutionInfo
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.converter import encode_search_attributes

from slinky.bridge.models.workload import Phase, WhyPending
from slinky.clients.temporal import data_converter
from slinky.clients.temporal_rpc import WorkflowRow, decode_payload


def _info(status: int, attributes: TypedSearchAttributes) -> WorkflowExecutionInfo:
    encoded = SearchAttributes()
    encode_search_attributes(attributes, encoded)
    return WorkflowExecutionInfo(
        execution=WorkflowExecution(workflow_id="workload/ns/u", run_id="r"),
        status=status,  # type: ignore[arg-type]
        search_attributes=encoded,
    )


def test_a_row_has_the_status_name_and_the_search_attributes_as_the_workers_set_them() -> None:
    attributes = TypedSearchAttributes(
        [
            SearchAttributePair(SearchAttributeKey.for_keyword("SlinkyPhase"), "Pending"),
            SearchAttributePair(SearchAttributeKey.for_keyword("SlinkySlurmJobId"), "42"),
            SearchAttributePair(SearchAttributeKey.for_keyword_list("SlinkyPods"), ["ns/a", "ns/b"]),
            SearchAttributePair(SearchAttributeKey.for_int("SlinkyAttempts"), 3),
        ]
    )
    row = WorkflowRow.from_info(_info(WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_RUNNING, attributes))
    assert (row.id, row.run_id, row.status) == ("workload/ns/u", "r", "RUNNING")
    assert row.attribute("SlinkyPhase") == "Pending"
    assert row.attribute("SlinkySlurmJobId") == "42"
    assert row.attribute("SlinkyPods") == "ns/a"
    assert row.attribute("SlinkyAttempts") == "3"
    assert row.attribute("SlinkyWorkloadName") == ""
    done = WorkflowRow.from_info(
        _info(WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_CANCELED, TypedSearchAttributes([]))
    )
    assert done.status == "CANCELED"


def test_a_query_answer_is_the_json_the_workers_converter_wrote() -> None:
    why = WhyPending(phase=Phase.PENDING, step="waiting for Slurm", job_id=7, pods=["ns/p"])
    (payload,) = data_converter.payload_converter.to_payloads([why])
    assert WhyPending.model_validate_json(payload.data) == why
    assert decode_payload(payload)["job_id"] == 7
    (null,) = data_converter.payload_converter.to_payloads([None])
    assert decode_payload(null) is None


def test_exit_without_finalizing_flushes_the_logs_and_exits_with_the_code() -> None:
    """The process exits with its code and its last output, and skips finalization (no atexit hook runs)."""
    script = (
        "import atexit, logging, sys\n"
        "from slinky.clients.temporal_rpc import exit_without_finalizing\n"
        "logging.basicConfig(stream=sys.stderr, level=logging.INFO)\n"
        "atexit.register(lambda: print('finalized', flush=True))\n"
        "print('buffered', end='')\n"
        "logging.getLogger('t').info('last words')\n"
        "exit_without_finalizing(3)\n"
    )
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=repo, timeout=60)
    assert done.returncode == 3
    assert done.stdout == "buffered"
    assert "last words" in done.stderr
