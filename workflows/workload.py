"""``WorkloadWorkflow``: one durable lifecycle per Kubernetes workload: a pod, or a gang of pods, and ONE Slurm job.

Steps: gather the members (a gang waits for ``min_member``) → translate → submit the EXTERNAL_JOB → label the
members → wait for the allocation → bind one member per allocated node → wait for the end → clean up (cancel
the job only once every member really stopped; remove the finalizers last). When Slurm allocates at once
(submit's immediate allocation), the submit result carries the nodes and the wait ends without a signal.

The workflow never polls Slurm or Kubernetes on its own: the worker's pod watcher and its single incremental
Slurm poll deliver ``pod_event`` and ``job_event`` signals. A slow durable re-check (``safety_recheck_seconds``)
covers a missed event. Short calls are local activities (markers, not separate tasks) because every history
event costs throughput on a single-shard server; each verb takes the whole member list.

Slurm losing the job (a slurmctld crash loses its last seconds of state and reuses job ids): a job lost
before it started is resubmitted (same pods, a new job); a job lost while its pods run is re-adopted (a new
placeholder allocated at once on the very nodes the pods run on); if Slurm gave those nodes to another job
meanwhile, the pods keep running and the new placeholder waits for exactly those nodes at the top priority.
Every verb names the job by id AND by this workflow's submission number (the job's ``comment``), so a reused
id is never acted on (docs/bridge.md, "When slurmctld crashes").

Gang policy: a member lost before the job starts cancels the job; the gang gathers again and resubmits. After
the start, the gang lives and dies together: when every member finished the job is cancelled; when one member
fails or is deleted, the others are deleted and the gang is Failed; when the job ends first, every member is
deleted. Members that came after the job was submitted (a ReplicaSet's replacements, a LeaderWorkerSet group
recreated under the same key) are not in that job: when the lifecycle ends they start the gang's next one, a
continue-as-new whose memo and input name the run that ended (``GangRestart``).

Operator actions: ``temporal workflow cancel`` tears the workload down (pods deleted, job cancelled, finalizers
removed); the ``recheck`` signal re-reads Slurm and the pods at once (re-drives a stuck step); the
``why_pending`` query says where it stands. Activities are referenced by name, so this module imports no I/O
code at all.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributePair, SearchAttributeUpdate, TypedSearchAttributes
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from slinky import wellknown
    from slinky.bridge.grouping import KIND_PODGROUP
    from slinky.bridge.models.jobspec import SlurmJobSpec
    from slinky.bridge.models.workload import (
        BindPodsInput,
        BindPodsResult,
        BuildSpecInput,
        BuildSpecResult,
        DeletePodsInput,
        EventInput,
        GangRestart,
        GroupPhaseInput,
        JobEvent,
        JobRef,
        LabelPodsInput,
        MemberState,
        Phase,
        PlacePodsInput,
        PodBinding,
        PodConditionInput,
        PodEvent,
        PodEventKind,
        PodRef,
        PodsInput,
        PodsResult,
        PodStatesResult,
        ReleasePodsInput,
        ResumeState,
        SubmitInput,
        SubmitResult,
        UpdateJobInput,
        UpdateJobResult,
        WhyPending,
        WorkloadInput,
    )
    from workflows import retry

T = TypeVar("T")

CALL_FAILED = (ActivityError, ApplicationError)
"""How a failed call surfaces: a local activity whose retries ran out raises its ApplicationError itself, not
an ActivityError (measured on temporalio's SDK); both are handled alike."""

SA_PHASE = SearchAttributeKey.for_keyword("SlinkyPhase")
SA_JOB_ID = SearchAttributeKey.for_int("SlinkySlurmJobId")
SA_PARTITION = SearchAttributeKey.for_keyword("SlinkyPartition")

ENDED_STATES = wellknown.TERMINAL_JOB_STATES | {"VANISHED"}

# Event reasons (PascalCase, shown by `kubectl describe pod`).
REASON_SUBMITTED = "SlurmJobSubmitted"
REASON_BOUND = "Scheduled"
REASON_CLEANED = "SlurmJobCleanedUp"
REASON_JOB_ENDED = "SlurmJobEnded"
REASON_DEPRECATED = "DeprecatedAnnotation"
REASON_UPDATE_FAILED = "SlurmJobUpdateFailed"
REASON_GANG_INCOMPLETE = "GangIncomplete"
REASON_GANG_MEMBER_LOST = "GangMemberLost"
REASON_LIFECYCLE_FAILED = "SlurmBridgeFailed"
REASON_ALLOCATION_LOST = "SlurmAllocationLost"
REASON_JOB_LOST = "SlurmJobLost"
REASON_GANG_WAITING = "WaitingForGang"
REASON_GANG_RESTARTED = "GangRestarted"

GATHER_QUIET_SECONDS = 2.0
"""A gang still short of members this long after its last change tells its members so on their PodScheduled
condition; a gang whose members arrive within it (a burst, a 1,000-pod ReplicaSet) writes no condition at all."""

FIX_RETRY_FIRST = 30.0
"""Seconds before an invalid or rejected workload is first re-translated without a pod change."""

# workflow.patched() ids: fixes that change the commands of an existing history.
PATCH_ONE_BOUND_EVENT = "one-bound-event-activity"
PATCH_EARLY_MEMBERS = "gang-early-members"
PATCH_LATE_MEMBER = "gang-late-member"
PATCH_RECOVER_LOST_JOB = "recover-lost-job"
PATCH_UNRECORDED_SUBMISSION = "cancel-unrecorded-submission"
PATCH_FOLDED_STEPS = "folded-place-and-release"
"""Binding, labelling and their Events in one activity (place_pods); the finalizers and the cleanup Event in one
(release_pods). Histories from before keep their separate activities on replay."""
PATCH_GANG_RESTART = "gang-restart"
"""An ended gang lifecycle hands the members that came after its job to a new run (continue-as-new); a
gathering gang says on its members' condition what it waits for. Histories from before ended without either."""
PATCH_ONE_RECHECK_TIMER = "one-recheck-timer"
"""One durable timer per safety re-check period, kept across signals, instead of a timer started and cancelled at
every wait: each of those was three history events and a timer task that Temporal loads the workflow for when it
fires, even after the workflow closed (3,000 pending pods deleted: 6,000 such tasks). Histories from before
keep their timer per wait on replay."""

# PodGroup status phases (scheduler-plugins coscheduling).
GROUP_PENDING, GROUP_SCHEDULING, GROUP_RUNNING = "Pending", "Scheduling", "Running"
GROUP_FINISHED, GROUP_FAILED = "Finished", "Failed"


class Ended(Exception):
    """Internal: the lifecycle reached its end; carries the summary."""


class MemberLost(Exception):
    """Internal: a gang member left before the job started; cancel and gather again."""


class JobLost(Exception):
    """Internal: Slurm lost the job before it started (a controller crash); submit it again."""


@dataclass
class Member:
    ref: PodRef
    terminal: bool = False
    failed: bool = False
    deleting: bool = False
    gone: bool = False
    changed: bool = False
    in_job: bool = False
    """Labelled with the current job: its allocation waits for this member."""
    node: str = ""

    @property
    def live(self) -> bool:
        return not (self.terminal or self.deleting or self.gone)

    @property
    def stopped(self) -> bool:
        return self.gone or self.terminal


def _members_in(arg: Any) -> int:
    """How many pods a call acts on, one API call each (its deadline grows with them)."""
    return len(getattr(arg, "pods", None) or getattr(arg, "bindings", None) or ())


@workflow.defn(name="WorkloadWorkflow")
class WorkloadWorkflow:
    def __init__(self) -> None:
        self.inp: WorkloadInput | None = None
        self.members: dict[str, Member] = {}
        self.phase = Phase.SUBMITTING
        self.step = "start"
        self.job_id: int | None = None
        self.submission: int | None = None
        """Which submission ``job_id`` is (written in its ``comment``): with the workflow id, the job's identity."""
        self.lost: str = ""
        """Why the previous job is gone, for the Event of the resubmission ("Slurm lost job N (...)")."""
        self.spec: SlurmJobSpec | None = None
        self.jobs_seen: dict[int, JobEvent] = {}
        self.recorded_jobs: set[int] = set()
        """Job ids this history's submits returned: any other live job of this workflow is unrecorded."""
        self.job: JobEvent | None = None
        self.reason_shown = ""
        self.message = ""
        self.submit_attempts = 0
        self.rechecks = 0
        self.recheck_requested = False
        self.dirty = False
        self._recheck_timer: asyncio.Task[None] | None = None
        self.recheck_seconds = 0.0
        """The safety re-check interval: the input's, then what each re-check was given (the pod watcher's budget)."""
        self.rechecks_at_start = 0
        self.reported: tuple[str, str] | None = None
        self.fix_retry = 0.0
        self.allocated_at_submit = False
        """The submit got the nodes at once (an immediate allocation): bind before recording Events."""
        self.allocation: tuple[str, ...] = ()
        """The Slurm nodes the members were bound to."""
        self.readopt_waiting = False
        """The re-adopting job is queued for the members' nodes (Slurm gave them away): PENDING is expected."""
        self.early: list[PodEvent] = []
        """Pod events applied before ``run`` (signal-with-start): kept until the input says who is who."""

    # ------------------------------------------------------------------------------------ messages
    @workflow.signal
    def pod_event(self, event: PodEvent) -> None:
        if self.inp is None:
            # Signals of the first workflow task run before ``run``: several gang members' signal-with-start
            # can land there together, and none of them may be lost.
            self.early.append(event)
            return
        member = self.members.get(event.uid)
        if member is None:
            # Only a gang takes new members; a single-pod workload ignores other pods' events.
            if event.kind != PodEventKind.ADDED or self.inp.group is None:
                return
            # A member that arrives while a job exists is kept (not in that job): the job is sized already,
            # so a late pod joins only a resubmission (docs/bridge.md), e.g. a replacement for a lost member.
            # Histories recorded before this fix dropped such a member: they replay unpatched.
            if self.job_id is not None and not workflow.patched(PATCH_LATE_MEMBER):
                return
            namespace = self.inp.pod.namespace
            member = self.members[event.uid] = Member(PodRef(namespace=namespace, name=event.name, uid=event.uid))
        if event.kind == PodEventKind.TERMINAL:
            member.terminal = True
            member.failed |= event.phase == "Failed"
        elif event.kind == PodEventKind.DELETING:
            member.deleting = True
        elif event.kind == PodEventKind.GONE:
            member.gone = True
        elif event.kind == PodEventKind.CHANGED:
            member.changed = True
        self.dirty = True

    @workflow.signal
    def pod_events(self, events: list[PodEvent]) -> None:
        """Several pods' events at once, in order: the pod watcher sends a burst for one lifecycle (a gang's members
        created or deleted together) as one signal, one history event instead of one per pod."""
        for event in events:
            self.pod_event(event)

    @workflow.signal
    def job_event(self, event: JobEvent) -> None:
        # Kept by id: the watcher may report the job before the submit result is recorded here.
        self.jobs_seen[event.job_id] = event
        if self._is_current(event):
            self.job = event
        self.dirty = True

    def _is_current(self, event: JobEvent) -> bool:
        """An event about the current job: its id, and not an earlier submission that had the same id."""
        return event.job_id == self.job_id and (event.submission is None or event.submission == self.submission)

    @workflow.signal
    def recheck(self) -> None:
        """Operator action: re-read Slurm and the pods now instead of at the next safety re-check."""
        self.recheck_requested = True
        self.dirty = True

    @workflow.query
    def why_pending(self) -> WhyPending:
        job = self.job
        need = self.inp.min_member if self.inp else 1
        return WhyPending(
            phase=self.phase,
            step=self.step,
            job_id=self.job_id,
            slurm_state=job.state if job else "",
            reason=job.reason if job else "",
            message=self.message,
            submit_attempts=self.submit_attempts,
            rechecks=self.rechecks,
            pods=sorted(m.ref.key for m in self.members.values()),
            min_member=need,
            missing_members=max(0, need - len(self._live())) if self.job_id is None else 0,
            previous_run_id=self.inp.restart.previous_run_id if self.inp and self.inp.restart else "",
            waiting_members=sorted(m.ref.key for m in self._waiting()) if self.job_id is not None else [],
        )

    # ------------------------------------------------------------------------------------ members
    def _live(self) -> list[Member]:
        return [m for m in self.members.values() if m.live]

    def _waiting(self) -> list[Member]:
        """Live members that are in no job and were never bound: after a submission, the ones that came late."""
        return [m for m in self.members.values() if m.live and not m.in_job and not m.node]

    def _gang_name(self) -> str:
        assert self.inp is not None and self.inp.group is not None
        group = self.inp.group
        return f"{group.kind} {group.name}" + (f" group {group.key}" if group.key else "")

    def _refs(self, members: list[Member] | None = None) -> list[PodRef]:
        return [m.ref for m in (self.members.values() if members is None else members)]

    def _any_changed(self) -> bool:
        return any(m.changed for m in self.members.values())

    def _clear_changed(self) -> None:
        for m in self.members.values():
            m.changed = False

    def _mark_gone(self, uids: list[str]) -> None:
        for uid in uids:
            if uid in self.members:
                self.members[uid].gone = True

    # ------------------------------------------------------------------------------------ plumbing
    async def _call(self, name: str, arg: Any, result_type: type[T], policy: Any = retry.KUBE) -> T:
        result: T = await workflow.execute_local_activity(
            name,
            arg,
            result_type=result_type,
            start_to_close_timeout=retry.call_timeout(_members_in(arg)),
            retry_policy=policy,
        )
        return result

    async def _do(self, name: str, arg: Any, policy: Any = retry.KUBE) -> None:
        await workflow.execute_local_activity(
            name, arg, start_to_close_timeout=retry.call_timeout(_members_in(arg)), retry_policy=policy
        )

    async def _best_effort(self, name: str, arg: Any) -> None:
        """Events, conditions, PodGroup phases: a few tries, and a failure (the apiserver is down) is logged, never
        the end of the lifecycle."""
        try:
            await self._do(name, arg, retry.BEST_EFFORT)
        except CALL_FAILED as err:
            workflow.logger.warning("%s failed, going on without it: %s", name, err)

    async def _event(
        self, reason: str, message: str, type_: str = "Normal", members: list[Member] | None = None
    ) -> None:
        refs = self._refs(members if members is not None else self._live() or list(self.members.values()))
        if refs:
            await self._best_effort("record_event", EventInput(pods=refs, reason=reason, message=message, type=type_))

    async def _condition(self, reason: str, message: str) -> None:
        self.message = message
        refs = self._refs(self._live())
        if refs:
            await self._best_effort("set_pod_condition", PodConditionInput(pods=refs, reason=reason, message=message))

    def _set_phase(self, phase: Phase, *extra: SearchAttributeUpdate[Any]) -> None:
        self.phase = phase
        workflow.upsert_search_attributes([SA_PHASE.value_set(phase.value), *extra])

    async def _group_phase(self, phase: str) -> None:
        assert self.inp is not None
        if self.inp.group is not None and self.inp.group.kind == KIND_PODGROUP:
            await self._best_effort("set_group_phase", GroupPhaseInput(group=self.inp.group, phase=phase))

    async def _wait(self, limit: timedelta | None = None) -> None:
        """Wait for a signal or ``limit``; re-check Slurm and the pods every ``safety_recheck_seconds`` meanwhile."""
        assert self.inp is not None
        period = timedelta(seconds=self.recheck_seconds)
        if workflow.patched(PATCH_ONE_RECHECK_TIMER):
            self._arm_recheck_timer()
            if limit is None or limit >= period:
                await workflow.wait_condition(lambda: self.dirty)
            else:
                try:
                    await workflow.wait_condition(lambda: self.dirty, timeout=max(limit, timedelta(milliseconds=1)))
                except TimeoutError:
                    pass
        else:
            timeout = period if limit is None else max(min(period, limit), timedelta(milliseconds=1))
            try:
                await workflow.wait_condition(lambda: self.dirty, timeout=timeout)
            except TimeoutError:
                if limit is None or limit >= period:
                    self.recheck_requested = True
        self.dirty = False
        if self.recheck_requested:
            self.recheck_requested = False
            await self._recheck()

    def _arm_recheck_timer(self) -> None:
        """The safety re-check's timer, unless one is pending: it fires once per period however many signals come."""
        if self._recheck_timer is None or self._recheck_timer.done():
            self._recheck_timer = asyncio.create_task(self._recheck_after())

    async def _recheck_after(self) -> None:
        assert self.inp is not None
        await workflow.sleep(self.recheck_seconds)
        self.recheck_requested = True
        self.dirty = True

    async def _recheck(self) -> None:
        self.rechecks += 1
        states = await self._call("get_pod_states", PodsInput(pods=self._refs()), PodStatesResult)
        if states.recheck_seconds is not None:  # recorded in the result: replays follow the same timers
            self.recheck_seconds = states.recheck_seconds
        for uid, state in states.states.items():
            member = self.members[uid]
            member.gone |= state.gone
            member.deleting |= state.deleting
            member.terminal |= state.phase in ("Succeeded", "Failed")
            member.failed |= state.phase == "Failed"
        if self.job_id is not None:
            self.job = await self._call("get_job", self._job_ref(), JobEvent, retry.SLURM)

    def _job_ref(self) -> JobRef:
        """The current job by id and owner: what every Slurm verb is given (never an id alone)."""
        assert self.job_id is not None
        return JobRef(job_id=self.job_id, workflow_id=workflow.info().workflow_id, submission=self.submission)

    def _unrecorded_jobs(self) -> list[JobRef]:
        """Live jobs of this workflow that the watcher reported but that are not its current job: a submit
        that ran in a workflow task whose worker died before the task was recorded (kill -9 mid-task). The
        replayed lifecycle never learns their ids from its history, so it cancels them here, by owner."""
        wid = workflow.info().workflow_id
        return [
            JobRef(job_id=e.job_id, workflow_id=wid, submission=e.submission)
            for e in self.jobs_seen.values()
            if e.state in ("PENDING", "RUNNING") and e.job_id not in self.recorded_jobs and not self._is_current(e)
        ]

    def _job_ended(self) -> bool:
        return self.job is not None and self.job.state in ENDED_STATES

    def _job_running(self) -> bool:
        return self.job is not None and self.job.state == "RUNNING" and bool(self.job.nodes)

    # ------------------------------------------------------------------------------------ lifecycle
    @workflow.run
    async def run(self, inp: WorkloadInput) -> str:
        self.inp = inp
        self.recheck_seconds = inp.safety_recheck_seconds
        self.members.setdefault(inp.pod.uid, Member(inp.pod))
        for ref in inp.members:
            self.members.setdefault(ref.uid, Member(ref))
        if inp.restart is not None:
            self.submit_attempts = inp.restart.submissions
        dirty = self.dirty
        # Histories recorded before this fix dropped the other members' first-task events: unpatched there.
        if any(e.uid != inp.pod.uid for e in self.early) and workflow.patched(PATCH_EARLY_MEMBERS):
            for event in self.early:
                self.pod_event(event)
        self.early.clear()
        self.dirty = dirty  # every step checks the members before it waits: nothing to wake up
        try:
            if inp.resume is not None:
                self._restore(inp.resume)
                result = await self._await_end()
            else:
                if inp.restart is not None:
                    await self._group_phase(GROUP_PENDING)
                result = await self._lifecycle()
        except Ended as end:
            result = str(end)
        except CALL_FAILED as err:
            # A permanent failure (e.g. the pod was bound elsewhere): never leave the job or the
            # finalizers behind; the pods are left to their controllers. Then fail, visibly.
            await self._abandon(f"the lifecycle failed: {err.cause or err}")
            raise
        except asyncio.CancelledError:
            # Operator cancel: tear everything down, then report the cancellation.
            self.step = "cancelled"
            await self._teardown("the workflow was cancelled")
            raise
        await self._restart_for_waiting_members(result)
        return result

    async def _restart_for_waiting_members(self, result: str) -> None:
        """The lifecycle ended; members that came after its job (replacements of lost members, a LeaderWorkerSet
        group recreated under the same key) start the gang's next lifecycle: a continue-as-new with a fresh start,
        as a new workload would get. Returns only when no member waits (never for a single pod)."""
        assert self.inp is not None
        waiting = self._waiting()
        if self.inp.group is None or not waiting or not workflow.patched(PATCH_GANG_RESTART):
            return
        info = workflow.info()
        restarts = self.inp.restart.restarts + 1 if self.inp.restart else 1
        restart = GangRestart(
            previous_run_id=info.run_id, previous_result=result, submissions=self.submit_attempts, restarts=restarts
        )
        await self._event(
            REASON_GANG_RESTARTED,
            f"{self._gang_name()}: the previous lifecycle ended ({result}); this pod starts the next one",
            members=waiting,
        )
        first, *rest = (m.ref for m in waiting)
        update: dict[str, object] = {
            "pod": first,
            "members": rest,
            "resume": None,
            "restart": restart,
            "safety_recheck_seconds": self.recheck_seconds,
        }
        # A fresh start's search attributes: no job, no partition yet (the ended run's would be copied).
        attributes = TypedSearchAttributes(
            [
                pair
                for pair in info.typed_search_attributes
                if pair.key.name not in (SA_JOB_ID.name, SA_PARTITION.name, SA_PHASE.name)
            ]
            + [SearchAttributePair(SA_PHASE, Phase.SUBMITTING.value)]
        )
        workflow.continue_as_new(
            self.inp.model_copy(update=update),
            memo={"previous_run_id": info.run_id, "previous_result": result, "restarts": restarts},
            search_attributes=attributes,
        )

    async def _lifecycle(self) -> str:
        while True:
            await self._gather()
            await self._submit()
            try:
                await self._await_allocation()
                break
            except MemberLost:
                await self._release_for_resubmit()
            except JobLost:
                self._forget_lost_job()
        await self._bind()
        return await self._await_end()

    async def _gather(self) -> None:
        """A gang waits for ``min_member`` live members: its members' PodScheduled condition says what it waits
        for once nothing changed for ``GATHER_QUIET_SECONDS``, and a Warning Event once the gang timeout passes."""
        assert self.inp is not None
        need = self.inp.min_member
        if len(self._live()) >= need:
            return
        self.step = "wait_members"
        tell = workflow.patched(PATCH_GANG_RESTART)
        deadline = workflow.now() + timedelta(seconds=self.inp.gang_timeout_seconds)
        warned = False
        shown, since = "", workflow.now()
        while len(self._live()) < need:
            if not self._live():
                raise Ended(await self._cleanup("every member left before the gang was complete"))
            message = f"waiting for {need - len(self._live())} of {need} members of {self._gang_name()}"
            if message != self.message:
                since = workflow.now()
            self.message = message
            if not warned and workflow.now() >= deadline:
                warned = True
                await self._event(
                    REASON_GANG_INCOMPLETE,
                    f"{self.inp.kind} {self.inp.workload_name} has {len(self._live())} of {need} members "
                    f"after {self.inp.gang_timeout_seconds:.0f} s; waiting for the rest",
                    "Warning",
                )
            quiet = since + timedelta(seconds=GATHER_QUIET_SECONDS)
            if tell and message != shown and workflow.now() >= quiet:
                shown = message
                await self._condition(REASON_GANG_WAITING, message)
            limits = [] if warned else [deadline - workflow.now()]
            if tell and message != shown:
                limits.append(quiet - workflow.now())
            await self._wait(min(limits) if limits else None)

    async def _translate(self, *, wait_for_fix: bool = True) -> SlurmJobSpec | None:
        """The job spec, or None (members gone, or invalid: reported, then waited on if ``wait_for_fix``)."""
        assert self.inp is not None
        self.step = "translate"
        res = await self._call(
            "build_job_spec",
            BuildSpecInput(pods=self._refs(self._live()), group=self.inp.group, defaults=self.inp.defaults),
            BuildSpecResult,
        )
        self._mark_gone(res.gone)
        if res.spec is None and not res.error_reason:
            return None
        for warning in res.warnings:
            await self._event(REASON_DEPRECATED, warning, "Warning")
        if res.error_reason:
            if wait_for_fix:
                await self._invalid(res.error_reason, res.error_message)
            else:
                await self._report_invalid(res.error_reason, res.error_message)
            return None
        return res.spec

    async def _report_invalid(self, reason: str, message: str) -> None:
        """Tell the user where they look: a Warning Event and the pod condition (once per distinct problem)."""
        if (reason, message) == self.reported:
            return
        self.reported = (reason, message)
        await self._event(reason, message, "Warning")
        await self._condition(reason, message)

    async def _invalid(self, reason: str, message: str) -> None:
        """Report the problem, then wait for a fix or the members' end."""
        self.phase = Phase.INVALID
        await self._report_invalid(reason, message)
        self.step = "wait_for_fix"
        # `changed` is NOT reset here: a fix that arrived while translating or reporting must count.
        rechecks = self.rechecks
        # A fix is a change of a pod (signalled), or of something no signal covers: the owner's annotations
        # (Job, JobSet, PodGroup, LWS), nodes, partitions. So retry on a backoff from FIX_RETRY_FIRST up to
        # the safety re-check interval.
        assert self.inp is not None
        self.fix_retry = min(self.fix_retry * 2, self.recheck_seconds) if self.fix_retry else FIX_RETRY_FIRST
        deadline = workflow.now() + timedelta(seconds=self.fix_retry)
        while not self._any_changed() and self._live():
            remaining = deadline - workflow.now()
            if remaining <= timedelta(0):
                break
            await self._wait(remaining)
            if self.rechecks != rechecks:
                break

    async def _submit(self) -> None:
        assert self.inp is not None
        wid = workflow.info().workflow_id
        while self.job_id is None:
            if not self._live():
                raise Ended(await self._cleanup("the pods ended before a Slurm job was submitted"))
            if len(self._live()) < self.inp.min_member:
                await self._gather()
                continue
            self._clear_changed()
            spec = await self._translate()
            if spec is None:
                continue
            self.step = "submit"
            self.submit_attempts += 1
            submission = self.submit_attempts
            res = await self._call(
                "submit_placeholder_job",
                SubmitInput(workflow_id=wid, spec=spec, submission=submission),
                SubmitResult,
                retry.SLURM,
            )
            if res.job_id is None:
                await self._invalid("SlurmJobRejected", f"Slurm rejected the job: {res.error_message}")
                continue
            self.spec = spec
            self.job_id, self.submission = res.job_id, submission
            self.recorded_jobs.add(res.job_id)
            self.reported, self.fix_retry = None, 0.0
            seen = self.jobs_seen.get(res.job_id)
            self.job = seen if seen is not None and self._is_current(seen) else None
            self.allocated_at_submit = bool(res.nodes)
            if res.nodes and (self.job is None or self.job.state == "PENDING"):
                # An immediate allocation: the job runs already, and no start signal will follow.
                self.job = JobEvent(job_id=res.job_id, state="RUNNING", nodes=res.nodes)
        partition = (self.spec.partition if self.spec else None) or self.inp.defaults.partition
        self._set_phase(Phase.PENDING, SA_JOB_ID.value_set(self.job_id), SA_PARTITION.value_set(partition))
        self.step = "label"
        assert self.spec is not None
        submitted = [m for m in self._live() if m.ref.key in self.spec.pods]
        if self.lost:
            await self._event(REASON_JOB_LOST, f"{self.lost}; resubmitted as {self.job_id}", "Warning", submitted)
            self.lost = ""
        if self.allocated_at_submit:
            # The job runs already: bind at once, then label (see _bind). Labels, Events and the group phase
            # wait until the pods are bound, so that their writes do not compete with the bindings.
            for m in submitted:
                m.in_job = True
            return
        # Label and tell the user at once: the job is already queued, so this is the critical path.
        labelled, _ = await asyncio.gather(
            self._call(
                "label_pods",
                LabelPodsInput(pods=self._refs(submitted), job_id=self.job_id, workflow_id=wid),
                PodsResult,
            ),
            self._event(REASON_SUBMITTED, f"Submitted Slurm job {self.job_id}", members=submitted),
        )
        self._mark_gone(labelled.gone)
        for uid in labelled.done:
            self.members[uid].in_job = True
        await self._group_phase(GROUP_SCHEDULING)

    def _in_job(self) -> list[Member]:
        return [m for m in self.members.values() if m.in_job]

    def _gang_broken(self) -> bool:
        """A member of the submitted job left (deleted, finished) before the job started."""
        assert self.spec is not None
        return len(self._in_job()) < len(self.spec.pods) or any(not m.live for m in self._in_job())

    async def _await_allocation(self) -> None:
        assert self.inp is not None
        self.step = "wait_allocation"
        while True:
            if not self._live():
                raise Ended(await self._cleanup("the pods ended while their job was pending"))
            if self._job_ended():
                if self._job_vanished() and workflow.patched(PATCH_RECOVER_LOST_JOB):
                    raise JobLost()
                raise Ended(await self._end_by_job())
            if self._gang_broken():
                raise MemberLost()
            if self._job_running():
                return
            if self._any_changed():
                self._clear_changed()
                await self._apply_pod_change()
                continue
            if (
                self.job is not None
                and self.job.state == "PENDING"
                and self.job.reason not in wellknown.QUIET_PENDING_REASONS
            ):
                if self.job.reason != self.reason_shown:
                    self.reason_shown = self.job.reason
                    await self._condition("Unschedulable", f"Slurm job {self.job_id} is pending: {self.job.reason}")
            await self._wait()

    def _job_vanished(self) -> bool:
        return self.job is not None and self.job.state == "VANISHED"

    def _lost_text(self) -> str:
        """How the user is told: "Slurm lost job 525 (controller restart)"."""
        assert self.job is not None
        return f"Slurm lost job {self.job.job_id} ({self.job.cause or 'it vanished'})"

    def _forget_lost_job(self) -> None:
        """The pending job vanished (a slurmctld crash lost it): nothing to cancel (its id may be another job's
        now), so forget it and submit again with the same members (no command here: replay-safe)."""
        self.lost = self._lost_text()
        workflow.logger.warning("%s before it started; resubmitting", self.lost)
        for m in self.members.values():
            m.in_job = False
        self.phase = Phase.SUBMITTING
        self.job_id = self.submission = None
        self.job = None
        self.spec = None
        self.allocated_at_submit = False
        self.reason_shown = ""

    async def _release_for_resubmit(self) -> None:
        """A gang member left while pending: cancel the job (nothing runs yet) and gather again."""
        assert self.job_id is not None
        lost = [m.ref.key for m in self.members.values() if not m.live]
        await self._event(
            REASON_GANG_MEMBER_LOST,
            f"gang member(s) {', '.join(sorted(lost))} left before Slurm job {self.job_id} started; resubmitting",
            "Warning",
        )
        await self._do("cancel_job", self._job_ref(), retry.SLURM)
        # The departed members' finalizers go now; the rest keep theirs for the next job.
        await self._do(
            "remove_finalizers", PodsInput(pods=self._refs([m for m in self.members.values() if not m.live]))
        )
        for m in self.members.values():
            m.in_job = False
        self.phase = Phase.SUBMITTING  # no job is queued until the gang resubmits (no command: replay-safe)
        self.job_id = self.submission = None
        self.job = None
        self.spec = None
        self.allocated_at_submit = False
        self.reason_shown = ""

    async def _apply_pod_change(self) -> None:
        """Annotations changed on a pending member: re-translate and update the pending job.

        A bad edit is reported but does not block: the job already queued in Slurm keeps its place, and
        its allocation is still bound when it comes.
        """
        spec = await self._translate(wait_for_fix=False)
        self.step = "wait_allocation"
        if spec is None or spec == self.spec or self.job_id is None:
            return
        res = await self._call(
            "update_pending_job", UpdateJobInput(job=self._job_ref(), spec=spec), UpdateJobResult, retry.SLURM
        )
        if res.updated:
            self.spec = spec
        else:
            await self._event(
                REASON_UPDATE_FAILED, f"Slurm job {self.job_id} not updated: {res.error_message}", "Warning"
            )

    async def _bind(self) -> None:
        assert self.job is not None and self.job_id is not None and self.spec is not None
        self.step = "bind"
        self._set_phase(Phase.BINDING)
        members = sorted((m for m in self._in_job() if m.live), key=lambda m: m.ref.name)
        bindings = [PodBinding(pod=m.ref, slurm_node=n) for m, n in zip(members, self.job.nodes, strict=False)]
        if workflow.patched(PATCH_FOLDED_STEPS):
            await self._place(bindings)
            await self._group_phase(GROUP_RUNNING)
            return
        res = await self._call("bind_pods", BindPodsInput(bindings=bindings, job_id=self.job_id), BindPodsResult)
        self._bound(res)
        bound = [m for m in members if m.node]
        if self.allocated_at_submit and bound:
            # Bound before labelled: the finalizer follows the binding by one call. A pod deleted in between is
            # seen by the pod watcher, or found gone by this step when it runs again after a worker crash.
            wid = workflow.info().workflow_id
            labelled = await self._call(
                "label_pods", LabelPodsInput(pods=self._refs(bound), job_id=self.job_id, workflow_id=wid), PodsResult
            )
            self._mark_gone(labelled.gone)
            await self._event(REASON_SUBMITTED, f"Submitted Slurm job {self.job_id} (allocated at once)", members=bound)
        messages = {
            m.ref.uid: f"Successfully assigned {m.ref.key} to {m.node} (Slurm job {self.job_id})" for m in bound
        }
        if len(bound) > 1 and workflow.patched(PATCH_ONE_BOUND_EVENT):
            # One activity for every member's Event (each names its own node), not one per member.
            await self._best_effort(
                "record_event", EventInput(pods=self._refs(bound), reason=REASON_BOUND, message="", messages=messages)
            )
        else:
            for m in bound:
                await self._event(REASON_BOUND, messages[m.ref.uid], members=[m])
        await self._group_phase(GROUP_RUNNING)

    async def _place(self, bindings: list[PodBinding]) -> None:
        """Bind, label (an allocation at submit: bound before labelled, the finalizer follows in the same
        activity) and tell, in one activity."""
        assert self.job is not None and self.job_id is not None
        submitted = EventInput(
            pods=[], reason=REASON_SUBMITTED, message=f"Submitted Slurm job {self.job_id} (allocated at once)"
        )
        placed = PlacePodsInput(
            bindings=bindings,
            job_id=self.job_id,
            workflow_id=workflow.info().workflow_id,
            label=self.allocated_at_submit,
            submitted=submitted if self.allocated_at_submit else None,
            scheduled_reason=REASON_BOUND,
        )
        self._bound(await self._call("place_pods", placed, BindPodsResult))

    def _bound(self, res: BindPodsResult) -> None:
        """Take in what the binding step found: each member's node (or that it was gone), and the allocation."""
        assert self.job is not None
        self._mark_gone(res.gone)
        for uid, node in res.nodes.items():
            self.members[uid].node = node
        self.allocation = tuple(self.job.nodes)
        nodes = sorted(set(res.nodes.values()))
        self.message = f"bound to {', '.join(nodes)} by Slurm job {self.job_id}"
        self._set_phase(Phase.RUNNING)

    async def _await_end(self) -> str:
        """Run until the gang ends: all finished, one failed or deleted, or the job ended."""
        self.step = "running"
        bound = [m for m in self.members.values() if m.node]
        while True:
            if not bound:
                return await self._cleanup("no member was left to bind")
            if all(m.terminal and not m.failed for m in bound):
                await self._group_phase(GROUP_FINISHED)
                return await self._cleanup("the workload ended")
            broken = [m for m in bound if m.failed or (not m.terminal and (m.deleting or m.gone))]
            if broken:
                return await self._end_by_member(broken)
            if self.readopt_waiting and self._job_running():
                self.readopt_waiting = False  # Slurm handed the nodes back: the job holds them again
            if self._job_ended() or self._allocation_lost():
                recover = self._job_vanished() or not self._job_ended()
                if recover and workflow.patched(PATCH_RECOVER_LOST_JOB):
                    await self._readopt()
                    continue
                if self._job_ended():
                    raise Ended(await self._end_by_job())
                raise Ended(await self._end_by_lost_allocation())
            self._continue_if_long()
            await self._wait()

    def _restore(self, state: ResumeState) -> None:
        """Pick up a running workload after continue-as-new."""
        self.members = {
            m.ref.uid: Member(
                m.ref, terminal=m.terminal, failed=m.failed, deleting=m.deleting, gone=m.gone, in_job=True, node=m.node
            )
            for m in state.members
        }
        self.job_id, self.job, self.spec = state.job_id, state.job, state.spec
        self.submission, self.readopt_waiting = state.submission, state.readopt_waiting
        for ref in state.waiting:
            self.members[ref.uid] = Member(ref)
        self.submit_attempts, self.rechecks = state.submit_attempts, state.rechecks
        self.rechecks_at_start = state.rechecks
        self.phase = Phase.RUNNING
        self.allocation = tuple(state.job.nodes)
        self.message = (
            f"bound to {', '.join(sorted({m.node for m in state.members if m.node}))} by Slurm job {self.job_id}"
        )

    def _continue_if_long(self) -> None:
        """Continue as new (never returns) once this run's history is long: many re-checks, or Temporal asks."""
        assert self.inp is not None and self.job is not None and self.job_id is not None and self.spec is not None
        long = self.rechecks - self.rechecks_at_start >= self.inp.continue_as_new_after_rechecks
        if not (long or workflow.info().is_continue_as_new_suggested()):
            return
        state = ResumeState(
            job_id=self.job_id,
            job=self.job,
            spec=self.spec,
            members=[
                MemberState(
                    ref=m.ref, node=m.node, terminal=m.terminal, failed=m.failed, deleting=m.deleting, gone=m.gone
                )
                for m in self.members.values()
                if m.in_job
            ],
            submit_attempts=self.submit_attempts,
            rechecks=self.rechecks,
            submission=self.submission,
            readopt_waiting=self.readopt_waiting,
            waiting=[m.ref for m in self._waiting()],
        )
        update: dict[str, object] = {"resume": state, "safety_recheck_seconds": self.recheck_seconds}
        workflow.continue_as_new(self.inp.model_copy(update=update))

    async def _end_by_member(self, broken: list[Member]) -> str:
        """A member failed or was deleted: the gang is over; delete the others, then clean up."""
        others = [m for m in self.members.values() if m.node and not m.stopped and m not in broken]
        why = f"member {broken[0].ref.key} {'failed' if broken[0].failed else 'was deleted'}"
        if others:
            self.step = "delete_pods"
            await self._event(REASON_GANG_MEMBER_LOST, f"{why}; deleting the rest of the gang", "Warning", others)
            await self._do("delete_pods", DeletePodsInput(pods=self._refs(others)))
        failed = any(m.failed for m in broken) or bool(others)
        await self._group_phase(GROUP_FAILED if failed else GROUP_FINISHED)
        return await self._cleanup(why if len(self.members) > 1 else "the workload ended")

    def _allocation_lost(self) -> bool:
        """After a slurmctld crash a job can come back PENDING, or run again elsewhere: the pods' nodes are
        then no longer the job's (slurm.md §9)."""
        job = self.job
        if job is None or not self.allocation:
            return False
        if self.readopt_waiting and job.state != "RUNNING":
            return False  # queued for the members' nodes: PENDING is expected
        return job.state == "PENDING" or (
            job.state == "RUNNING" and bool(job.nodes) and sorted(job.nodes) != sorted(self.allocation)
        )

    async def _readopt(self) -> None:
        """Slurm lost the running job (vanished, or back to PENDING, or running elsewhere after a slurmctld
        crash) while the pods still run: give Slurm a new placeholder on exactly those nodes, at once, so it
        knows them busy again. Only if Slurm gave the nodes to another job meanwhile are the pods deleted."""
        assert self.job is not None and self.spec is not None and self.inp is not None
        self.step = "readopt"
        lost = (
            self._lost_text()
            if self._job_vanished()
            else (
                f"Slurm job {self.job_id} lost its allocation ({self.job.state}"
                f"{' on ' + ', '.join(self.job.nodes) if self.job.nodes else ''})"
            )
        )
        if not self._job_vanished():
            # Still ours (same id and submission), but no longer where the pods run: release it first.
            await self._do("cancel_job", self._job_ref(), retry.SLURM)
        self.submit_attempts += 1
        submission = self.submit_attempts
        nodes = sorted(self.allocation)
        res = await self._call(
            "submit_placeholder_job",
            SubmitInput(workflow_id=workflow.info().workflow_id, spec=self.spec, submission=submission, nodes=nodes),
            SubmitResult,
            retry.SLURM,
        )
        if res.job_id is None:
            # Slurm refused even a queued job on these nodes (e.g. a node left the partition): nothing can hold
            # them for the pods any more, so they go, with the reason.
            self.job_id = self.submission = None
            raise Ended(
                await self._delete_members_and_clean_up(
                    REASON_ALLOCATION_LOST,
                    f"{lost}, and Slurm refused a new job on its nodes {', '.join(nodes)} ({res.error_message});"
                    " deleting the pod",
                    "Slurm lost the job and refused a new one on its nodes",
                )
            )
        self.job_id, self.submission = res.job_id, submission
        self.readopt_waiting = not res.nodes
        if res.nodes:
            self.job = JobEvent(job_id=res.job_id, state="RUNNING", nodes=res.nodes, submission=submission)
            self.allocation = tuple(self.job.nodes)
            how = f"re-adopted as job {res.job_id} on {', '.join(nodes)}"
        else:
            self.job = JobEvent(job_id=res.job_id, state="PENDING", submission=submission)
            how = (
                f"Slurm could not give {', '.join(nodes)} back at once ({res.error_message}): the pods keep"
                f" running, and job {res.job_id} waits for exactly those nodes at the top priority"
            )
        self._set_phase(Phase.RUNNING, SA_JOB_ID.value_set(res.job_id))
        alive = [m for m in self._in_job() if not m.stopped]
        labelled = await self._call(
            "label_pods",
            LabelPodsInput(pods=self._refs(alive), job_id=res.job_id, workflow_id=workflow.info().workflow_id),
            PodsResult,
        )
        self._mark_gone(labelled.gone)
        self.message = f"bound to {', '.join(sorted({m.node for m in alive}))} by Slurm job {res.job_id}"
        await self._event(REASON_JOB_LOST, f"{lost}; {how}", "Warning", alive)
        self.step = "running"

    async def _end_by_lost_allocation(self) -> str:
        """The pods run on nodes the job no longer holds: delete them, then cancel the job and clean up."""
        assert self.job is not None
        where = ", ".join(self.job.nodes) or "no node"
        return await self._delete_members_and_clean_up(
            REASON_ALLOCATION_LOST,
            f"Slurm job {self.job_id} lost its allocation ({self.job.state} on {where} after running on"
            f" {', '.join(self.allocation)}); deleting the pod",
            "the Slurm job lost its allocation",
        )

    async def _end_by_job(self) -> str:
        """The Slurm job ended first (cancelled, preempted, timed out, vanished): delete the pods."""
        assert self.job is not None
        state = self.job.state
        return await self._delete_members_and_clean_up(
            REASON_JOB_ENDED,
            f"Slurm job {self.job_id} is {state}; deleting the pod",
            f"the Slurm job ended ({state})",
            cancel=False,
        )

    async def _delete_members_and_clean_up(self, reason: str, message: str, why: str, *, cancel: bool = True) -> str:
        """Slurm took the allocation away: tell the members (Warning), delete them, fail the group, clean up."""
        self.step = "delete_pods"
        alive = [m for m in self._in_job() if not m.stopped]
        await self._event(reason, message, "Warning", alive)
        if alive:
            await self._do("delete_pods", DeletePodsInput(pods=self._refs(alive)))
        await self._group_phase(GROUP_FAILED)
        return await self._cleanup(why, cancel=cancel)

    async def _await_gone(self) -> None:
        """Wait until every member really stopped (deleted, terminal, or its node confirmed), bounded."""
        assert self.inp is not None
        self.step = "wait_pod_gone"
        deadline = workflow.now() + timedelta(seconds=self.inp.gone_timeout_seconds)
        while not all(m.stopped or (m.deleting and not m.node) for m in self._in_job()):
            remaining = deadline - workflow.now()
            if remaining <= timedelta(0):
                await self._recheck()  # one last look before giving up on the pods
                if not all(m.stopped for m in self._in_job()):
                    workflow.logger.warning("pods did not stop in time; cancelling their job anyway")
                return
            await self._wait(remaining)

    async def _cleanup(self, why: str, *, cancel: bool = True) -> str:
        """Cancel the job once every member really stopped, then remove the finalizers (always last)."""
        self.phase = Phase.CLEANING_UP
        await self._await_gone()
        if cancel and self.job_id is not None and not self._job_ended():
            self.step = "cancel_job"
            await self._do("cancel_job", self._job_ref(), retry.SLURM)
        if cancel and self._unrecorded_jobs() and workflow.patched(PATCH_UNRECORDED_SUBMISSION):
            self.step = "cancel_job"
            for job in self._unrecorded_jobs():
                await self._do("cancel_job", job, retry.SLURM)
        self.step = "remove_finalizer"
        # Members that came after the job never had its finalizer: they are the gang's next lifecycle's.
        released = self._refs([m for m in self.members.values() if m not in self._waiting()])
        cleaned = None
        if self.job_id is not None:
            message = f"Slurm job {self.job_id} cleaned up: {why}"
            cleaned = EventInput(pods=released, reason=REASON_CLEANED, message=message) if released else None
        if workflow.patched(PATCH_FOLDED_STEPS):
            await self._do("release_pods", ReleasePodsInput(pods=released, event=cleaned))
        else:
            await self._do("remove_finalizers", PodsInput(pods=released))
            if cleaned is not None and cleaned.pods:
                await self._best_effort("record_event", cleaned)
        self._set_phase(Phase.FINISHED)
        self.step = "done"
        return why

    async def _abandon(self, why: str) -> None:
        """Release what the bridge holds (job, finalizers) without touching the pods, and say why."""
        self.step = "abandon"
        if self.job_id is not None and not self._job_ended():
            await self._do("cancel_job", self._job_ref(), retry.SLURM)
        await self._do("remove_finalizers", PodsInput(pods=self._refs()))
        await self._event(REASON_LIFECYCLE_FAILED, why[:500], "Warning", list(self.members.values()))
        self._set_phase(Phase.FINISHED)

    async def _teardown(self, why: str) -> None:
        """Operator cancel: delete the pods, wait for them to stop, cancel the job, remove the finalizers."""
        alive = [m for m in self.members.values() if not m.stopped]
        if alive:
            await self._do("delete_pods", DeletePodsInput(pods=self._refs(alive)))
        await self._cleanup(why)
