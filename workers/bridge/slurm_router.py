"""Routes Slurm job changes to the workflows that own the jobs: the single Slurm poll of the bridge.

One :class:`JobWatcher` polls ``jobs?update_time=`` for all workloads (one request per interval, whatever
the number of jobs). For every bridge job (its ``comment`` names the owning workflow) a meaningful change
of state, pending reason or nodes becomes one ``job_event`` signal. The router also serves the submit
activity as its job index: "does this workflow already own a live job?" costs no request.

After a slurmctld restart (the watcher reads its start time every ``controller_check_seconds``) the next full
list is diffed against every job the watcher knows or was told of: each job the restart lost reaches its
workflow as one VANISHED signal with ``cause="controller restart"``, in the same pass (docs/bridge.md,
"When slurmctld crashes").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable

from temporalio.client import Client

from activities.slurm import job_event_of
from slinky import telemetry, wellknown
from slinky.bridge.models.workload import JobEvent, JobRef, owns_job, workflow_id_from_job_comment
from slinky.clients.slurm import JobEvent as WatchEvent
from slinky.clients.slurm import JobEventType, JobInfo, JobWatcher, SlurmApi
from slinky.clients.slurm.watcher import QUIET_JOBS
from workers.bridge.signals import signal_lifecycle

logger = logging.getLogger(__name__)
SIGNAL_CONCURRENCY = 32
RELOOK_SECONDS = 5.0
"""How long a signal that found its lifecycle ended waits for the next poll before it calls the job live."""
CAUSE_RESTART = "controller restart"
CANCELLING_SECONDS = 600.0
"""How long a lifecycle's own cancel keeps its job's end from being signalled (a cancel that failed is retried by
the activity well within it)."""


def _identity(job: JobInfo) -> Hashable:
    # A bridge job's comment names its owning workflow and submission and never changes: a reused id with
    # another owner is news. (Announced jobs carry no submit_time until the next full poll, so it is not
    # compared.)
    if workflow_id_from_job_comment(job.comment) is not None:
        return (job.name, job.comment)
    return (job.submit_time, job.name)


def is_news(event: WatchEvent) -> bool:
    """Whether a watcher event changes anything a workflow decides on.

    A job still pending in the worker's first list after its start is not: its lifecycle knew it pending before
    (only the reason may have changed, which its safety re-check reads). At 5,000 pending workloads a restarted
    worker signalled every one of them, and replaying 5,000 lifecycles at once made 20 s of slow workflow tasks.
    A job that started, ended or vanished meanwhile is still told."""
    job = event.job
    if event.type is JobEventType.VANISHED:
        return not job.is_finished  # a finished job purged after MinJobAge was reported already
    if event.type is JobEventType.ADDED:
        if event.initial and job.is_pending:
            return False
        return not (job.is_pending and job.state_reason in wellknown.QUIET_PENDING_REASONS)
    previous = event.previous
    if previous is None:
        return True
    return (job.state, job.state_reason, job.nodes) != (previous.state, previous.state_reason, previous.nodes)


class SlurmJobRouter:
    """The bridge's job watcher, job index and signal router in one."""

    def __init__(
        self,
        slurm: SlurmApi,
        temporal: Client,
        *,
        interval_seconds: float = 0.25,
        fast_interval_seconds: float | None = None,
        fast_window_seconds: float = 3.0,
        controller_check_seconds: float | None = 1.0,
        request_gc: Callable[[], None] | None = None,
        quiet_jobs: int = QUIET_JOBS,
    ) -> None:
        # State-probe mode: a cheap `jobs/state` poll per interval, a job read only when it starts running,
        # and the full list every 2 s for pending reasons (from quiet_jobs jobs, backing off to 30 s while the
        # lists bring no news of a pending job); polled faster for a few seconds after each submit, while a pod
        # waits for its job to start (docs/benchmarks.md says why).
        self.watcher = JobWatcher(
            slurm,
            interval_seconds=interval_seconds,
            identity=_identity,
            # Only the bridge's own pending jobs need their reasons every 2 s (the pods' conditions show them).
            reasons_wanted=lambda job: workflow_id_from_job_comment(job.comment) is not None,
            # And only they are probed every interval while other users' jobs outnumber them (every job's state
            # every 5 s): 10,000 other jobs made each probe of all of them cost slurmrestd 540 ms.
            tracked=lambda job: workflow_id_from_job_comment(job.comment) is not None,
            state_probe=True,
            fast_interval_seconds=fast_interval_seconds,
            fast_window_seconds=fast_window_seconds,
            controller_check_seconds=controller_check_seconds,
            quiet_jobs=quiet_jobs,
        )
        self.temporal = temporal
        self.request_gc = request_gc
        """Asks the garbage collector for a pass soon (``GarbageCollector.collect_soon``): after a controller restart,
        which may bring back jobs whose owners cancelled them just before the crash (cancels are saved late), and
        when a live job's lifecycle has ended."""
        self._restarts_seen = 0
        self._live: dict[str, JobInfo] = {}
        self._cancelling: OrderedDict[int, tuple[JobRef, float]] = OrderedDict()
        """Jobs their own lifecycle is cancelling, and since when (``time.monotonic``)."""
        self._sem = asyncio.Semaphore(SIGNAL_CONCURRENCY)
        self._tasks: set[asyncio.Task[None]] = set()
        self.signals_sent = 0
        self.watcher.add_callback(self._on_event)

    # JobIndex protocol ------------------------------------------------------------------------------
    async def wait_synced(self) -> None:
        await self.watcher.wait_synced(timeout=15)

    async def caught_up(self, since: float, timeout: float) -> bool:
        return await self.watcher.caught_up(since, timeout)

    async def confirmed(self, since: float, timeout: float, job_id: int | None = None) -> bool:
        return await self.watcher.confirmed(since, timeout, job_id)

    def job(self, job_id: int) -> JobInfo | None:
        return self.watcher.job(job_id)

    def seen_within(self, seconds: float) -> bool:
        return self.watcher.seen_within(seconds)

    def jobs_seen_within(self, seconds: float) -> tuple[list[JobInfo], float] | None:
        """Every job as the watcher last saw it, and when the poll of every job that it comes from was asked
        (``time.monotonic``), if that was answered within ``seconds``; else None (the garbage collector's job list
        then comes from Slurm)."""
        if not self.watcher.seen_within(seconds):
            return None
        return list(self.watcher.jobs.values()), self.watcher.answered_since

    def live_job_of(self, workflow_id: str, submission: int | None = None) -> JobInfo | None:
        """The workflow's live job, if it is that submission (an older one lost in a crash is not)."""
        job = self._live.get(workflow_id)
        return job if job is not None and owns_job(job.comment, workflow_id, submission) else None

    def expect(self, job: JobInfo) -> None:
        """The submit activity announces its job: the index knows it at once, the watcher need not read it."""
        workflow_id = workflow_id_from_job_comment(job.comment)
        if workflow_id is not None:
            self._live[workflow_id] = job
        self.watcher.expect(job)

    def cancelling(self, ref: JobRef) -> None:
        """The lifecycle cancels its own job and goes on without waiting for the end: a ``job_event`` of that end
        would only fail the workflow task that is completing the lifecycle (Temporal's UnhandledCommand: a signal
        arrived meanwhile) and run it again (3,000 deleted pending pods: one failed and one extra task each)."""
        now = time.monotonic()
        self._cancelling[ref.job_id] = (ref, now)
        self._cancelling.move_to_end(ref.job_id)
        while self._cancelling:
            _, (_, since) = next(iter(self._cancelling.items()))
            if now - since <= CANCELLING_SECONDS:
                break
            self._cancelling.popitem(last=False)

    def _cancelled_by_owner(self, event: WatchEvent) -> bool:
        """Whether this event is the end (or an echo) of a job its own lifecycle is cancelling."""
        entry = self._cancelling.get(event.job_id)
        if entry is None or not entry[0].owns(event.job.comment):
            return False
        if event.type is JobEventType.VANISHED or event.job.is_finished:
            del self._cancelling[event.job_id]
        return True

    # Routing ----------------------------------------------------------------------------------------
    def _on_event(self, event: WatchEvent) -> None:
        if self.watcher.controller_restarts != self._restarts_seen and self.request_gc is not None:
            self._restarts_seen = self.watcher.controller_restarts
            self.request_gc()
        workflow_id = workflow_id_from_job_comment(event.job.comment)
        if workflow_id is None:
            return
        vanished = event.type is JobEventType.VANISHED
        # An immediate allocation: the submit timed its start and handed the workflow its nodes.
        started_by_submit = event.announced is not None and event.announced.is_running
        if event.announced_at is not None and event.job.is_running and not vanished and not started_by_submit:
            telemetry.JOB_START_SEEN.observe(event.observed_at - event.announced_at)
        if vanished or event.job.is_finished:
            current = self._live.get(workflow_id, event.job)
            if (current.job_id, current.comment) == (event.job_id, event.job.comment):
                self._live.pop(workflow_id, None)
        else:
            self._live[workflow_id] = event.job
        if started_by_submit and event.type is JobEventType.ADDED and event.job.is_running:
            return  # the submit result told the workflow already: no signal, no workflow task
        if self._cancelled_by_owner(event):
            return
        if is_news(event):
            cause = CAUSE_RESTART if event.controller_restart else ""
            signal = job_event_of(event.job, vanished=vanished, cause=cause)
            task = asyncio.create_task(self._signal(workflow_id, signal))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _signal(self, workflow_id: str, event: JobEvent) -> None:
        if await signal_lifecycle(self.temporal, workflow_id, "job_event", event, self._sem):
            self.signals_sent += 1
        elif event.state in ("PENDING", "RUNNING") and self.request_gc is not None:
            # A live job whose lifecycle has ended: brought back by a restarted slurmctld after its owner
            # cancelled it. The garbage collector's rules decide (cancel once its pods stopped). Most often the
            # lifecycle cancelled it after the poll that reported it live (deleting a namespace of 2,000 pods:
            # 10 such signals), so look again after the next poll first.
            # The job is the bridge's: a probe of the bridge's jobs will do (not one of every job in Slurm).
            await self.watcher.caught_up(time.monotonic(), RELOOK_SECONDS, complete=False)
            now = self.watcher.job(event.job_id)
            if now is None or now.is_finished or workflow_id_from_job_comment(now.comment) != workflow_id:
                return
            logger.warning("Slurm job %s is live but its lifecycle %s has ended", event.job_id, workflow_id)
            self.request_gc()

    async def run(self) -> None:
        await self.watcher.run()
