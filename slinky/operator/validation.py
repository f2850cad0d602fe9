"""What is wrong with a NodeSet, field by field (until part 2's validating webhook denies it at admission).

Each problem names the field, a CamelCase reason for the status condition and Event, and what to fix.
The CRD schema already denies what it can (negative replicas, unknown enums, a newline in
`partition.config`); these rules also cover objects written before, upstream's CEL rules that a 1.20
apiserver cannot run, and `\\r` (the slurm.conf injection fixed upstream in 1.0.4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from slinky.operator.api.nodeset import NodeSet
from slinky.operator.pods import parse_extra_conf


@dataclass(frozen=True)
class Problem:
    """One bad field: where, why (a condition reason), and a message that says what to fix."""

    field: str
    reason: str
    message: str


def _one_line(value: str | None, field: str, reason: str) -> list[Problem]:
    if value and ("\n" in value or "\r" in value):
        return [Problem(field, reason, f"{field} must be a single line: remove the newline or carriage return")]
    return []


def max_unavailable(value: int | str, desired: int) -> int:
    """`maxUnavailable` as a pod count: a percentage of `desired` rounded up, at least 1.

    Raises:
        ValueError: not an integer or a percentage.
    """
    if isinstance(value, int):
        return max(value, 1)
    text = value.strip()
    if text.endswith("%") and text[:-1].isdigit():
        return max(math.ceil(int(text[:-1]) * desired / 100), 1)
    if text.isdigit():
        return max(int(text), 1)
    raise ValueError(f"{value!r} is neither a number nor a percentage")


def nodeset_problems(nodeset: NodeSet) -> list[Problem]:
    """Every problem of a NodeSet's spec; empty when it can be reconciled."""
    spec = nodeset.spec
    out: list[Problem] = []
    out += _one_line(spec.extra_conf, "spec.extraConf", "InvalidExtraConf")
    if not out:
        try:
            parse_extra_conf(spec.extra_conf)
        except ValueError as err:
            out.append(Problem("spec.extraConf", "InvalidExtraConf", f"spec.extraConf: {err}"))
    out += _one_line(spec.partition.config, "spec.partition.config", "InvalidPartitionConfig")
    if spec.replicas is not None and spec.replicas < 0:
        out.append(Problem("spec.replicas", "InvalidReplicas", f"spec.replicas must be >= 0, not {spec.replicas}"))
    if not spec.slurmd.get("image"):
        out.append(Problem("spec.slurmd.image", "MissingImage", "spec.slurmd.image is required: the slurmd image"))
    if not spec.controller_ref.name:
        out.append(Problem("spec.controllerRef.name", "InvalidControllerRef", "spec.controllerRef.name is empty"))
    strategy = spec.update_strategy
    field = "spec.updateStrategy.rollingUpdate.maxUnavailable"
    raw = strategy.rolling_update.max_unavailable
    if str(raw).strip() in {"0", "0%"}:
        out.append(Problem(field, "InvalidMaxUnavailable", f"{field} must not be 0: an update could never start"))
    else:
        try:
            max_unavailable(raw, 1)
        except ValueError as err:
            out.append(Problem(field, "InvalidMaxUnavailable", f"{field}: {err}"))
    if strategy.type == "ScheduledUpdate" and not strategy.scheduled_update.start_time:
        out.append(
            Problem(
                "spec.updateStrategy.scheduledUpdate.startTime",
                "InvalidScheduledUpdate",
                "spec.updateStrategy.scheduledUpdate.startTime is required when type is ScheduledUpdate",
            )
        )
    if spec.ssh is not None and spec.ssh.enabled and not spec.ssh.sssd_conf_ref.name:
        out.append(Problem("spec.ssh.sssdConfRef", "InvalidSsh", "spec.ssh.sssdConfRef is required when ssh is on"))
    return out


def not_built(nodeset: NodeSet) -> list[str]:
    """Fields set to something this operator does not do yet: the rest of the NodeSet is reconciled, and the
    user reads what is ignored on the `FieldsSupported` condition and a Warning Event (docs/operator.md)."""
    spec = nodeset.spec
    out = []
    if spec.volume_claim_templates:
        out.append("spec.volumeClaimTemplates: no PersistentVolumeClaim is made")
    if spec.ssh is not None and spec.ssh.enabled:
        out.append("spec.ssh.enabled: no sshd runs in the pods")
    return out
