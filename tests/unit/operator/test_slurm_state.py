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
