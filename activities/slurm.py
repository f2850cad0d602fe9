"""Slurm-side activities of the workload lifecycle: submit, update, cancel and read a placeholder job.

Submit is the one verb that is not naturally idempotent, so it looks before it leaps: the worker's job
index (fed by the single incremental Slurm poll, so looking costs no request) is asked for a live job
that this workflow already owns (by the ``comment`` the bridge writes). After an unknown outcome (a
timeout after the request was sent, a worker killed mid-call) the retry therefore finds the earlier job
instead of creating a second one.

Submit first asks Slurm for an immediate allocation (``job/allocate`` with ``immediate``) when the worker's
capacity estimate says it will be granted (no job waits for nodes, and enough nodes look free): the job is
then RUNNING in milliseconds instead of at slurmctld's next scheduler tick (about 0.4 s tuned, 3 s by
default). Slurm still decides: it refuses when the nodes are busy or a higher-priority job waits, and the
job is then queued with ``job/submit`` as before (docs/bridge.md, "Immediate allocation").

Identity: job ids are reused after a slurmctld crash (slurm.md §9), so no verb acts on an id alone. Every
:class:`JobRef` names the owning workflow and its submission number, the pair the bridge writes in the job's
``comment``; cancel, update and read check it on a fresh read first, and a job that is someone else's is "my job
is gone", never "cancel it" (docs/bridge.md, "Job identity").
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Collection
from contextlib import AbstractAsyncContextManager, AbstractContextManager, nullcontext
from typing import Any, Protocol

from temporalio import activity
from temporalio.exceptions import ApplicationError

from slinky import hostlist, telemetry
from slinky.bridge.models.workload import (
    JobEvent,
    JobRef,
    SubmitInput,
    SubmitResult,
    UpdateJobInput,
    UpdateJobResult,
    job_comment_for,
    job_owner_from_comment,
    owns_job,
)
from slinky.clients.errors import SlurmError, SlurmNotFound, SlurmRejected, SlurmUnavailable
from slinky.clients.slurm import ALLOCATE_NOT_NOW_NUMBERS, JobDescMsg, JobInfo, SlurmApi

logger = logging.getLogger(__name__)
READOPT_PRIORITY = 4294967293
"""The highest priority a job can be given (0xfffffffd; NO_VAL and INFINITE are the two above)."""


CAUGHT_UP_SECONDS = 10.0
"""How long a retried submit waits for the watcher's next poll before it reads the whole job list."""
RECHECK_VIEW_SECONDS = 30.0
"""How fresh the watcher's view must be to answer the safety re-check's ``get_job`` without a read."""

CONFIRM_SECONDS = 2.0
"""How long a cancel waits for the watcher's next poll and controller check before it reads the job instead."""


class JobIndex(Protocol):
    """The worker's view of bridge jobs, kept current by the Slurm job watcher."""

    async def wait_synced(self) -> None: ...

    async def caught_up(self, since: float, timeout: float) -> bool:
        """Whether the index has seen every job made before ``since`` (``time.monotonic``) within ``timeout``."""
        ...

    async def confirmed(self, since: float, timeout: float, job_id: int | None = None) -> bool:
        """Whether, within ``timeout``, a poll that covers ``job_id`` and a controller check, both asked after
        ``since``, were answered: then :meth:`job` tells whose a job is and whether it is live as a read of it
        would (ids repeat only after a controller restart, which that check would have seen)."""
        ...

    def job(self, job_id: int) -> JobInfo | None:
        """The job with this id as last seen; None when Slurm no longer lists it."""
        ...

    def seen_within(self, seconds: float) -> bool:
        """Whether a poll asked less than ``seconds`` ago was answered (the view is that fresh)."""
        ...

    def live_job_of(self, workflow_id: str, submission: int | None = None) -> JobInfo | None: ...

    def expect(self, job: JobInfo) -> None: ...

    def cancelling(self, ref: JobRef) -> None:
        """The job's own lifecycle is cancelling it: its end is no news to that lifecycle (no ``job_event``)."""
        ...


