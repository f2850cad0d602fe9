"""`slinky top`'s frame: partitions from the same metric families the operator serves, NodeSets, and the
scale-ins running now; a cluster that cannot be asked says why on its own line."""

from __future__ import annotations

from datetime import UTC, datetime

from slinky.clients.slurm.models import JobInfo, Node, Partition
from slinky.operator import slurm_metrics
from slinky.operator.top_cli import ClusterView, Frame, partition_rows, render


def families() -> list[slurm_metrics.Family]:
    snapshot = slurm_metrics.Snapshot(
        nodes=[
            Node(name="cpu-0", state=["MIXED"], partitions=["cpu"], cpus=4, alloc_cpus=2),
            Node(name="cpu-1", state=["IDLE", "DRAIN"], partitions=["cpu"], cpus=4),
        ],
        jobs=[
            JobInfo(job_id=1, job_state=["RUNNING"], partition="cpu", cpus=2, node_count=1),
            JobInfo(job_id=2, job_state=["PENDING"], partition="cpu", state_reason="Resources", node_count=2),
            JobInfo(job_id=3, job_state=["PENDING"], partition="cpu", state_reason="Priority", node_count=1),
            JobInfo(job_id=4, job_state=["PENDING"], partition="cpu", state_reason="Resources", node_count=1),
        ],
        partitions=[Partition(name="cpu"), Partition(name="gpu")],
    )
    return slurm_metrics.families(snapshot)


def test_partition_rows_come_from_the_metric_families() -> None:
    cpu, gpu = partition_rows(families())
    #        name   nodes idle busy drain down cpus  pending running wanted reasons
    assert cpu == ["cpu", 2, 1, 1, 1, 0, "2/8", 3, 1, 1 + 4, "Resources 2, Priority 1"]
    assert gpu[:2] == ["gpu", 0]


def test_a_frame_with_a_cluster_that_cannot_be_asked() -> None:
    frame = Frame(
        at=datetime(2026, 11, 25, 12, 0, tzinfo=UTC),
        clusters=[
            ClusterView("hpc", "slurm", "http://rest:6820", families()),
            ClusterView("lab", "old", problem="unreachable at http://x:6820: refused"),
        ],
        nodesets=[
            {
                "metadata": {"namespace": "hpc", "name": "cpu"},
                "spec": {"replicas": 2},
                "status": {"replicas": 2, "readyReplicas": 2, "slurmIdle": 1, "slurmAllocated": 1},
            }
        ],
        scale_ins=[
            {
                "namespace": "hpc",
                "nodeset": "cpu",
                "pod": "cpu-1",
                "slurmNode": "cpu-1",
                "phase": "draining",
                "waitingFor": "job 1",
                "note": "",
                "jobs": [1],
                "age": "5s",
            }
        ],
    )
    text = render(frame)
    assert "Cluster hpc/slurm at http://rest:6820" in text and "Resources 2, Priority 1" in text
    assert "Cluster lab/old\n  Slurm unreachable at http://x:6820: refused" in text
    assert "hpc/cpu" in text and "draining" in text and "job 1" in text
    empty = render(Frame(at=frame.at, clusters=[], nodesets=[], scale_ins=None, scale_ins_problem="Temporal down"))
    assert "No Controllers found." in empty and "unknown: Temporal down" in empty
