"""Slurm's state as metric families: counts per partition and cluster, by Slurm's own state words; names as
slurmctld's metrics/openmetrics plugin's."""

from __future__ import annotations

from typing import Any

from slinky.clients.slurm.models import Diag, JobInfo, Node, Partition
from slinky.operator import slurm_metrics as sm


def job(job_id: int, state: list[str], partition: str = "cpu", **kw: Any) -> JobInfo:
    return JobInfo.model_validate({"job_id": job_id, "job_state": state, "partition": partition, **kw})


def node(name: str, state: list[str], partitions: list[str], **kw: Any) -> Node:
    return Node.model_validate({"name": name, "state": state, "partitions": partitions, **kw})


SNAPSHOT = sm.Snapshot(
    nodes=[
        node("cpu-0", ["IDLE"], ["cpu"], cpus=8, real_memory=1024),
        node("cpu-1", ["MIXED"], ["cpu"], cpus=8, alloc_cpus=2, real_memory=1024, alloc_memory=512),
        node("cpu-2", ["IDLE", "DRAIN"], ["cpu"], cpus=8, real_memory=1024),
        node(
            "gpu-0",
            ["ALLOCATED", "DRAIN"],
            ["gpu", "cpu"],
            cpus=4,
            alloc_cpus=4,
            gres="gpu:a100:4(S:0)",
            gres_used="gpu:a100:2(IDX:0-1)",
        ),
    ],
    jobs=[
        job(1, ["RUNNING"], cpus=2, memory_per_node=256, node_count=2),
        job(2, ["PENDING"], state_reason="Resources", node_count=2),
        job(3, ["PENDING"], partition="cpu,gpu", state_reason="Priority", node_count=3),
        job(4, ["PENDING"], state_reason="JobHeldUser", node_count=5, priority=0),
        job(5, ["COMPLETED"]),
        job(6, ["RUNNING", "COMPLETING"], partition="gpu", cpus=4),
    ],
    partitions=[Partition(name="cpu"), Partition(name="gpu"), Partition(name="empty")],
    diag=Diag.model_validate(
        {"jobs_submitted": 6, "bf_active": False, "schedule_cycle_sum": {"set": True, "number": 7}}
    ),
)


def values(
    base: dict[str, str] | None = None, nodesets: dict[str, str] | None = None
) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in sm.families(SNAPSHOT, base, nodesets):
        for labels, value in family.samples:
            out.setdefault(family.name, {})[tuple(sorted(labels.items()))] = value
    return out


def part(name: str, **extra: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"partition": name, **extra}.items()))


def test_jobs_per_partition_by_state_reason_and_flag() -> None:
    v = values()
    assert v["slurm_partition_jobs"][part("cpu")] == 5, "a job naming two partitions counts in both"
    assert v["slurm_partition_jobs_pending"][part("cpu")] == 3
    assert v["slurm_partition_jobs_pending"][part("gpu")] == 1
    assert (
        v["slurm_partition_jobs_running"][part("gpu")] == 1 and v["slurm_partition_jobs_completing"][part("gpu")] == 1
    )
    assert v["slurm_partition_jobs_hold"][part("cpu")] == 1
    assert (
        v["slurm_partition_jobs_completed"][part("cpu")] == 1 and v["slurm_partition_jobs_finished"][part("cpu")] == 1
    )
    assert v["slurm_partition_jobs_pending_reason"][part("cpu", reason="Resources")] == 1
    assert v["slurm_partition_jobs_pending_reason"][part("gpu", reason="Priority")] == 1
    assert v["slurm_partition_jobs_pending_nodes"][part("cpu")] == 5, "2 + 3 nodes asked for, the held job not"
    assert v["slurm_partition_jobs_min_job_nodes"][part("cpu")] == 5
    assert v["slurm_partition_jobs_min_job_nodes_nohold"][part("cpu")] == 3
    assert v["slurm_partition_jobs_cpus_alloc"][part("cpu")] == 2
    assert v["slurm_partition_jobs_memory_alloc"][part("cpu")] == 2 * 256 * 2**20
    assert v["slurm_partition_jobs"][part("empty")] == 0, "a partition without jobs or nodes is there, at 0"


