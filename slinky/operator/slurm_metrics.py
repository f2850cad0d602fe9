"""Slurm's state as Prometheus metric families: a pure function of what slurmrestd answered (nodes, jobs,
partitions, diag), so a scrape never calls slurmrestd and the values are checked against the same answers.

Names are Slurm's own where it has one: those of slurmctld's ``metrics/openmetrics`` plugin (26.05), which
upstream's ServiceMonitor scrapes and its autoscaling recipe queries (``slurm_partition_jobs_pending``), so a
dashboard or a KEDA trigger written for upstream reads these unchanged. What the plugin lacks is added under
the same prefix (``slurm_partition_jobs_pending_reason``: pending jobs by Slurm's reason) or, for the poll
itself, as ``slinky_slurm_*``. Every family is a gauge: Slurm's "since reset" statistics go back to zero when
slurmctld restarts, which a Prometheus counter must not do.

How values are counted (docs/metrics.md):

* a job counts in each partition it names (a pending job may name several); its state is the first item of
  ``job_state``, its flags (``COMPLETING``, ``CONFIGURING``, ``REQUEUED``, ...) the rest; ``hold`` is a pending
  job whose reason is a hold (``JobHeldUser``, ``JobHeldAdmin``) or whose priority is 0;
* a node counts in each partition it belongs to; its base state is the first item of ``state``, its flags the
  rest (``drained``: DRAIN on an idle or down node, ``draining``: DRAIN on an allocated or mixed one);
* CPUs: ``cpus``, ``alloc_cpus`` and their difference (idle); memory in bytes (Slurm's MB x 2^20); GPUs from
  ``gres`` and ``gres_used`` (``gpu[:type]:N``).
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from slinky.clients.errors import SlurmError
from slinky.clients.slurm.client import SlurmApi
from slinky.clients.slurm.models import Diag, JobInfo, Node, Partition

MB: int = 1 << 20

JOB_STATES: Mapping[str, str] = {
    "PENDING": "pending",
    "RUNNING": "running",
    "SUSPENDED": "suspended",
    "COMPLETED": "completed",
    "CANCELLED": "cancelled",
    "FAILED": "failed",
    "TIMEOUT": "timeout",
    "NODE_FAIL": "node_failed",
    "PREEMPTED": "preempted",
    "BOOT_FAIL": "bootfail",
    "DEADLINE": "deadline",
    "OUT_OF_MEMORY": "outofmemory",
}
"""A job's base state -> the suffix of its family (``slurm_partition_jobs_<suffix>``)."""
JOB_FLAGS: Mapping[str, str] = {
    "COMPLETING": "completing",
    "CONFIGURING": "configuring",
    "REQUEUED": "requeued",
    "RESIZING": "resizing",
    "SIGNALING": "signaling",
    "STAGE_OUT": "stageout",
    "POWER_UP_NODE": "powerup_node",
    "REVOKED": "revoked",
}
FINISHED = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                      "DEADLINE", "OUT_OF_MEMORY"})  # fmt: skip
HOLD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin"})

NODE_STATES: Mapping[str, str] = {
    "IDLE": "idle",
    "ALLOCATED": "alloc",
    "MIXED": "mixed",
    "DOWN": "down",
    "FUTURE": "future",
    "UNKNOWN": "unknown",
}
NODE_FLAGS: Mapping[str, str] = {
    "DRAIN": "drain",
    "COMPLETING": "cg",
    "NOT_RESPONDING": "no_resp",
    "MAINTENANCE": "maint",
    "PLANNED": "planned",
    "RESERVED": "resv",
    "FAIL": "fail",
    "CLOUD": "cloud",
    "EXTERNAL": "external",
    "POWERED_DOWN": "powered_down",
    "POWERING_UP": "powering_up",
    "REBOOT_REQUESTED": "reboot_requested",
    "BLOCKED": "blocked",
}

_HELP_STATE = "Number of jobs in {} state"
_GPU = re.compile(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)")


@dataclass
class Family:
    """One metric family: name, help, and samples (labels, value)."""

    name: str
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)


