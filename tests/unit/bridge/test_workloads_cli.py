"""``slinky workloads``: where its options may stand, and the default row limit of ``list``."""

from __future__ import annotations

from typing import Any

import pytest

from slinky import wellknown
from slinky.bridge.models.workload import Phase
from slinky.bridge.workloads_cli import DEFAULT_LIMIT, UNANSWERED, pod_lifecycle_id, why_from_records
from slinky.cli import build_parser
from slinky.clients.temporal_rpc import WorkflowRow


@pytest.mark.parametrize(
    ("argv", "namespace", "json"),
    [
        (["workloads", "why", "p", "-n", "ns"], "ns", False),  # as docs/bridge.md writes it, kubectl's order
        (["workloads", "-n", "ns", "why", "p"], "ns", False),
        (["workloads", "why", "p"], None, False),
        (["workloads", "list", "-n", "a", "--json"], "a", True),
        (["workloads", "--json", "-n", "b", "list"], "b", True),
        (["workloads", "show", "p", "--namespace", "c"], "c", False),
    ],
)
def test_namespace_and_json_may_follow_the_sub_command(argv: list[str], namespace: str | None, json: bool) -> None:
    args = build_parser("workloads").parse_args(argv)
    assert (args.namespace, args.json) == (namespace, json)


def test_list_shows_a_hundred_rows_unless_asked() -> None:
    assert build_parser("workloads").parse_args(["workloads", "list"]).limit == DEFAULT_LIMIT == 100
    assert build_parser("workloads").parse_args(["workloads", "list", "--limit", "0"]).limit == 0


def test_why_without_the_lifecycle_reads_the_search_attributes_and_the_pods_condition() -> None:
    pod = {
        "metadata": {"namespace": "ns", "name": "p"},
        "status": {
            "conditions": [
                {"type": "Initialized", "status": "True"},
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "Slurm job 7 is pending: Priority",
                },
            ]
        },
    }
    lifecycle = WorkflowRow("workload/ns/u", "r", "RUNNING", {"SlinkyPhase": "Pending", "SlinkySlurmJobId": "7"})
    why = why_from_records(lifecycle, pod, "deadline exceeded")
    assert (why.phase, why.job_id, why.reason, why.message, why.pods) == (
        Phase.PENDING,
        7,
        "Unschedulable",
        "Slurm job 7 is pending: Priority",
        ["ns/p"],
    )
    assert why.step.startswith(UNANSWERED) and "deadline exceeded" in why.step


def test_why_without_the_lifecycle_or_the_pod_says_what_little_it_knows() -> None:
    why = why_from_records(WorkflowRow("workload/ns/u", "r", "RUNNING"), None, "no poller")
    assert (why.phase, why.job_id, why.reason, why.pods) == (Phase.SUBMITTING, None, "", [])


def test_an_unreachable_temporal_is_one_line_on_stderr_and_exit_1() -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "SLINKY_TEMPORAL__ADDRESS": "127.0.0.1:1"}
    repo = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-m", "slinky.cli", "workloads", "list"],
        capture_output=True, text=True, cwd=repo, env=env, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("slinky workloads: cannot reach Temporal at 127.0.0.1:1: "), done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def _pod(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": "m",
            "uid": "pod-uid",
            "labels": labels or {},
            "annotations": annotations or {},
        }
    }


def test_a_pending_gang_member_is_resolved_to_its_gangs_lifecycle_not_its_own() -> None:
    """``why`` of a gang member whose gang still waits for members (nothing written on the pod yet) used to ask
    for ``workload/ns/<pod uid>``, which does not exist: "workflow not found"."""
    member = _pod(labels={wellknown.LABEL_POD_GROUP: "g"})
    assert pod_lifecycle_id(member, "pg-uid") == "workload/ns/podgroup/g/pg-uid"
    assert pod_lifecycle_id(member, None) == "workload/ns/pod-uid", "no gang object: nothing better to ask for"
    lws = _pod(labels={wellknown.LABEL_LWS_NAME: "w", wellknown.LABEL_LWS_GROUP_KEY: "k0"})
    assert pod_lifecycle_id(lws, "lws-uid") == "workload/ns/leaderworkerset/w/lws-uid/k0"
    assert pod_lifecycle_id(_pod(), None) == "workload/ns/pod-uid"


def test_the_lifecycle_written_on_a_pod_wins() -> None:
    claimed = _pod(
        labels={wellknown.LABEL_POD_GROUP: "g"},
        annotations={wellknown.ANNOTATION_WORKFLOW_ID: "workload/ns/podgroup/g/old"},
    )
    assert pod_lifecycle_id(claimed, "new-uid") == "workload/ns/podgroup/g/old"


def test_a_missing_kubeconfig_is_one_line_on_stderr_and_exit_1() -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "KUBECONFIG": "/nonexistent/kubeconfig", "SLINKY_TEMPORAL__ADDRESS": "127.0.0.1:1"}
    repo = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-m", "slinky.cli", "workloads", "why", "p", "-n", "ns"],
        capture_output=True, text=True, cwd=repo, env=env, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("slinky workloads: cannot read the kubeconfig (FileNotFoundError"), done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