def test_nodes_per_partition_with_drain_split_and_resources() -> None:
    v = values()
    assert v["slurm_partition_nodes"][part("cpu")] == 4
    assert (v["slurm_partition_nodes_idle"][part("cpu")], v["slurm_partition_nodes_mixed"][part("cpu")]) == (2, 1)
    assert v["slurm_partition_nodes_drain"][part("cpu")] == 2
    assert (
        v["slurm_partition_nodes_drained"][part("cpu")] == 1 and v["slurm_partition_nodes_draining"][part("cpu")] == 1
    )
    assert v["slurm_partition_cpus"][part("cpu")] == 28 and v["slurm_partition_nodes_cpus_alloc"][part("cpu")] == 6
    assert v["slurm_partition_nodes_cpus_idle"][part("cpu")] == 22
    assert v["slurm_partition_nodes_mem_tot"][part("cpu")] == 3 * 1024 * 2**20
    assert v["slurm_partition_nodes_mem_alloc"][part("cpu")] == 512 * 2**20
    assert v["slurm_partition_gpus"][part("gpu")] == 4 and v["slurm_partition_jobs_gpus_alloc"][part("gpu")] == 2


def test_cluster_and_scheduler_families() -> None:
    v = values()
    assert v["slurm_jobs"][()] == 6 and v["slurm_jobs_pending"][()] == 3 and v["slurm_nodes"][()] == 4
    assert v["slurm_nodes_drain"][()] == 2 and v["slurm_partitions"][()] == 3
    assert v["slurm_sdiag_jobs_submitted"][()] == 6
    assert v["slurm_schedule_cycle_tot"][()] == 7, "Slurm's {set, number} read as the number"
    assert v["slurm_bf_active"][()] == 0
    assert "slurm_bf_cycle_last" not in v, "a statistic slurmrestd did not answer is left out"


def test_base_and_nodeset_labels() -> None:
    v = values({"namespace": "hpc", "controller": "slurm"}, {"cpu": "cpu"})
    assert v["slurm_partition_jobs_pending"][part("cpu", namespace="hpc", controller="slurm", nodeset="cpu")] == 3
    assert v["slurm_partition_jobs_pending"][part("gpu", namespace="hpc", controller="slurm", nodeset="")] == 1
    assert v["slurm_jobs"][(("controller", "slurm"), ("namespace", "hpc"))] == 6


def test_gpus_in_gres_strings() -> None:
    assert sm.gpus("gpu:4") == 4
    assert sm.gpus("gpu:a100:2(IDX:0-1),gpu:h100:1(S:0)") == 3
    assert sm.gpus("tmpdisk:100") == 0 and sm.gpus("") == 0


def test_two_clusters_merge_into_one_family_each() -> None:
    first = sm.families(SNAPSHOT, {"namespace": "a", "controller": "x"}, {})
    second = sm.families(sm.Snapshot(), {"namespace": "b", "controller": "y"}, {})
    merged = {f.name: f for f in sm.to_prometheus([*first, *second])}
    assert len(merged["slurm_jobs"].samples) == 2
    assert len({f.name for f in first}) == len(first), "one family per name"


def test_nodes_wanted_is_busy_nodes_plus_what_pending_jobs_ask_for() -> None:
    v = values()
    assert v["slurm_partition_nodes_wanted"][part("cpu")] == 2 + 5, "cpu-1 and gpu-0 busy, 2 + 3 nodes pending"
    assert v["slurm_partition_nodes_wanted"][part("gpu")] == 1 + 3
    assert v["slurm_partition_nodes_wanted"][part("empty")] == 0


async def test_a_round_survives_partitions_and_diag_failing() -> None:
    """slurmrestd answers `partitions` with 502 while slurmdbd's database is down: the round keeps its nodes and
    jobs, and the partitions come from the nodes."""
    from slinky.clients.errors import SlurmUnavailable
    from slinky.clients.slurm.fake import FakeSlurmClient

    fake = FakeSlurmClient()
    fake.add_node("cpu-0", partitions=["cpu"])
    fake.fail_next("list_partitions", SlurmUnavailable("GET partitions: 502"))
    fake.fail_next("diag", SlurmUnavailable("GET diag: 502"))
    snapshot = await sm.read_snapshot(fake)
    assert [n.name for n in snapshot.nodes] == ["cpu-0"] and snapshot.partitions == [] and snapshot.diag is None
    names = {f.name for f in sm.families(snapshot)}
    assert "slurm_partition_nodes" in names and "slurm_sdiag_jobs_submitted" not in names