class Capacity(Protocol):
    """The worker's estimate of free Slurm nodes: ask for an immediate allocation only when it will likely be
    granted, because a refused one leaves a FAILED job record in Slurm (and in its accounting)."""

    def may_start_now(self, partition: str | None, node_count: int, excluded: Collection[str] = ()) -> bool: ...

    def allocating(self, node_count: int) -> AbstractContextManager[None]: ...

    def queueing(self) -> AbstractAsyncContextManager[None]:
        """Around a ``job/submit``: enter once no allocation of this worker is under way (a queued job that
        reached Slurm first would make it refuse them for priority); no allocation starts meanwhile."""
        ...


class SubmitRelay(Protocol):
    """A follower replica's way to the leader's submit (workers/bridge/submit_relay.py)."""

    async def submit(self, data: SubmitInput, attempt: int) -> SubmitResult | None:
        """The leader's answer; None when the request surely did not reach it (submit here then).

        Raises:
            ApplicationError: Retryable: the request may have reached the leader, whose outcome is unknown.
        """
        ...


def job_event_of(job: JobInfo, *, vanished: bool = False, cause: str = "") -> JobEvent:
    """The ``job_event`` signal (and re-check answer) for a job as Slurm reports it."""
    owner = job_owner_from_comment(job.comment)
    submission = owner.submission if owner else None
    if vanished:
        return JobEvent(job_id=job.job_id, state="VANISHED", submission=submission, cause=cause)
    return JobEvent(
        job_id=job.job_id,
        state=job.state,
        reason=job.state_reason,
        nodes=_running_nodes(job),
        submission=submission,
    )


async def cancel_owned_job(slurm: SlurmApi, ref: JobRef, index: JobIndex | None = None) -> bool:
    """Cancel the job only if it is still ``ref``'s: the one cancel of the bridge (lifecycle, GC).

    Whose the job is comes from a read of it, or, without that read, from the job watcher's view when a poll
    and a controller check made after this call began were answered (``JobIndex.confirmed``): ids repeat only
    after a controller restart, which that check sees. Either way the window for a reused id is the same: from
    an answer asked after the cancel began to the cancel itself.

    Returns:
        True when a live job of ``ref`` was cancelled; False when there was nothing of ours to cancel: gone,
        finished, or the id now names another workload's job (reused after a slurmctld crash).
    """
    job: JobInfo | None
    if index is not None and await index.confirmed(time.monotonic(), CONFIRM_SECONDS, ref.job_id):
        telemetry.CANCEL_OWNER_CHECKS.labels("view").inc()
        job = index.job(ref.job_id)
    else:
        telemetry.CANCEL_OWNER_CHECKS.labels("read").inc()
        try:
            job = await slurm.get_job(ref.job_id)
        except SlurmNotFound:
            job = None
    if job is None:
        return False
    if not ref.owns(job.comment):
        logger.warning(
            "not cancelling Slurm job %s: it is no longer %s's (comment %s); the id was reused",
            ref.job_id,
            ref.workflow_id,
            job.comment,
            extra={"job_id": ref.job_id},
        )
        telemetry.FOREIGN_JOB_SPARED.inc()
        return False
    if job.is_finished:
        return False
    if index is not None:
        # Told before the cancel: the watcher may see the job end before the cancel's answer is read.
        index.cancelling(ref)
    await slurm.cancel_job(ref.job_id)
    return True


def _running_nodes(job: JobInfo) -> list[str]:
    return hostlist.expand(job.nodes) if job.is_running else []


def _queued(job_id: int, msg: JobDescMsg) -> JobInfo:
    """A job just queued, as the watcher is told of it before its first sighting."""
    return JobInfo(
        job_id=job_id,
        name=msg.name or "",
        job_state=["PENDING"],
        state_reason="None",  # what Slurm reports before its first evaluation
        partition=msg.partition or "",
        comment=msg.comment or "",
        admin_comment=msg.admin_comment or "",
        flags=list(msg.flags or ()),
    )