@dataclass(frozen=True)
class Snapshot:
    """What one poll read from slurmrestd."""

    nodes: Sequence[Node] = ()
    jobs: Sequence[JobInfo] = ()
    partitions: Sequence[Partition] = ()
    diag: Diag | None = None


def gpus(gres: str) -> int:
    """GPUs in a ``gres`` or ``gres_used`` string (``gpu:4``, ``gpu:a100:2(IDX:0-1)``, several types summed)."""
    return sum(int(n) for n in _GPU.findall(gres or ""))


def job_partitions(job: JobInfo) -> list[str]:
    return [p for p in (job.partition or "").split(",") if p]


def _base(states: Sequence[str]) -> str:
    return states[0] if states else "UNKNOWN"


def _is_hold(job: JobInfo) -> bool:
    return _base(job.job_state) == "PENDING" and (job.state_reason in HOLD_REASONS or job.priority == 0)


def _node_count(job: JobInfo) -> int:
    return int(job.node_count or 0)


def _memory_alloc(job: JobInfo) -> int:
    """Bytes a running job holds: per node (``memory_per_node`` x nodes) or per CPU (x its CPUs)."""
    if job.memory_per_node:
        return int(job.memory_per_node) * max(_node_count(job), 1) * MB
    if job.memory_per_cpu:
        return int(job.memory_per_cpu) * int(job.cpus or 0) * MB
    return 0


class _Builder:
    """Collects samples per family name, keeping the order families are first met."""

    def __init__(self, base: Mapping[str, str]) -> None:
        self.base = dict(base)
        self.families: dict[str, Family] = {}

    def add(self, name: str, help_: str, value: float, **labels: str) -> None:
        family = self.families.setdefault(name, Family(name, help_))
        family.samples.append(({**self.base, **labels}, float(value)))


def families(
    snapshot: Snapshot,
    base_labels: Mapping[str, str] | None = None,
    nodesets: Mapping[str, str] | None = None,
) -> list[Family]:
    """The metric families of one Slurm cluster.

    Args:
        snapshot: What slurmrestd answered.
        base_labels: Labels on every sample (the operator's ``namespace`` and ``controller``).
        nodesets: Partition -> the NodeSet whose partition it is; partition samples get a ``nodeset`` label
            (``""`` for a partition of no NodeSet).

    Returns:
        The families, each with one sample per partition (partition families), or one (cluster families).
    """
    out = _Builder(base_labels or {})
    # Slurm's partitions (and any a node names): a finished job of a partition deleted since adds none.
    part_names = sorted({p.name for p in snapshot.partitions} | {p for n in snapshot.nodes for p in n.partitions})
    owners = nodesets or {}

    def part_labels(partition: str) -> dict[str, str]:
        labels = {"partition": partition}
        if nodesets is not None:
            labels["nodeset"] = owners.get(partition, "")
        return labels

    _jobs(out, snapshot.jobs, part_names, part_labels)
    _nodes(out, snapshot.nodes, part_names, part_labels)
    _wanted(out, snapshot, part_names, part_labels)
    _cluster(out, snapshot)
    if snapshot.diag is not None:
        _scheduler(out, snapshot.diag)
    return list(out.families.values())


def _state_counts(
    counts: Counter[str], states: Sequence[str], bases: Mapping[str, str], flags: Mapping[str, str]
) -> str:
    """Count one object ("" counts them all) by its base state and its flags; its base state."""
    counts[""] += 1
    base = _base(states)
    for suffix in (bases.get(base), *(flags.get(f) for f in set(states[1:]))):
        if suffix:
            counts[suffix] += 1
    return base


def _job_counts(jobs: Iterable[JobInfo]) -> Counter[str]:
    """Counts by family suffix ("" is all of them)."""
    counts: Counter[str] = Counter()
    for job in jobs:
        base = _state_counts(counts, job.job_state, JOB_STATES, JOB_FLAGS)
        if base in FINISHED:
            counts["finished"] += 1
        if _is_hold(job):
            counts["hold"] += 1
    return counts


