"""ControllerReconfigure: one new slurm.conf of a managed Controller, applied without taking the cluster down.

    Slurm's parser checks it -> the ConfigMap gets it -> slurmctld runs it (scontrol reconfigure in place,
    or a new pod) -> verified: slurmctld re-read it / its new pod is ready  -> ConfigValid=True
                                                     \\-> slurmctld ended on it, or never got there in time:
                                                         the last good config is written back and runs again,
                                                         ConfigValid=False names slurmctld's error

A config Slurm's parser refuses never reaches the ConfigMap. Running jobs survive either way: slurmctld keeps
its state across a reconfigure (it re-executes in place) and across a new pod (StateSaveLocation is on a
volume that outlives the pod). Workflow ID: `reconfigure/<namespace>/<controller>/<config hash>`, so a
config is applied once at a time; the Controller reconciler starts it when the rendered hash changes.
The `status` query says where it is.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import SearchAttributeKey
from temporalio.exceptions import ActivityError

from slinky.operator.reconfigure import (
    ConditionInput,
    ConfigCheck,
    ControllerRef,
    ControllerState,
    ReconfigureInput,
    ReconfigureResult,
    WriteConfigInput,
    applied_message,
    judge,
    rejection_message,
)
from workflows import retry

SA_NAMESPACE = SearchAttributeKey.for_keyword("SlinkyNamespace")
SA_CONTROLLER = SearchAttributeKey.for_keyword("SlinkyController")
SA_PHASE = SearchAttributeKey.for_keyword("SlinkyPhase")
POLL = timedelta(seconds=1)
PATCH_STOP_IS_NOT_REFUSAL = "stop-is-not-a-refusal"
"""Histories from before it took the old pod's clean stop (replaced by its StatefulSet) for a refusal of the
new config (and rolled back a good one: seen in bench/cluster.py) replay with that rule."""
PATCH_MIDNIGHT_RESET = "midnight-statistics-reset"
"""Histories from before it took a ``req_time_start`` moved by slurmctld's midnight statistics reset for a
re-read at once; they replay with that rule."""
CONDITION = "ConfigValid"


@workflow.defn(name="ControllerReconfigure")
class ControllerReconfigureWorkflow:
    def __init__(self) -> None:
        self._phase = "checking"
        self._last: ControllerState | None = None

    @workflow.query
    def status(self) -> dict[str, object]:
        last = self._last
        return {
            "phase": self._phase,
            "ready": last.ready if last else None,
            "responding": last.responding if last else None,
            "last_error": last.last_error if last else "",
        }

    def _set_phase(self, phase: str) -> None:
        self._phase = phase
        workflow.upsert_search_attributes([SA_PHASE.value_set(phase)])

    async def _condition(self, inp: ReconfigureInput, ok: bool, reason: str, message: str) -> None:
        body = ConditionInput(
            namespace=inp.namespace,
            name=inp.name,
            status="True" if ok else "False",
            reason=reason,
            message=message,
            event="Normal" if ok else "Warning",
            verified_hash=inp.hash if ok else "",
        )
        await workflow.execute_activity(
            "set_controller_condition", body, start_to_close_timeout=retry.CALL_TIMEOUT, retry_policy=retry.KUBE
        )

    async def _write(self, inp: ReconfigureInput, hash_: str, files: dict[str, str], rejected: str = "") -> None:
        body = WriteConfigInput(
            namespace=inp.namespace,
            name=inp.name,
            hash=hash_,
            files=files,
            workflow_id=workflow.info().workflow_id,
            rejected_hash=rejected,
            roll_pod=not inp.inplace,
        )
        await workflow.execute_activity(
            "write_controller_config", body, start_to_close_timeout=retry.CALL_TIMEOUT, retry_policy=retry.KUBE
        )

    async def _state(self, inp: ReconfigureInput) -> ControllerState:
        state: ControllerState = await workflow.execute_activity(
            "controller_state",
            ControllerRef(namespace=inp.namespace, name=inp.name),
            result_type=ControllerState,
            start_to_close_timeout=retry.CALL_TIMEOUT,
            retry_policy=retry.KUBE,
        )
        self._last = state
        return state

    async def _reload(self, inp: ReconfigureInput) -> float | None:
        """`scontrol reconfigure` through slurmrestd after the files had time to reach the pod; the time it was
        asked (None: it could not be asked, the verification then waits for a restart instead)."""
        await workflow.sleep(timedelta(seconds=inp.propagation_seconds))
        try:
            requested: float = await workflow.execute_activity(
                "reload_slurmctld",
                ControllerRef(namespace=inp.namespace, name=inp.name),
                result_type=float,
                start_to_close_timeout=retry.CALL_TIMEOUT,
                retry_policy=retry.SLURM_PROBE,
            )
        except ActivityError as err:  # an unreachable slurmrestd: the verification judges
            workflow.logger.warning("reconfigure request failed: %s", err)
            return None
        return requested

    @workflow.run
    async def run(self, inp: ReconfigureInput) -> ReconfigureResult:
        workflow.upsert_search_attributes([SA_NAMESPACE.value_set(inp.namespace), SA_CONTROLLER.value_set(inp.name)])
        self._set_phase("checking")
        check: ConfigCheck = await workflow.execute_activity(
            "check_slurm_config",
            inp.files,
            result_type=ConfigCheck,
            start_to_close_timeout=retry.CALL_TIMEOUT,
            retry_policy=retry.KUBE,
        )
        if not check.ok:
            message = rejection_message(inp, f"Slurm's parser refuses it: {check.error}")
            await self._write(inp, inp.previous_hash, inp.previous_files, rejected=inp.hash)
            await self._condition(inp, False, "SlurmConfigRejected", message)
            self._set_phase("rejected")
            return ReconfigureResult(outcome="rejected", hash=inp.hash, message=message)
        self._set_phase("applying")
        applied_at = workflow.now().timestamp()
        await self._write(inp, inp.hash, inp.files)
        requested = await self._reload(inp) if inp.inplace else None
        self._set_phase("verifying")
        verdict = await self._verify(inp, applied_at, requested)
        if verdict == "gone":
            self._set_phase("gone")
            return ReconfigureResult(outcome="gone", hash=inp.hash, message="the Controller was deleted")
        if verdict == "verified":
            message = applied_message(inp, not inp.inplace)
            await self._condition(inp, True, "Applied", message)
            self._set_phase("applied")
            return ReconfigureResult(outcome="applied", hash=inp.hash, message=message, restarted_pod=not inp.inplace)
        return await self._roll_back(inp)

    async def _verify(self, inp: ReconfigureInput, applied_at: float, requested: float | None) -> str:
        deadline = workflow.now() + timedelta(seconds=inp.verify_seconds)
        old_rule = not workflow.patched(PATCH_STOP_IS_NOT_REFUSAL)
        settle = workflow.patched(PATCH_MIDNIGHT_RESET)
        while True:
            state = await self._state(inp)
            now = workflow.now().timestamp() if settle else None
            verdict = judge(inp, state, applied_at, requested, stops_are_refusals=old_rule, now=now)
            if verdict != "waiting":
                return verdict
            if workflow.now() >= deadline:
                return "failed"
            await workflow.sleep(POLL)

    async def _roll_back(self, inp: ReconfigureInput) -> ReconfigureResult:
        """Write the last good config back (marking this hash rejected) and let slurmctld run it again."""
        self._set_phase("rolling-back")
        error = (self._last.last_error if self._last else "") or "slurmctld did not run it in time"
        message = rejection_message(inp, f"slurmctld: {error}")
        await self._write(inp, inp.previous_hash, inp.previous_files, rejected=inp.hash)
        await self._condition(inp, False, "SlurmctldRejected", message)
        previous = inp.model_copy(update={"hash": inp.previous_hash, "files": inp.previous_files})
        restored_at = workflow.now().timestamp()
        requested = await self._reload(previous) if inp.inplace else None
        # Back on the last good config: slurmctld's own restart policy brings it up on the old files.
        back = await self._verify(previous, restored_at, requested)
        self._set_phase("rolled-back")
        if back != "verified":
            message += f"; the last good config {inp.previous_hash} was written back but not verified running yet"
        return ReconfigureResult(outcome="rolled-back", hash=inp.hash, message=message)
