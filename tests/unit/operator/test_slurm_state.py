"""Slurm node state: drained, owned reasons, the 15 pod conditions, NodeSet counts."""

from __future__ import annotations

from slinky.operator import slurm_state as s


def test_drained_needs_drain_without_undrain_or_jobs() -> None:
    assert s.is_drained({"IDLE", "DRAIN"})
    assert not s.is_drained({"MIXED", "DRAIN"}) and not s.is_drained({"IDLE", "DRAIN", "COMPLETING"})
    assert not s.is_drained({"IDLE", "DRAIN", "UNDRAIN"}) and not s.is_drained({"IDLE"})
    assert s.is_draining_or_drained({"ALLOCATED", "DRAIN"})


def test_reasons() -> None:
    assert s.scale_in_reason("hpc", "gpu-1") == "slurm-operator: Pod (hpc/gpu-1) is pending termination for scale-in"
    assert s.owns_reason(s.scale_in_reason("a", "b")) and not s.owns_reason("bad DIMM, ticket 42")


def test_conditions_one_base_true_and_drain_carries_the_reason() -> None:
    conds = s.pod_conditions(["IDLE", "DRAIN", "DYNAMIC_NORM"], "maintenance", "2026-11-24T00:00:00Z")
    assert len(conds) == 15
    true = {c["type"] for c in conds if c["status"] == "True"}
    assert true == {"SlurmNodeStateIdle", "SlurmNodeStateDrain"}
    drain = next(c for c in conds if c["type"] == "SlurmNodeStateDrain")
    assert drain["message"] == "maintenance"
    assert s.condition_type("INVALID_REG") == "SlurmNodeStateInvalidReg"
    assert s.condition_type("NOT_RESPONDING") == "SlurmNodeStateNotResponding"
    unknown = {c["type"] for c in s.pod_conditions([], "", "t") if c["status"] == "True"}
    assert unknown == {"SlurmNodeStateUnknown"}


def test_counts() -> None:
    got = s.counts([{"IDLE"}, {"MIXED", "DRAIN"}, {"ALLOCATED"}, {"DOWN", "DRAIN"}, {"IDLE", "DRAIN", "UNDRAIN"}])
    assert got == {"slurmIdle": 2, "slurmAllocated": 2, "slurmDown": 1, "slurmDrain": 2}


def test_jobs_by_node_expands_hostlists_and_takes_the_latest_deadline() -> None:
    from slinky.clients.slurm.models import JobInfo
    from slinky.operator.slurm_state import jobs_by_node

    jobs = [
        JobInfo(job_id=1, job_state=["RUNNING"], nodes="cpu-[0-1]", start_time=1_000, time_limit=10),
        JobInfo(job_id=2, job_state=["RUNNING"], nodes="cpu-1", start_time=2_000, time_limit=60),
        JobInfo(job_id=3, job_state=["COMPLETED"], nodes="cpu-0", start_time=5_000, time_limit=60),
        JobInfo(job_id=4, job_state=["PENDING"], nodes=""),
    ]
    by_node = jobs_by_node(jobs)
    assert sorted(by_node) == ["cpu-0", "cpu-1"]
    assert by_node["cpu-0"].ids == [1] and by_node["cpu-0"].deadline == 1_600.0
    assert by_node["cpu-1"].ids == [1, 2] and by_node["cpu-1"].deadline_text() == "1970-01-01T01:33:20Z"


def test_forgettable_nodes_of_pods_that_are_gone() -> None:
    from slinky.operator.slurm_state import forgettable

    assert forgettable(["DOWN"], "slurm-operator: Pod is terminating", replaced=False)
    assert forgettable(["DOWN", "NOT_RESPONDING"], "Not responding", replaced=False)
    assert forgettable(["IDLE"], "", replaced=False), "re-registered by a slurmd that is gone now"
    assert not forgettable(["IDLE"], "", replaced=True), "a new pod of the same name owns it"
    assert not forgettable(["ALLOCATED", "DOWN"], "Not responding", replaced=False), "a job still names it"
    assert not forgettable(["DOWN", "DRAIN"], "bad dimm, ticket 42", replaced=False), "an admin's reason"