def _jobs(out: _Builder, jobs: Sequence[JobInfo], parts: list[str], labels: Any) -> None:
    by_part: dict[str, list[JobInfo]] = defaultdict(list)
    for job in jobs:
        for part in job_partitions(job):
            by_part[part].append(job)
    for part in parts:
        mine = by_part.get(part, [])
        counts = _job_counts(mine)
        lab = labels(part)
        out.add("slurm_partition_jobs", "Number of jobs in this partition", counts[""], **lab)
        for state in (*JOB_STATES.values(), *JOB_FLAGS.values()):
            out.add(f"slurm_partition_jobs_{state}", _HELP_STATE.format(state), counts[state], **lab)
        out.add("slurm_partition_jobs_hold", "Number of jobs in Hold state", counts["hold"], **lab)
        out.add("slurm_partition_jobs_finished", "Number of jobs in Finished", counts["finished"], **lab)
        running = [j for j in mine if _base(j.job_state) == "RUNNING"]
        out.add(
            "slurm_partition_jobs_cpus_alloc",
            "Total number of Cpus allocated by jobs",
            sum(int(j.cpus or 0) for j in running),
            **lab,
        )
        out.add(
            "slurm_partition_jobs_memory_alloc",
            "Total memory bytes allocated by jobs",
            sum(_memory_alloc(j) for j in running),
            **lab,
        )
        pending = [j for j in mine if _base(j.job_state) == "PENDING"]
        unheld = [j for j in pending if not _is_hold(j)]
        out.add(
            "slurm_partition_jobs_min_job_nodes",
            "Max of the min_nodes required of all pending jobs in that partition",
            max((_node_count(j) for j in pending), default=0),
            **lab,
        )
        out.add(
            "slurm_partition_jobs_min_job_nodes_nohold",
            "Max of the min_nodes required of all pending jobs in that partition excluding Held jobs",
            max((_node_count(j) for j in unheld), default=0),
            **lab,
        )
        for reason, n in sorted(Counter(j.state_reason or "None" for j in pending).items()):
            out.add(
                "slurm_partition_jobs_pending_reason",
                "Pending jobs of the partition by Slurm's reason (squeue's NODELIST(REASON))",
                n,
                **lab,
                reason=reason,
            )
        out.add(
            "slurm_partition_jobs_pending_nodes",
            "Nodes the partition's pending (not held) jobs ask for in all (each job's node count, summed)",
            sum(_node_count(j) for j in unheld),
            **lab,
        )


