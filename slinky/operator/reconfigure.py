"""A managed Controller's reconfigure: the messages of ``ControllerReconfigure`` and its decisions, pure.

The workflow (workflows/reconfigure.py) checks a rendered config with Slurm's own parser, writes it to the
Controller's ConfigMap, makes slurmctld run it (``scontrol reconfigure`` through slurmrestd with
``inplaceReconfigure: true``, else a new slurmctld pod: the StatefulSet's template carries the hash), and
verifies that slurmctld runs it. A config that slurmctld does not run is rolled back to the last good one,
which keeps running; the Controller's ``ConfigValid`` condition names slurmctld's own error. This module
holds what the workflow decides on, so it stays a thin sequence of activities.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

ANNOTATION_WORKFLOW = "slinky.slurm.net/reconfigure-workflow"
"""On the ConfigMap: the workflow that wrote its config last."""
ANNOTATION_RECONFIGURED_AT = "slinky.slurm.net/reconfigured-at"
ANNOTATION_CONFIG_WRITTEN = "slinky.slurm.net/config-written"
"""On the slurmctld pod (in-place reconfigure): the hash just written to its ConfigMap. Updating the pod makes its
kubelet sync it at once, which refreshes the projected config volume; otherwise that waits for the kubelet's next
periodic sync (up to a minute), and `scontrol reconfigure` would re-read the old files."""
ANNOTATION_VERIFIED = "slinky.slurm.net/verified-config-hash"
"""On the ConfigMap: the hash ControllerReconfigure verified slurmctld runs (ConfigValid says Applied only then)."""
ANNOTATION_REJECTED = "slinky.slurm.net/rejected-config-hash"
"""On the ConfigMap: a config hash that was not applied (parser or slurmctld refused it); the reconciler does
not try it again, a fix of the resources makes a new hash."""
RELOAD_SLACK_SECONDS = 2.0
"""slurmctld's clock and the operator's may differ this much (one cluster, NTP)."""
STATISTICS_DAY = 86400
"""slurmctld resets its statistics when the epoch time passes a multiple of a day (midnight UTC, whatever its
time zone: ``now - now % 86400``), which moves ``req_time_start`` as a re-read of the config does."""
STATISTICS_RESET_WINDOW_SECONDS = 60.0
"""A ``req_time_start`` this soon after midnight UTC may be that reset (its background loop runs about once a
second; a busy controller later)."""
RESET_SETTLE_SECONDS = 30.0
"""Such a ``req_time_start`` counts as a re-read once slurmctld has kept answering this long after it: a
slurmctld that rejects a config exits within seconds of the request, so its exit is seen first."""


class _Msg(BaseModel):
    model_config = {"frozen": True}


class ReconfigureInput(_Msg):
    namespace: str
    name: str
    hash: str
    files: dict[str, str]
    previous_hash: str
    previous_files: dict[str, str]
    inplace: bool
    verify_seconds: float = 180.0
    """How long slurmctld has to run the new config before it is rolled back."""
    propagation_seconds: float = 2.0
    """In place: how long the pod's projected ConfigMap takes to show the new files before the reconfigure
    (the dev stack's node agent writes them within a second; a kubelet within its sync period)."""


class ConfigCheck(_Msg):
    ok: bool
    error: str = ""
    checked: bool = True
    """False: no Slurm tools where the operator runs, so Slurm's parser could not be asked."""


class WriteConfigInput(_Msg):
    namespace: str
    name: str
    hash: str
    files: dict[str, str]
    workflow_id: str
    rejected_hash: str = ""
    """Set on a rollback: the hash slurmctld did not run (the reconciler does not try it again)."""
    roll_pod: bool = True
    """Restart mode: the StatefulSet's pod template carries the hash, so its pod is made again."""


class ControllerRef(_Msg):
    namespace: str
    name: str


class ControllerState(_Msg):
    """What the Controller's slurmctld pod and slurmctld itself say now."""

    pod_exists: bool = False
    pod_uid: str = ""
    pod_hash: str = ""
    """The config hash of the pod's template annotation (restart mode)."""
    ready: bool = False
    restarts: int = 0
    last_exit_at: float | None = None
    """When its slurmctld container last ended (``lastState.terminated.finishedAt``)."""
    last_error: str = ""
    """How it ended: the container's termination message (the log's last lines)."""
    last_exit_code: int | None = None
    """Its exit code: 0 or 143 (SIGTERM) is a stop, not a refusal (a pod replaced by its StatefulSet)."""
    responding: bool | None = None
    """slurmctld answers through slurmrestd (None: no RestApi to ask)."""
    loaded_since: float | None = None
    """When slurmctld last (re)read its config: its statistics' start (``req_time_start``)."""
    gone: bool = False
    """The Controller no longer exists (deleted, with its namespace): nothing is left to reconfigure."""


class ConditionInput(_Msg):
    namespace: str
    name: str
    status: Literal["True", "False"]
    reason: str
    message: str
    event: Literal["", "Normal", "Warning"] = ""
    verified_hash: str = ""
    """Set with Applied: written on the ConfigMap, so the reconciler knows the hash runs."""


class ReconfigureResult(_Msg):
    outcome: Literal["applied", "rejected", "rolled-back", "gone"]
    hash: str
    message: str = ""
    restarted_pod: bool = False


Verdict = Literal["verified", "failed", "waiting", "gone"]


def judge(
    inp: ReconfigureInput,
    state: ControllerState,
    applied_at: float,
    requested_at: float | None,
    *,
    stops_are_refusals: bool = False,
    now: float | None = None,
) -> Verdict:
    """Whether slurmctld runs ``inp.hash``, has failed on it, or may still get there.

    Failed: its container ended after the new config was applied (a slurmctld that rejects a config exits;
    restartPolicy brings it back on the same config, so that never heals). Verified, in place: it answers and
    re-read its config after the reconfigure request; restart mode: its pod was made from the template with
    the new hash and is ready. ``now`` (histories from before it: None) holds back a re-read that may be the
    midnight statistics reset until ``RESET_SETTLE_SECONDS`` after it.
    """
    if state.gone:
        return "gone"
    if stops_are_refusals:  # histories recorded before a stop (0, 143) of the old pod stopped counting
        if state.last_exit_at is not None and state.last_exit_at >= applied_at - RELOAD_SLACK_SECONDS:
            return "failed"
    elif _failed(inp, state, applied_at):
        return "failed"
    if inp.inplace:
        if state.loaded_since is None or not state.responding:
            return "waiting"
        # No request went through (slurmctld was down): it must have started again since the files changed.
        since = requested_at if requested_at is not None else applied_at
        if state.loaded_since < since - RELOAD_SLACK_SECONDS:
            return "waiting"
        if (
            now is not None
            and statistics_reset_time(state.loaded_since)
            and now < state.loaded_since + RESET_SETTLE_SECONDS
        ):
            return "waiting"
        return "verified"
    if state.pod_exists and state.pod_hash == inp.hash and state.ready and state.responding is not False:
        return "verified"
    return "waiting"


def statistics_reset_time(loaded_since: float) -> bool:
    """Whether a ``req_time_start`` may be slurmctld's midnight statistics reset rather than a (re)start."""
    return loaded_since % STATISTICS_DAY < STATISTICS_RESET_WINDOW_SECONDS


STOP_CODES = frozenset({0, 143})
"""Exit codes of a slurmctld that was stopped (SIGTERM when its pod is replaced), not one that refused."""


def _failed(inp: ReconfigureInput, state: ControllerState, applied_at: float) -> bool:
    """slurmctld ended on the new config: an exit after it was applied, not a stop, and (restart mode) of the
    new pod: the old pod's slurmctld stops cleanly while its StatefulSet replaces it."""
    if state.last_exit_at is None or state.last_exit_at < applied_at - RELOAD_SLACK_SECONDS:
        return False
    if state.last_exit_code is not None and state.last_exit_code in STOP_CODES:
        return False
    return inp.inplace or state.pod_hash == inp.hash


def rejection_message(inp: ReconfigureInput, error: str) -> str:
    return (
        f"slurm.conf {inp.hash} was not applied: {error.strip() or 'slurmctld did not run it'}; "
        f"slurmctld keeps running {inp.previous_hash or 'its last good config'}"
    )


def applied_message(inp: ReconfigureInput, restarted: bool) -> str:
    how = "a new slurmctld pod" if restarted else "scontrol reconfigure (in place)"
    return f"slurmctld runs slurm.conf {inp.hash} (applied by {how})"


def config_error(output: str) -> str:
    """The lines of Slurm's parser output that say what is wrong (``error:``/``fatal:``), at most five."""
    lines = [line.strip() for line in output.splitlines() if "error" in line.lower() or "fatal" in line.lower()]
    return "; ".join(lines[:5]) or output.strip()[:500]


def workflow_id(namespace: str, name: str, config_hash: str) -> str:
    return f"reconfigure/{namespace}/{name}/{config_hash}"
