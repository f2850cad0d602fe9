"""bench/cluster.py's smoke run (``--quick``: 2 config changes per mode, 1 controller pod deletion): it completes,
reports every figure (positive and finite), in-place changes keep the slurmctld process and restart-mode changes
make a new pod, and it leaves nothing behind (its ``slinky-bench-*`` network namespaces, its processes, its
Kubernetes namespace). No timed assertion: the figures go to docs/benchmarks.md."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench import cluster as bench_cluster
from tests.integration.cluster import Kube

pytestmark = pytest.mark.integration

SUMMARY_KEYS = (
    "apply_to_job_s",
    "by_hand_to_job_s",
    "apply_to_job_vs_by_hand",
    *(
        f"{series}_{stat}"
        for series in (
            "reconfigure_restart",
            "reconfigure_restart_workflow",
            "reconfigure_inplace",
            "reconfigure_inplace_workflow",
            "by_hand_restart_conf",
            "by_hand_reconfigure",
            "controller_pod_deleted",
            "by_hand_ctld_restart",
        )
        for stat in ("p50_s", "p90_s", "max_s")
    ),
    "reconfigure_restart_vs_by_hand",
    "reconfigure_inplace_vs_by_hand",
    "controller_pod_deleted_vs_by_hand",
)


@pytest.mark.timeout(300)
def test_quick_run_reports_every_figure_and_leaves_nothing(dev_env: dict[str, str], kube: Kube, tmp_path: Path) -> None:
    before = set(bench_cluster.bench_namespaces())
    out = tmp_path / "cluster.json"
    # One change per mode (a restart-mode change makes a new pod on a real node: about 20 s).
    assert bench_cluster.main(["--changes", "1", "--deletions", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())

    summary = report["summary"]
    assert set(summary) == set(SUMMARY_KEYS)
    for key in SUMMARY_KEYS:
        value = summary[key]
        assert isinstance(value, int | float) and math.isfinite(value) and value > 0, (key, value)

    # Step 1: the job ran on both sides; the operator's breakdown is there.
    for side in ("apply_to_job", "by_hand_to_job"):
        assert report[side]["states_seen"][-1] in ("RUNNING", "COMPLETING", "COMPLETED"), report[side]
    assert report["apply_to_job"]["slurmctld_pods_made"] >= 1
    assert report["apply_to_job"]["slurmd_pod_created_s"] > 0

    # Step 2: each mode applied at least one change (a rolled-back one is reported, not timed); restart mode
    # makes a new slurmctld, in place keeps the very process.
    assert len(report["reconfigure_restart"]["rounds"]) == len(report["reconfigure_inplace"]["rounds"]) == 1
    restart = [r for r in report["reconfigure_restart"]["rounds"] if r["outcome"] == "applied"]
    inplace = [r for r in report["reconfigure_inplace"]["rounds"] if r["outcome"] == "applied"]
    assert restart and inplace, report["rolled_back"]
    assert all(r["new_pods"] >= 1 and not r["same_process"] for r in restart), restart
    assert all(r["new_pods"] == 0 and r["same_process"] for r in inplace), inplace
    assert len(report["controller_pod_deleted"]) == len(report["by_hand_ctld_restart"]) == 1

    # Nothing left behind: daemons, network namespaces, pods, workflows, the Kubernetes namespace.
    cleanup = report["cleanup"]
    assert cleanup["by_hand"] == {"processes_left": 0}
    assert cleanup["bench_netns_left"] == []
    assert cleanup["pods_left_after_60s"] == 0
    assert isinstance(cleanup["workflows_terminated"], int)
    assert set(bench_cluster.bench_namespaces()) <= before, "a slinky-bench-* network namespace is left"
    assert kube.namespace_gone_or_going(report["namespace"])
