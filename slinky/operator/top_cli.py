"""``slinky top``: a terminal view of the operator's Slurm clusters, refreshed in place, for people without
Grafana: per partition its nodes by state, CPUs, jobs and why they wait, the nodes wanted (what an HPA scales
on), then the NodeSets and the scale-ins running now (docs/metrics.md).

Slurm is read through each Controller's slurmrestd as ``slinky clusters`` reads it (a JWT minted from the
Controller's key), with the same pure functions the operator's metrics use (``slurm_metrics``), so the numbers
here are the numbers Prometheus gets. ``--once`` prints one frame (also what a pipe gets).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from slinky.clients.errors import SlinkyError
from slinky.clients.slurm import SlurmApi
from slinky.config import Settings
from slinky.operator import slurm_metrics
from slinky.operator.clusters_cli import SlurmNotAsked, read_controllers, slurm_target
from slinky.operator.clusters_cli import Sources as ClusterSources
from slinky.operator.nodesets_cli import (
    CliError,
    _namespace,
    _now,
    _one_line,
    _table,
    read_nodesets,
    read_scale_ins,
)
from slinky.operator.nodesets_cli import Sources as NodeSetSources

Obj = dict[str, Any]
SLURM_DEADLINE = 10.0
CLEAR = "\x1b[H\x1b[2J"


@dataclass
class ClusterView:
    """One Controller's Slurm as this frame read it (``problem`` when it could not)."""

    namespace: str
    name: str
    url: str = ""
    families: list[slurm_metrics.Family] = field(default_factory=list)
    problem: str = ""


@dataclass
class Frame:
    at: datetime
    clusters: list[ClusterView]
    nodesets: list[Obj]
    scale_ins: list[Obj] | None
    scale_ins_problem: str = ""


def add_parser(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "top", help="partitions, nodes, pending reasons, NodeSets and scale-ins, refreshed in place"
    )
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", default=None, help="Kubernetes namespace (default: default)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between frames (default 2)")
    parser.add_argument("--once", action="store_true", help="print one frame and exit (a pipe always gets one)")
    parser.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    settings = Settings()
    return asyncio.run(run(args, ClusterSources(settings), NodeSetSources(settings)))


async def run(args: argparse.Namespace, clusters: ClusterSources, nodesets: NodeSetSources) -> int:
    once = args.once or not sys.stdout.isatty()
    try:
        while True:
            namespace = None if args.all_namespaces else _namespace(args, clusters.settings)
            frame = await read_frame(clusters, nodesets, namespace)
            text = render(frame)
            print(text if once else CLEAR + text, flush=True)
            if once:
                return 0
            await asyncio.sleep(max(args.interval, 0.5))
    except CliError as err:
        print(f"error: {err}", file=sys.stderr)
    except SlinkyError as err:
        print(f"error: Kubernetes: {err}", file=sys.stderr)
    except (KeyboardInterrupt, asyncio.CancelledError):
        return 0
    finally:
        await clusters.aclose()
        await nodesets.aclose()
    return 1


async def read_frame(clusters: ClusterSources, nodesets: NodeSetSources, namespace: str | None) -> Frame:
    kube = clusters.kube_client()
    controllers = await read_controllers(kube, namespace)
    views = await asyncio.gather(*(read_cluster(clusters, c) for c in controllers))
    sets = await read_nodesets(nodesets.kube_client(), namespace)
    scale_ins: list[Obj] | None = None
    problem = ""
    try:
        client = await nodesets.temporal_client()
        scale_ins = await read_scale_ins(client, namespace, None, include_closed=False, now=_now())
    except CliError as err:
        problem = str(err)
    return Frame(_now(), list(views), sets, scale_ins, problem)


async def read_cluster(sources: ClusterSources, controller: Obj) -> ClusterView:
    """One Controller's Slurm as metric families; never raises (a problem is shown on its line)."""
    meta = controller["metadata"]
    view = ClusterView(meta["namespace"], meta["name"])
    try:
        target = await slurm_target(sources.kube_client(), controller, sources.settings)
    except SlurmNotAsked as err:
        view.problem = f"not asked: {err}"
        return view
    view.url = target.url
    client: SlurmApi | None = None
    try:
        client = sources.slurm(target)
        snapshot = await asyncio.wait_for(slurm_metrics.read_snapshot(client), SLURM_DEADLINE)
        view.families = slurm_metrics.families(snapshot, {}, {})
    except Exception as err:  # refused, 401, unreachable, a bad answer: shown, never a crash
        view.problem = f"unreachable at {target.url}: {_one_line(err) or type(err).__name__}"
    finally:
        if client is not None:
            await client.aclose()
    return view


