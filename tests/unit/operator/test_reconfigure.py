"""The reconfigure's pure decisions: when slurmctld runs a new config, has failed on it, or may still get there."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from slinky.operator.reconfigure import (
    RELOAD_SLACK_SECONDS,
    RESET_SETTLE_SECONDS,
    STATISTICS_RESET_WINDOW_SECONDS,
    ConfigCheck,
    ControllerState,
    ReconfigureInput,
    WriteConfigInput,
    applied_message,
    config_error,
    judge,
    rejection_message,
    statistics_reset_time,
    workflow_id,
)

NEW, OLD = "c0ffee0000000001", "deadbeef00000002"
APPLIED = 1_800_000_000.0
REQUESTED = APPLIED + 5.0


def inp(inplace: bool, **overrides: Any) -> ReconfigureInput:
    values: dict[str, Any] = {
        "namespace": "hpc",
        "name": "slurm",
        "hash": NEW,
        "files": {"slurm.conf": "ClusterName=hpc\n"},
        "previous_hash": OLD,
        "previous_files": {"slurm.conf": "ClusterName=hpc\nMaxJobCount=10\n"},
        "inplace": inplace,
    }
    values.update(overrides)
    return ReconfigureInput(**values)


def pod(**fields: Any) -> ControllerState:
    """A ready slurmctld pod on the new hash that answers: the verified case of restart mode."""
    values: dict[str, Any] = {
        "pod_exists": True,
        "pod_uid": "u",
        "pod_hash": NEW,
        "ready": True,
        "responding": True,
    }
    values.update(fields)
    return ControllerState(**values)


# ---- restart mode -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "verdict"),
    [
        (pod(), "verified"),
        (pod(responding=None), "verified"),  # no RestApi to ask: the ready pod is enough
        (pod(responding=False), "waiting"),  # ready but slurmctld does not answer through slurmrestd
        (pod(ready=False), "waiting"),
        (pod(pod_hash=OLD), "waiting"),  # the old pod still runs: the StatefulSet has not made the new one
        (pod(pod_hash=""), "waiting"),
        (pod(pod_exists=False), "waiting"),
        (ControllerState(), "waiting"),  # no pod at all
        (pod(last_exit_at=APPLIED + 1, last_error="fatal: x"), "failed"),
        (pod(ready=False, last_exit_at=APPLIED + 30), "failed"),
        (pod(last_exit_at=APPLIED - RELOAD_SLACK_SECONDS), "failed"),  # within the clocks' slack: counts
        (pod(last_exit_at=APPLIED - RELOAD_SLACK_SECONDS - 0.01), "verified"),  # before the apply: does not count
        (pod(pod_hash=OLD, last_exit_at=APPLIED - 3600), "waiting"),
    ],
)
def test_judge_restart_mode(state: ControllerState, verdict: str) -> None:
    assert judge(inp(False), state, APPLIED, None) == verdict


def test_judge_restart_mode_ignores_the_reconfigure_request_and_loaded_since() -> None:
    """Restart mode verifies on the pod: an old loaded_since or a request time do not matter."""
    state = pod(loaded_since=APPLIED - 1000)
    assert judge(inp(False), state, APPLIED, REQUESTED) == "verified"
    assert judge(inp(False), pod(ready=False, loaded_since=REQUESTED + 10), APPLIED, REQUESTED) == "waiting"


def test_judge_restart_mode_is_verified_against_the_inputs_hash() -> None:
    """The rollback verifies the previous config with ``hash`` set to the previous hash."""
    previous = inp(False, hash=OLD)
    assert judge(previous, pod(pod_hash=OLD), APPLIED, None) == "verified"
    assert judge(previous, pod(pod_hash=NEW), APPLIED, None) == "waiting"


# ---- in place -----------------------------------------------------------------------------------------------


def reread(loaded: float | None, responding: bool | None = True, **fields: Any) -> ControllerState:
    return pod(pod_hash=OLD, loaded_since=loaded, responding=responding, **fields)


@pytest.mark.parametrize(
    ("state", "requested", "verdict"),
    [
        (reread(REQUESTED + 1), REQUESTED, "verified"),
        (reread(REQUESTED), REQUESTED, "verified"),
        (reread(REQUESTED - RELOAD_SLACK_SECONDS), REQUESTED, "verified"),  # the 2 s slack
        (reread(REQUESTED - RELOAD_SLACK_SECONDS - 0.01), REQUESTED, "waiting"),  # read before the request
        (reread(APPLIED), REQUESTED, "waiting"),  # after the write but before the request: not re-read yet
        (reread(REQUESTED + 1, responding=False), REQUESTED, "waiting"),
        (reread(REQUESTED + 1, responding=None), REQUESTED, "waiting"),  # unknown is not an answer in place
        (reread(None), REQUESTED, "waiting"),
        # No request went through: a (re)start since the files were written is the re-read.
        (reread(APPLIED + 1), None, "verified"),
        (reread(APPLIED - RELOAD_SLACK_SECONDS), None, "verified"),
        (reread(APPLIED - RELOAD_SLACK_SECONDS - 0.01), None, "waiting"),
        (reread(APPLIED - 600), None, "waiting"),
        (reread(None), None, "waiting"),
        # A slurmctld that ended after the apply failed, whatever it says now.
        (reread(REQUESTED + 1, last_exit_at=APPLIED + 0.5, last_error="fatal: x"), REQUESTED, "failed"),
        (reread(None, responding=False, last_exit_at=APPLIED + 0.5), None, "failed"),
        (reread(REQUESTED + 1, last_exit_at=APPLIED - RELOAD_SLACK_SECONDS), REQUESTED, "failed"),
        (reread(REQUESTED + 1, last_exit_at=APPLIED - 3600, last_error="old"), REQUESTED, "verified"),
    ],
)
def test_judge_in_place(state: ControllerState, requested: float | None, verdict: str) -> None:
    assert judge(inp(True), state, APPLIED, requested) == verdict


def test_judge_in_place_does_not_need_a_pod_on_the_new_hash() -> None:
    """In place the pod is not made again: its template keeps the old hash, and no pod is needed to judge."""
    assert judge(inp(True), reread(REQUESTED + 1, ready=False), APPLIED, REQUESTED) == "verified"
    state = ControllerState(responding=True, loaded_since=REQUESTED + 1)
    assert judge(inp(True), state, APPLIED, REQUESTED) == "verified"


def test_the_slack_is_two_seconds() -> None:
    assert RELOAD_SLACK_SECONDS == 2.0


# ---- messages -----------------------------------------------------------------------------------------------


def test_config_error_keeps_slurms_error_and_fatal_lines() -> None:
    output = (
        "scontrol: debug: reading slurm.conf\n"
        "scontrol: error: _parse_next_key: Parsing error at unrecognized key: NoSuchKey\n"
        "  \n"
        "scontrol: fatal: Unable to process configuration file\n"
        "localhost\n"
    )
    assert config_error(output) == (
        "scontrol: error: _parse_next_key: Parsing error at unrecognized key: NoSuchKey; "
        "scontrol: fatal: Unable to process configuration file"
    )


def test_config_error_matches_case_insensitively_and_strips() -> None:
    assert config_error("  FATAL: no slurm.conf  \nok\n  Error: x\n") == "FATAL: no slurm.conf; Error: x"


def test_config_error_keeps_at_most_five_lines() -> None:
    output = "\n".join(f"scontrol: error: line {i}" for i in range(8))
    kept = config_error(output).split("; ")
    assert kept == [f"scontrol: error: line {i}" for i in range(5)]


def test_config_error_without_slurm_lines_is_the_output_cut_short() -> None:
    assert config_error("  env: 'scontrol': No such file or directory\n") == (
        "env: 'scontrol': No such file or directory"
    )
    assert config_error("x" * 2000) == "x" * 500
    assert config_error("") == ""


def test_rejection_message_names_both_hashes_and_the_error() -> None:
    message = rejection_message(inp(False), "  Slurm's parser refuses it: fatal: bad  ")
    assert message == (
        f"slurm.conf {NEW} was not applied: Slurm's parser refuses it: fatal: bad; slurmctld keeps running {OLD}"
    )


def test_rejection_message_without_an_error_or_a_previous_hash() -> None:
    message = rejection_message(inp(True, previous_hash=""), "   ")
    assert (
        message
        == f"slurm.conf {NEW} was not applied: slurmctld did not run it; slurmctld keeps running its last good config"
    )


def test_applied_message_names_the_hash_and_how() -> None:
    assert applied_message(inp(False), True) == f"slurmctld runs slurm.conf {NEW} (applied by a new slurmctld pod)"
    assert applied_message(inp(True), False) == (
        f"slurmctld runs slurm.conf {NEW} (applied by scontrol reconfigure (in place))"
    )


def test_workflow_id_format() -> None:
    assert workflow_id("hpc", "slurm", NEW) == f"reconfigure/hpc/slurm/{NEW}"
    assert workflow_id("a", "b", "c") != workflow_id("a", "b", "d"), "one workflow per config hash"


# ---- models -------------------------------------------------------------------------------------------------


def test_model_defaults() -> None:
    i = inp(False)
    assert (i.verify_seconds, i.propagation_seconds) == (180.0, 2.0)
    assert ConfigCheck(ok=True).checked is True and ConfigCheck(ok=False).error == ""
    w = WriteConfigInput(namespace="n", name="c", hash=NEW, files={}, workflow_id="w")
    assert (w.rejected_hash, w.roll_pod) == ("", True)
    s = ControllerState()
    assert (s.pod_exists, s.ready, s.responding, s.last_exit_at, s.loaded_since) == (False, False, None, None, None)


def test_models_are_frozen_and_round_trip() -> None:
    i = inp(True)
    with pytest.raises(ValidationError):
        i.hash = "other"  # type: ignore[misc]
    assert ReconfigureInput.model_validate_json(i.model_dump_json()) == i
    previous = i.model_copy(update={"hash": i.previous_hash, "files": i.previous_files})
    assert (previous.hash, previous.files, previous.inplace) == (OLD, i.previous_files, True)


@pytest.mark.parametrize(
    ("fields", "verdict"),
    [
        ({"pod_hash": OLD, "ready": False, "last_exit_code": 0}, "waiting"),
        ({"pod_hash": OLD, "ready": False, "last_exit_code": 143}, "waiting"),
        ({"pod_hash": OLD, "ready": False, "last_exit_code": 1}, "waiting"),
        ({"pod_hash": NEW, "ready": False, "last_exit_code": 1}, "failed"),
        ({"pod_hash": NEW, "ready": False, "last_exit_code": None}, "failed"),
        ({"pod_hash": NEW, "ready": True, "last_exit_code": 0}, "verified"),
    ],
)
def test_the_old_pods_stop_is_not_a_refusal_of_the_new_config(fields: dict[str, Any], verdict: str) -> None:
    """Restart mode: while its StatefulSet replaces it, the old pod's slurmctld stops cleanly after the apply
    (bench/cluster.py saw a good config rolled back for it). Only the new pod's failing exit counts."""
    state = pod(last_exit_at=APPLIED + 3, **fields)
    assert judge(inp(False), state, APPLIED, None) == verdict