def _unavailable(err: SlurmUnavailable) -> ApplicationError:
    delay = dt.timedelta(seconds=err.retry_after) if err.retry_after else None
    return ApplicationError(str(err), type=type(err).__name__, next_retry_delay=delay)


class SlurmActivities:
    """Slurm verbs; holds the process's one Slurm client and job index."""

    def __init__(self, slurm: SlurmApi, index: JobIndex, capacity: Capacity | None = None) -> None:
        self.slurm = slurm
        self.index = index
        self.capacity = capacity
        """None: never ask for an immediate allocation (``slurm.immediate_allocation=false``)."""
        self.relay: SubmitRelay | None = None
        """Set on a follower replica: its submits go through the leader, which alone knows whether nodes are free."""

    @activity.defn(name="submit_placeholder_job")
    async def submit_placeholder_job(self, data: SubmitInput) -> SubmitResult:
        """Submit the workload's EXTERNAL_JOB, or return the live one it already has.

        A rejection (bad partition, no such node configuration...) is a result, not an exception: the
        workflow turns it into a pod Event and condition and waits for the user to fix the pod.
        """
        attempt = activity.info().attempt
        if self.relay is not None:
            relayed = await self.relay.submit(data, attempt)
            if relayed is not None:
                return relayed
        return await self.submit(data, attempt)

    async def submit(self, data: SubmitInput, attempt: int) -> SubmitResult:
        """The activity's work, also run by the leader for a follower's submit (``attempt``: the follower's)."""
        await self.index.wait_synced()
        existing = self.index.live_job_of(data.workflow_id, data.submission)
        if existing is None and attempt > 1:
            # A retry: an earlier attempt may have made a job the index has not seen yet. The watcher's next
            # poll shows it (one cheap ``jobs/state`` and a read of the new job); only without one (a follower
            # replica, or the watcher stuck) is Slurm's whole job list read, which at thousands of jobs is
            # tens of megabytes per retry.
            if await self.index.caught_up(time.monotonic(), CAUGHT_UP_SECONDS):
                existing = self.index.live_job_of(data.workflow_id, data.submission)
            else:
                existing = await self._find_live_job(data.workflow_id, data.submission)
        if existing is not None:
            logger.info("workflow %s already owns job %s", data.workflow_id, existing.job_id)
            telemetry.JOB_SUBMITS.labels("reused").inc()
            return SubmitResult(job_id=existing.job_id, reused=True, nodes=_running_nodes(existing))
        desc: dict[str, Any] = data.spec.to_job_desc()
        desc["comment"] = job_comment_for(data.workflow_id, data.submission)
        if data.nodes:
            return await self._readopt(desc, data.nodes)
        msg = JobDescMsg.model_validate(desc)
        try:
            count = data.spec.min_nodes or 1
            spec = data.spec
            if self.capacity is not None and self.capacity.may_start_now(spec.partition, count, spec.excluded_nodes):
                started = time.monotonic()
                with self.capacity.allocating(count):
                    allocated = await self._allocate(msg)
                    if isinstance(allocated, JobInfo):
                        self.index.expect(allocated)
                if allocated is not None:
                    telemetry.JOB_SUBMITS.labels("allocated").inc()
                    telemetry.JOB_START_SEEN.observe(time.monotonic() - started)
                    if isinstance(allocated, int):
                        return SubmitResult(job_id=allocated)
                    return SubmitResult(job_id=allocated.job_id, nodes=_running_nodes(allocated))
            async with nullcontext() if self.capacity is None else self.capacity.queueing():
                job_id = await self.slurm.submit_job(msg)
                self.index.expect(_queued(job_id, msg))  # before new allocations may start: they see it waiting
        except SlurmUnavailable as err:
            raise _unavailable(err) from err
        except SlurmRejected as err:
            telemetry.JOB_SUBMITS.labels("rejected").inc()
            return SubmitResult(error_number=err.error_number, error_message=_rejection_text(err))
        telemetry.JOB_SUBMITS.labels("queued").inc()
        return SubmitResult(job_id=job_id)

    async def _allocate(self, msg: JobDescMsg) -> JobInfo | int | None:
        """The RUNNING job of an immediate allocation (its id alone if it is already gone again), or None
        when Slurm cannot start it now: queue it then.

        Any other refusal also returns None: ``job/submit`` then gives the authoritative answer (a bad
        partition is refused there too, and "no such configuration now" queues the job as it should).
        """
        try:
            job_id = await self.slurm.allocate_job(msg)
        except (SlurmRejected, SlurmNotFound) as err:
            # NotFound: a slurmrestd without the job/allocate endpoint (HTTP 404). Queue, as for a refusal.
            # Logged every time: a refusal leaves a FAILED record in Slurm, and the estimate should make it rare.
            logger.info("immediate allocation refused (%s); queueing the job", err)
            return None
        try:
            return await self.slurm.get_job(job_id)
        except SlurmNotFound:
            return job_id  # purged already: the workflow's re-check finds it VANISHED

    async def _readopt(self, desc: dict[str, Any], nodes: list[str]) -> SubmitResult:
        """A new placeholder on exactly the nodes where the workload's pods run: Slurm lost the old job (a
        controller crash), so the nodes look free to it. Immediate or not at all: a refusal (the nodes were
        given to another job meanwhile) is a result for the workflow's conflict policy, never a queued job.

        ``required_nodes`` is safe here although the translator never sets it (upstream #43: a required node
        that disappears fails every job naming it): an immediate allocation never waits on it. The job asks
        for the top priority: pods already run there, so no waiting job could use those nodes, yet Slurm
        refuses an immediate allocation that is not at the top of its partition (2013, measured). Setting a
        priority needs an operator; without that right the allocation is asked again at the usual priority.
        """
        desc.update(required_nodes=list(nodes), minimum_nodes=len(nodes), maximum_nodes=len(nodes))
        desc.pop("excluded_nodes", None)
        for priority in (READOPT_PRIORITY, None):
            msg = JobDescMsg.model_validate({**desc, "priority": priority})
            try:
                job_id = await self.slurm.allocate_job(msg)
                break
            except SlurmUnavailable as err:
                raise _unavailable(err) from err
            except (SlurmRejected, SlurmNotFound) as err:
                number = err.error_number if isinstance(err, SlurmRejected) else None
                if number in ALLOCATE_NOT_NOW_NUMBERS:
                    # Busy (given to another job), or behind an equal top priority (another re-adoption queued)
                    return await self._readopt_queued(msg, err)
                if priority is not None:
                    logger.info("re-adoption at the top priority refused (%s); asking at the usual one", err)
                    continue
                telemetry.JOB_SUBMITS.labels("readopt_refused").inc()
                return SubmitResult(error_number=number, error_message=_rejection_text(err))
        telemetry.JOB_SUBMITS.labels("readopted").inc()
        try:
            job: JobInfo | None = await self.slurm.get_job(job_id)
        except SlurmNotFound:
            job = None
        if job is not None:
            self.index.expect(job)
        return SubmitResult(job_id=job_id, nodes=_running_nodes(job) if job is not None else list(nodes))

    async def _readopt_queued(self, msg: JobDescMsg, busy: SlurmError) -> SubmitResult:
        """Slurm cannot give the pods' nodes back at once (it gave them to another job, 2016, or another
        re-adoption waits at the same top priority, 2013): queue the placeholder on exactly those nodes (at the
        top priority when allowed), so Slurm hands them to it, and to no other job, as soon as they are free.
        The pods keep running meanwhile (docs/bridge.md, "When slurmctld crashes")."""
        try:
            job_id = await self.slurm.submit_job(msg)
        except SlurmUnavailable as err:
            raise _unavailable(err) from err
        except SlurmRejected as err:
            telemetry.JOB_SUBMITS.labels("readopt_refused").inc()
            return SubmitResult(error_number=err.error_number, error_message=_rejection_text(err))
        telemetry.JOB_SUBMITS.labels("readopt_queued").inc()
        self.index.expect(_queued(job_id, msg))
        number = busy.error_number if isinstance(busy, SlurmRejected) else None
        return SubmitResult(job_id=job_id, error_number=number, error_message=_rejection_text(busy))

    async def _find_live_job(self, workflow_id: str, submission: int | None) -> JobInfo | None:
        page = await self.slurm.list_jobs()
        live = [j for j in page.jobs if owns_job(j.comment, workflow_id, submission) and not j.is_finished]
        return max(live, key=lambda j: j.job_id) if live else None

    @activity.defn(name="update_pending_job")
    async def update_pending_job(self, data: UpdateJobInput) -> UpdateJobResult:
        """Apply changed annotations to a job that is still pending (Slurm validates each field)."""
        try:
            job = await self.slurm.get_job(data.job.job_id)
        except SlurmNotFound:
            return UpdateJobResult(updated=False, error_message="job is gone")
        if not data.job.owns(job.comment):
            return UpdateJobResult(updated=False, error_message="job is gone (its id names another job now)")
        if not job.is_pending:
            return UpdateJobResult(updated=False, error_message=f"job is {job.state}, no longer pending")
        desc = data.spec.to_job_desc()
        for key in ("flags", "current_working_directory"):
            desc.pop(key, None)
        try:
            await self.slurm.update_job(data.job.job_id, JobDescMsg.model_validate(desc))
        except SlurmUnavailable as err:
            raise _unavailable(err) from err
        except SlurmRejected as err:
            return UpdateJobResult(updated=False, error_number=err.error_number, error_message=_rejection_text(err))
        return UpdateJobResult(updated=True)

    @activity.defn(name="cancel_job")
    async def cancel_job(self, data: JobRef) -> None:
        """Cancel the job if it is still this workflow's submission; gone, finished or reused is success."""
        try:
            await cancel_owned_job(self.slurm, data, self.index)
        except SlurmUnavailable as err:
            raise _unavailable(err) from err

    @activity.defn(name="get_job")
    async def get_job(self, data: JobRef) -> JobEvent:
        """The job's state now, for the slow safety re-check; VANISHED when Slurm no longer knows it.

        From the job watcher's view when a poll answered less than ``RECHECK_VIEW_SECONDS`` ago and lists the
        job: the re-check is a net under the signals, which come from that same poll, and every lifecycle runs
        it every few minutes (10,000 pending jobs were 33 reads a second). A job the view does not list is
        read, so that only Slurm says VANISHED.
        """
        seen = self.index.job(data.job_id) if self.index.seen_within(RECHECK_VIEW_SECONDS) else None
        try:
            job = seen or await self.slurm.get_job(data.job_id)
        except SlurmNotFound:
            return JobEvent(job_id=data.job_id, state="VANISHED")
        except SlurmUnavailable as err:
            raise _unavailable(err) from err
        if not data.owns(job.comment):
            # The id was reused after a slurmctld crash: our job is gone.
            return JobEvent(job_id=data.job_id, state="VANISHED", submission=data.submission)
        return job_event_of(job)

    def all(self) -> list[Any]:
        return [self.submit_placeholder_job, self.update_pending_job, self.cancel_job, self.get_job]


def _rejection_text(err: SlurmError) -> str:
    entries = getattr(err, "errors", ()) or ()
    texts = [f"{e.error} ({e.error_number})" for e in entries if getattr(e, "error", "")]
    return "; ".join(texts) or str(err)
