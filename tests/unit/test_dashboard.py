"""The Grafana dashboard (deploy/dashboards/slinky.json) loads, and every panel's query names a metric that
slinky-temporal serves: Slurm's families, the bridge's and the operator's (collected here, not listed)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from prometheus_client import CollectorRegistry

from slinky import telemetry
from slinky.clients.slurm.models import Diag, JobInfo, Node, Partition
from slinky.operator import slurm_metrics
from workers.operator.metrics import OperatorCollector
from workers.operator.nodeset.poll import ControllerPoll
from workers.operator.workqueue import WorkQueue

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "dashboards" / "slinky.json"
METRIC = re.compile(r"\b((?:slurm|slinky)_[a-z0-9_]+)")
LABELS = re.compile(r"by \(([^)]*)\)")


def served() -> dict[str, set[str]]:
    """Sample name -> its label names, from the real collectors over a small cluster."""
    snapshot = slurm_metrics.Snapshot(
        nodes=[Node(name="n", state=["IDLE"], partitions=["cpu"], cpus=4)],
        jobs=[JobInfo(job_id=1, job_state=["PENDING"], partition="cpu", state_reason="Resources")],
        partitions=[Partition(name="cpu")],
        diag=Diag.model_validate({"schedule_cycle_last": 1, "schedule_cycle_mean": 1, "bf_cycle_last": 1}),
    )
    poll = ControllerPoll(polls=1, synced=True, polled_at=1.0)
    poll.metrics = slurm_metrics.families(snapshot, {"namespace": "ns", "controller": "c"}, {"cpu": "cpu"})
    nodesets = SimpleNamespace(
        polls={("ns", "c"): poll},
        pods={},
        nodesets={("ns", "cpu"): {"status": {}}},
    )
    runtime = SimpleNamespace(queues={"NodeSet": WorkQueue(), "Token": WorkQueue()})
    tokens = SimpleNamespace(mints=0)
    registry = CollectorRegistry()
    registry.register(OperatorCollector(cast(Any, runtime), cast(Any, nodesets), cast(Any, tokens)))
    out: dict[str, set[str]] = {}
    for reg in (registry, telemetry.REGISTRY):
        for family in reg.collect():
            for sample in family.samples:
                out.setdefault(sample.name, set()).update(sample.labels)
            out.setdefault(family.name, set())
    # A labelled metric with no sample yet shows no labels: take them from the metric itself.
    for collector, names in telemetry.REGISTRY._collector_to_names.items():
        for name in names:
            out.setdefault(name, set()).update(getattr(collector, "_labelnames", ()))
    for name in ("slinky_bridge_pod_create_to_bound_seconds",):  # histograms: buckets appear once observed
        out.setdefault(f"{name}_bucket", set()).add("le")
    return out


def test_the_dashboard_loads_and_names_only_metrics_we_serve() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 20 and len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    known = served()
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}" and panel["gridPos"]["w"] > 0
        for target in panel["targets"]:
            names = METRIC.findall(target["expr"])
            assert names, f"{panel['title']}: no metric in {target['expr']}"
            for name in names:
                family = re.sub(r"_(total|bucket|sum|count)$", "", name)
                assert name in known or family in known, f"{panel['title']}: {name} is not served"
                labels = known.get(name) or known.get(family) or set()
                for group in LABELS.findall(target["expr"]):
                    for label in (g.strip() for g in group.split(",")):
                        assert label == "le" or label in labels, f"{panel['title']}: {name} has no label {label}"


def test_its_sections_cover_slurm_the_bridge_and_the_operator() -> None:
    text = DASHBOARD.read_text()
    for prefix in (
        "slurm_partition_jobs_pending",
        "slinky_bridge_",
        "slinky_operator_",
        "slurm_partition_nodes_wanted",
    ):
        assert prefix in text