def _node_counts(nodes: Iterable[Node]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for node in nodes:
        base = _state_counts(counts, node.state, NODE_STATES, NODE_FLAGS)
        if "DRAIN" in node.state[1:]:
            counts["drained" if base in ("IDLE", "DOWN") else "draining"] += 1
    return counts


def _nodes(out: _Builder, nodes: Sequence[Node], parts: list[str], labels: Any) -> None:
    by_part: dict[str, list[Node]] = defaultdict(list)
    for node in nodes:
        for part in node.partitions:
            by_part[part].append(node)
    for part in parts:
        mine = by_part.get(part, [])
        counts = _node_counts(mine)
        lab = labels(part)
        out.add("slurm_partition_nodes", "Partition total nodes", counts[""], **lab)
        for state in (*NODE_STATES.values(), *NODE_FLAGS.values(), "drained", "draining"):
            out.add(f"slurm_partition_nodes_{state}", f"Nodes in {state} state", counts[state], **lab)
        cpus = sum(n.cpus for n in mine)
        alloc = sum(n.alloc_cpus for n in mine)
        out.add("slurm_partition_cpus", "Partition total cpus", cpus, **lab)
        out.add("slurm_partition_nodes_cpus_alloc", "Number of allocated cpus", alloc, **lab)
        out.add("slurm_partition_nodes_cpus_idle", "Number of idle CPUs on all nodes", cpus - alloc, **lab)
        total = sum(n.real_memory for n in mine) * MB
        used = sum(n.alloc_memory for n in mine) * MB
        out.add("slurm_partition_nodes_mem_tot", "Total amount of memory of all nodes", total, **lab)
        out.add("slurm_partition_nodes_mem_alloc", "Amount of allocated memory of all nodes", used, **lab)
        out.add("slurm_partition_nodes_mem_avail", "Amount of available memory of all nodes", total - used, **lab)
        out.add("slurm_partition_gpus", "Partition total gpus", sum(gpus(n.gres) for n in mine), **lab)
        out.add(
            "slurm_partition_jobs_gpus_alloc",
            "Total number of GPUs allocated by jobs",
            sum(gpus(n.gres_used) for n in mine),
            **lab,
        )


BUSY_NODE_STATES = frozenset({"ALLOCATED", "MIXED"})


def _wanted(out: _Builder, snapshot: Snapshot, parts: list[str], labels: Any) -> None:
    """Nodes the partition's jobs hold or wait for: the autoscaling metric (docs/autoscaling.md). A running job
    keeps its nodes wanted, so a scale-in never starts under it; pending jobs add what they ask for."""
    for part in parts:
        busy = sum(1 for n in snapshot.nodes if part in n.partitions and _base(n.state) in BUSY_NODE_STATES)
        waiting = sum(
            _node_count(j)
            for j in snapshot.jobs
            if part in job_partitions(j) and _base(j.job_state) == "PENDING" and not _is_hold(j)
        )
        out.add(
            "slurm_partition_nodes_wanted",
            "Nodes the partition's jobs hold (allocated or mixed) or wait for (pending, not held): ours, to scale on",
            busy + waiting,
            **labels(part),
        )


def _cluster(out: _Builder, snapshot: Snapshot) -> None:
    jobs = _job_counts(snapshot.jobs)
    out.add("slurm_jobs", "Total number of jobs", jobs[""])
    for state in ("pending", "running", "suspended", "completing", "hold"):
        out.add(f"slurm_jobs_{state}", _HELP_STATE.format(state), jobs[state])
    nodes = _node_counts(snapshot.nodes)
    out.add("slurm_nodes", "Total number of nodes", nodes[""])
    for state in ("idle", "alloc", "mixed", "down", "drain", "future"):
        out.add(f"slurm_nodes_{state}", f"Nodes in {state} state", nodes[state])
    out.add("slurm_partitions", "Total number of partitions", len(snapshot.partitions))


_DIAG: tuple[tuple[str, str, str], ...] = (
    ("slurm_server_thread_cnt", "server_thread_count", "Number of server threads"),
    ("slurm_agent_queue_size", "agent_queue_size", "Number of agent messages queued"),
    ("slurm_agent_cnt", "agent_count", "Number of agents"),
    ("slurm_agent_thread_cnt", "agent_thread_count", "Total active agent-created threads"),
    ("slurm_dbd_agent_queue_size", "dbd_agent_queue_size", "Messages slurmctld holds for slurmdbd"),
    ("slurm_sdiag_jobs_submitted", "jobs_submitted", "Jobs submitted since reset"),
    ("slurm_sdiag_jobs_started", "jobs_started", "Jobs started since reset"),
    ("slurm_sdiag_jobs_completed", "jobs_completed", "Jobs completed since reset"),
    ("slurm_sdiag_jobs_canceled", "jobs_canceled", "Jobs canceled since reset"),
    ("slurm_sdiag_jobs_failed", "jobs_failed", "Jobs failed since reset"),
    ("slurm_sdiag_jobs_pending", "jobs_pending", "Jobs pending at timestamp"),
    ("slurm_sdiag_jobs_running", "jobs_running", "Jobs running at timestamp"),
    ("slurm_schedule_cycle_last", "schedule_cycle_last", "Last scheduling cycle time (microseconds)"),
    ("slurm_schedule_cycle_max", "schedule_cycle_max", "Max scheduling cycle time (microseconds)"),
    ("slurm_sched_mean_cycle", "schedule_cycle_mean", "Mean scheduling cycle time (microseconds)"),
    ("slurm_schedule_cycle_tot", "schedule_cycle_sum", "Sum of scheduling cycle times (microseconds)"),
    ("slurm_schedule_cycle_cnt", "schedule_cycle_total", "Scheduling cycles since reset"),
    ("slurm_schedule_queue_len", "schedule_queue_length", "Jobs pending queue length"),
    ("slurm_schedule_cycle_depth", "schedule_cycle_depth", "Depth of the scheduling cycles since reset"),
    ("slurm_sched_mean_depth_cycle", "schedule_cycle_mean_depth", "Mean depth of scheduling cycles"),
    ("slurm_bf_active", "bf_active", "Whether a backfill cycle runs now (1) or not (0)"),
    ("slurm_backfilled_jobs", "bf_backfilled_jobs", "Total backfilled jobs since reset"),
    ("slurm_bf_cycle_cnt", "bf_cycle_counter", "Backfill cycles since reset"),
    ("slurm_bf_cycle_last", "bf_cycle_last", "Last backfill cycle time (microseconds)"),
    ("slurm_bf_cycle_max", "bf_cycle_max", "Max backfill cycle time (microseconds)"),
    ("slurm_bf_mean_cycle", "bf_cycle_mean", "Mean backfill cycle time (microseconds)"),
    ("slurm_bf_cycle_tot", "bf_cycle_sum", "Sum of backfill cycle times (microseconds)"),
    ("slurm_bf_when_last_cycle", "bf_when_last_cycle", "Timestamp of last backfill cycle"),
    ("slurm_bf_last_depth", "bf_last_depth", "Last backfill depth"),
    ("slurm_bf_depth_mean", "bf_depth_mean", "Mean backfill cycle depth"),
    ("slurm_bf_queue_len", "bf_queue_len", "Backfill queue length"),
    ("slurm_bf_table_size", "bf_table_size", "Backfill table size"),
)
"""(family, ``diag`` statistic of slurmrestd, help): the scheduler's and backfill's statistics (``sdiag``)."""


def diag_value(diag: Diag, key: str) -> float | None:
    """A statistic of ``diag`` (typed field or one of the rest), numbers and Slurm's ``{set, number}`` alike;
    booleans as 0/1."""
    raw = getattr(diag, key, None)
    if raw is None:
        raw = (diag.model_extra or {}).get(key)
    if isinstance(raw, dict):
        raw = raw.get("number") if raw.get("set", True) else None
    if isinstance(raw, bool):
        return float(raw)
    return float(raw) if isinstance(raw, int | float) else None


def _scheduler(out: _Builder, diag: Diag) -> None:
    for name, key, help_ in _DIAG:
        value = diag_value(diag, key)
        if value is not None:
            out.add(name, help_, value)


async def read_snapshot(
    slurm: SlurmApi, nodes: Sequence[Node] | None = None, jobs: Sequence[JobInfo] | None = None
) -> Snapshot:
    """Read partitions and diag, and the nodes and jobs unless the caller's own poll just read them.

    Partitions and diag are extras: slurmrestd answers ``partitions`` with 502 while slurmdbd's database is down
    (measured on 26.05, error 7000), so a failure of either leaves them out (the partitions then come from the
    nodes) instead of losing the round's jobs and nodes.
    """
    listed = list(nodes) if nodes is not None else await slurm.list_nodes()
    found = list(jobs) if jobs is not None else (await slurm.list_jobs()).jobs
    partitions: list[Partition] = []
    diag: Diag | None = None
    with contextlib.suppress(SlurmError):
        partitions = await slurm.list_partitions()
    with contextlib.suppress(SlurmError):
        diag = await slurm.diag()
    return Snapshot(nodes=listed, jobs=found, partitions=partitions, diag=diag)


def metric_names() -> frozenset[str]:
    """Every family name the operator can serve, data or not: a partition's, the cluster's and the scheduler's.
    Discovery lists these, so a client sees the metrics before the first round has read Slurm."""
    probe = families(Snapshot(partitions=[Partition(name="probe")]), nodesets={})
    return frozenset(f.name for f in probe) | {name for name, _, _ in _DIAG}


def to_prometheus(found: Iterable[Family]) -> list[GaugeMetricFamily]:
    """Families as prometheus_client gauges; samples of one name from several clusters merged into one family
    (a family's samples must carry the same label names: every cluster's have the same base labels)."""
    merged: dict[str, GaugeMetricFamily] = {}
    for family in found:
        for labels, value in family.samples:
            gauge = merged.get(family.name)
            if gauge is None:
                gauge = merged[family.name] = GaugeMetricFamily(family.name, family.help, labels=list(labels))
            gauge.add_metric(list(labels.values()), value)
    return list(merged.values())
