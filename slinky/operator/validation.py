"""What is wrong with a NodeSet or a Controller, field by field, for the validating webhook and the status
conditions alike (an object written while the webhook was away still gets a condition).

Each problem names the field, a CamelCase reason for the status condition and Event, and what to fix.
The CRD schema already denies what it can (negative replicas, unknown enums, a newline in
`partition.config`); these rules also cover objects written before, upstream's CEL rules that a 1.20
apiserver cannot run, and `\\r` (the slurm.conf injection fixed upstream in 1.0.4).
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Final

from slinky.operator import slurm_state
from slinky.operator.api.controller import Controller
from slinky.operator.api.nodeset import NodeSet
from slinky.operator.pods import parse_extra_conf
from slinky.operator.tokens import InvalidDuration, parse_duration

MIN_SCHEDULED_UPDATE_SECONDS: Final = 60.0
"""A ScheduledUpdate's window is at least a minute (upstream's rule)."""


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


HA_NEEDS_SHARED_STATE: Final = "HighAvailabilityNeedsSharedState"


def controller_problems(controller: Controller) -> list[Problem]:
    """Upstream's CEL rule on a Controller (an external one too, as upstream's): `ha.enabled` needs
    `persistence.enabled` and an `existingClaim` (a ReadWriteMany claim every slurmctld replica mounts as its
    StateSaveLocation: the backup takes over from the state the primary saved)."""
    spec = controller.spec
    if not spec.ha.enabled:
        return []
    if spec.persistence.enabled is False or not spec.persistence.existing_claim:
        message = (
            "spec.ha.enabled: slurm high availability (HA) mode requires spec.persistence.enabled and "
            "spec.persistence.existingClaim naming a PVC with an access mode of ReadWriteMany (the backup slurmctld "
            "takes over from the state the primary saved there)"
        )
        return [Problem("spec.ha.enabled", HA_NEEDS_SHARED_STATE, message)]
    return []


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
    if strategy.type == "ScheduledUpdate":
        out.extend(_scheduled_update_problems(nodeset))
    if spec.ssh is not None and spec.ssh.enabled and not spec.ssh.sssd_conf_ref.name:
        out.append(Problem("spec.ssh.sssdConfRef", "InvalidSsh", "spec.ssh.sssdConfRef is required when ssh is on"))
    return out


def _scheduled_update_problems(nodeset: NodeSet) -> list[Problem]:
    """`startTime` given as RFC 3339, `duration` a Go duration of at least a minute (upstream's webhook rule),
    `flags` Slurm's reservation flags (26.05's `reservation_desc_msg` list)."""
    scheduled = nodeset.spec.update_strategy.scheduled_update
    prefix = "spec.updateStrategy.scheduledUpdate"
    reason = "InvalidScheduledUpdate"
    out = []
    if not scheduled.start_time:
        message = f"{prefix}.startTime is required when type is ScheduledUpdate"
        out.append(Problem(f"{prefix}.startTime", reason, message))
    else:
        try:
            dt.datetime.fromisoformat(scheduled.start_time.replace("Z", "+00:00"))
        except ValueError:
            message = (
                f"{prefix}.startTime must be an RFC 3339 time (2026-12-01T02:00:00Z), not {scheduled.start_time!r}"
            )
            out.append(Problem(f"{prefix}.startTime", reason, message))
    try:
        seconds = parse_duration(scheduled.duration, f"{prefix}.duration")
    except InvalidDuration as err:
        out.append(Problem(f"{prefix}.duration", reason, str(err)))
    else:
        if seconds < MIN_SCHEDULED_UPDATE_SECONDS:
            message = f"{prefix}.duration must be at least 1m, not {scheduled.duration!r}"
            out.append(Problem(f"{prefix}.duration", reason, message))
    unknown = [f for f in scheduled.flags or [] if f.strip().upper() not in slurm_state.RESERVATION_FLAGS]
    if unknown:
        message = f"{prefix}.flags: {', '.join(map(repr, unknown))} is not a Slurm reservation flag"
        out.append(Problem(f"{prefix}.flags", reason, message))
    return out