def test_histories_from_before_keep_the_old_rule() -> None:
    state = pod(pod_hash=OLD, ready=False, last_exit_at=APPLIED + 3, last_exit_code=0)
    assert judge(inp(False), state, APPLIED, None, stops_are_refusals=True) == "failed"
    assert judge(inp(True), pod(last_exit_at=APPLIED + 3, last_exit_code=143), APPLIED, REQUESTED) == "waiting"


# ---- slurmctld's midnight statistics reset ---------------------------------------------------------------------

MIDNIGHT = 1_800_057_600.0  # a multiple of 86,400: midnight UTC, when slurmctld resets its statistics


def test_a_re_read_at_midnight_utc_is_held_until_slurmctld_kept_answering_after_it() -> None:
    """The reset moves ``req_time_start`` as a re-read does: a slurmctld that rejected the new config and is about
    to exit would look verified. Held back until it kept answering ``RESET_SETTLE_SECONDS``; its exit comes first."""
    requested = MIDNIGHT - 3
    reset = reread(MIDNIGHT + 1)
    assert judge(inp(True), reset, MIDNIGHT - 8, requested, now=MIDNIGHT + 2) == "waiting"
    assert judge(inp(True), reset, MIDNIGHT - 8, requested, now=MIDNIGHT + 1 + RESET_SETTLE_SECONDS) == "verified"
    exited = reread(MIDNIGHT + 1, responding=False, last_exit_at=MIDNIGHT + 4, last_exit_code=1)
    assert judge(inp(True), exited, MIDNIGHT - 8, requested, now=MIDNIGHT + 5) == "failed"
    # A busy controller resets later in the window; past it, a re-read is taken at once.
    late = MIDNIGHT + STATISTICS_RESET_WINDOW_SECONDS - 1
    assert judge(inp(True), reread(late), MIDNIGHT - 8, requested, now=late + 1) == "waiting"
    after = MIDNIGHT + STATISTICS_RESET_WINDOW_SECONDS
    assert judge(inp(True), reread(after), after - 10, after - 5, now=after + 1) == "verified"
    # Histories from before the rule (no ``now``) keep the old verdict.
    assert judge(inp(True), reset, MIDNIGHT - 8, requested) == "verified"


def test_statistics_reset_time_is_midnight_utc_whatever_the_time_zone() -> None:
    assert statistics_reset_time(MIDNIGHT)
    assert statistics_reset_time(MIDNIGHT + 59)
    assert not statistics_reset_time(MIDNIGHT - 1)
    assert not statistics_reset_time(MIDNIGHT + 3600)  # 01:00 UTC: midnight in UTC+1, no reset there
    assert not statistics_reset_time(APPLIED)