# ------------------------------------------------------------------------------------------ rendering (pure)
def by_partition(families: Sequence[slurm_metrics.Family]) -> dict[str, dict[str, float]]:
    """partition -> family name -> value (partition families only); pending reasons as ``reason:<r>``."""
    out: dict[str, dict[str, float]] = {}
    for family in families:
        for labels, value in family.samples:
            part = labels.get("partition")
            if part is None:
                continue
            key = f"reason:{labels['reason']}" if "reason" in labels else family.name
            out.setdefault(part, {})[key] = value
    return out


def _reasons(values: Mapping[str, float], most: int = 3) -> str:
    found = sorted(((v, k[len("reason:") :]) for k, v in values.items() if k.startswith("reason:") and v), reverse=True)
    return ", ".join(f"{r} {int(v)}" for v, r in found[:most])


def partition_rows(families: Sequence[slurm_metrics.Family]) -> list[list[Any]]:
    rows = []
    for part, v in sorted(by_partition(families).items()):

        def n(name: str, values: Mapping[str, float] = v) -> int:
            return int(values.get(f"slurm_partition_{name}", 0))

        rows.append(
            [
                part,
                n("nodes"),
                n("nodes_idle"),
                n("nodes_alloc") + n("nodes_mixed"),
                n("nodes_drain"),
                n("nodes_down"),
                f"{n('nodes_cpus_alloc')}/{n('cpus')}",
                n("jobs_pending"),
                n("jobs_running"),
                n("nodes_wanted"),
                _reasons(v),
            ]
        )
    return rows


def render(frame: Frame) -> str:
    out = [f"slinky top - {frame.at.strftime('%Y-%m-%d %H:%M:%S')} UTC (Ctrl-C to quit)", ""]
    if not frame.clusters:
        out.append("No Controllers found.")
    for view in frame.clusters:
        where = f" at {view.url}" if view.url else ""
        out.append(f"Cluster {view.namespace}/{view.name}{where}")
        if view.problem:
            out.append(f"  Slurm {view.problem}")
        else:
            headers = ["PARTITION", "NODES", "IDLE", "BUSY", "DRAIN", "DOWN", "CPUS", "PENDING", "RUNNING", "WANTED"]
            out.append(_table([*headers, "WAITING FOR"], partition_rows(view.families), "  "))
        out.append("")
    out.append("NodeSets")
    if frame.nodesets:
        rows = [
            [
                f"{ns['metadata']['namespace']}/{ns['metadata']['name']}",
                (ns.get("spec") or {}).get("replicas", 1),
                (ns.get("status") or {}).get("replicas", 0),
                (ns.get("status") or {}).get("readyReplicas", 0),
                (ns.get("status") or {}).get("slurmIdle", 0),
                (ns.get("status") or {}).get("slurmAllocated", 0),
                (ns.get("status") or {}).get("slurmDrain", 0),
            ]
            for ns in frame.nodesets
        ]
        out.append(_table(["NODESET", "DESIRED", "PODS", "READY", "IDLE", "ALLOCATED", "DRAIN"], rows, "  "))
    else:
        out.append("  No NodeSets.")
    out.append("")
    out.append("Scale-ins running")
    if frame.scale_ins is None:
        out.append(f"  unknown: {frame.scale_ins_problem}")
    elif not frame.scale_ins:
        out.append("  None.")
    else:
        headers = ["NODESET", "POD", "SLURM NODE", "PHASE", "WAITING FOR", "JOBS", "AGE"]
        rows = [
            [f"{r['namespace']}/{r['nodeset']}", r["pod"], r["slurmNode"], r["phase"], r["waitingFor"] or r["note"],
             r["jobs"], r["age"]]
            for r in frame.scale_ins
        ]  # fmt: skip
        out.append(_table(headers, rows, "  "))
        out.append("  (slinky nodesets scale-ins shows the temporal commands that act on them)")
    return "\n".join(out)
