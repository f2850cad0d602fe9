"""bench/operator.py's smoke run (``--quick``: 2 pods): it completes, reports every figure, counts the operator's
own scale-ins only, and leaves nothing behind (pods, namespace, Slurm nodes). No timed assertion: the figures
are in docs/benchmarks.md."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench import operator as bench_operator
from tests.integration.cluster import Kube, Slurm
from tests.integration.nodeset_jobs import slurm_node

pytestmark = pytest.mark.integration

SUMMARY_KEYS = (
    "by_hand_all_idle_s",
    "scale_out_all_idle_s",
    "scale_out_vs_by_hand",
    "scale_in_drained_to_terminating_p50_s",
    "scale_in_drained_to_terminating_p99_s",
    "scale_in_total_s",
    "slurm_requests_per_reconcile",
    "reconcile_own_requests_per_reconcile",
    "slurm_requests_per_poll",
    "node_lists_per_poll",
    "scale_in_per_node_requests_per_pod",
)


@pytest.mark.timeout(120)
def test_quick_run_reports_every_figure_and_leaves_nothing(
    dev_env: dict[str, str], kube: Kube, slurm: Slurm, tmp_path: Path
) -> None:
    out = tmp_path / "operator.json"
    assert bench_operator.main(["--quick", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    summary = report["summary"]
    for key in SUMMARY_KEYS:
        assert isinstance(summary[key], int | float) and math.isfinite(summary[key]), (key, summary[key])
    assert summary["by_hand_all_idle_s"] > 0 and summary["scale_out_all_idle_s"] > 0

    (round_,) = report["rounds_detail"]
    # The benchmark's own 25 ms poll sees most drains; a drain shorter than one slow GET nodes on a busy machine
    # can slip between two polls (it then counts nowhere). The histories below prove both drained first.
    seen = round_["scale_in"]["drained_to_terminating"]["n"]
    assert seen >= 1 and seen + len(round_["scale_in"]["never_seen_drained"]) == 2

    # Only this run's operator drained this run's pods, each scale-in ran to its end.
    workflows = report["scale_in_workflows"]
    assert workflows["ours"] == 2 and workflows["other_task_queues"] == 0
    assert workflows["statuses"] == {"COMPLETED": 2}
    assert workflows["drain_to_delete"]["n"] == 2

    # One node list per poll, none per pod: every GET nodes is a poll's (one may be in flight at a snapshot).
    calls = [report["rest"][phase] for phase in ("scale_out", "idle", "scale_in")]
    assert abs(sum(c["node_lists"] for c in calls) - sum(c["polls"] for c in calls)) <= 1
    assert summary["reconcile_own_requests_per_reconcile"] == 0

    # Cleaned up: no pod left, the namespace is gone or going, no Slurm node of the run.
    assert report["cleanup"] == {"pods_left_after_60s": 0, "scale_ins_terminated": 0}
    assert kube.namespace_gone_or_going(report["namespace"])
    name = report["nodeset"]
    for node in (f"{name}-0", f"{name}-1", f"{name}h-0", f"{name}h-1"):
        assert slurm_node(slurm, node) is None, node
