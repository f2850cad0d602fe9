"""Garbage collection: the slow reconcile that catches what no lifecycle is left to handle.

Every ``interval_seconds`` (default 60 s, or five times the last pass's wall time when that is longer: see
``PASS_SPACING``; one job list and one labelled-pod list per period, never per pod):

* a live bridge job whose workflow is not running and whose pods are all gone is cancelled;
* a pod labelled with a job id whose job is gone (matched by the job ``comment`` that names the owning
  workflow, not by id alone: ids are reused after a slurmctld crash) and whose workflow is not running
  is deleted and its finalizer removed.

The job list is the leader's job watcher's view when a poll answered within ``VIEW_SECONDS`` (it lists every job
Slurm lists, with its comments): a full ``GET jobs`` at 10,000 pending jobs is 33 MB, seconds of slurmrestd's CPU
and its memory's growth. Otherwise (the watcher stuck or behind) Slurm's own list.

Every cancel goes through :func:`activities.slurm.cancel_owned_job`, as the lifecycle's do: the job is read
again and cancelled only if its ``comment`` still names the same workflow and submission.

A running workflow always wins: GC never touches a workload whose lifecycle is still in charge.

A pass also runs soon (``collect_soon``, 2 s later) after a slurmctld restart, and when the Slurm job router
finds a live job whose lifecycle has ended: slurmctld brings back a job that its owner cancelled moments
before a crash (cancels are saved late, slurm.md §9), and nobody else would cancel it before the next
periodic pass.

The other way round, a lifecycle may wait on a job Slurm no longer has: slurmctld lost it in a crash and the
worker restarted too, so no watcher saw it go (the chaos suite, two slurmctld kills and two worker kills within
20 s: 30 lifecycles waited 300 s, for their safety re-check). Each pass compares the running lifecycles' job ids
(``SlinkySlurmJobId``, in the same visibility listing) with the job list; a job missing from a list asked after it
was first seen missing is no proof by itself (the list may lag), so the lifecycle is sent ``recheck``, and its own
re-check reads Slurm and decides. While a few such lifecycles wait, the next pass comes after
``MISSING_CONFIRM_SECONDS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from activities.slurm import cancel_owned_job
from slinky import telemetry, wellknown
from slinky.bridge import pods
from slinky.bridge.models.jobspec import pods_from_admin_comment
from slinky.bridge.models.workload import JobRef, Phase, job_owner_from_comment, workload_workflow_id
from slinky.clients.errors import KubeError, KubeNotFound, SlurmError
from slinky.clients.kube import KubeClient, pod_path
from slinky.clients.slurm import JobInfo, SlurmApi
from slinky.clients.temporal_rpc import WorkflowService
from workers.bridge.signals import signal_lifecycle

logger = logging.getLogger(__name__)
VIEW_SECONDS = 30.0
"""How fresh the job watcher's view must be to stand in for a job list."""
FIRST_PASS_SECONDS = 10.0
"""The first pass of a new leader, this long after it starts (its watcher has synced by then)."""
MISSING_CONFIRM_SECONDS = 10.0
"""After a pass that found lifecycles whose jobs Slurm did not list, the next pass comes this soon."""
MISSING_CONFIRM_MAX = 100
"""More such lifecycles than this at once means the list lags a wave of submits: confirmed at the usual interval."""
WAITING_PHASES = frozenset({Phase.PENDING.value, Phase.BINDING.value, Phase.RUNNING.value})
PASS_SPACING = 5.0
"""The next regular pass waits at least this many times the last pass's wall time: a pass lists every running
lifecycle and every labelled pod, and at 10,000 open workloads one took 10-30 s on a busy machine (its metric,
``slinky_bridge_gc_pass_seconds``), so a pass every 60 s kept the API server, Temporal and the worker busy. The
passes that confirm a lost job (``MISSING_CONFIRM_SECONDS``) and ``collect_soon`` are not spaced, and no regular
pass waits more than ten intervals."""


class GarbageCollector:
    def __init__(
        self,
        kube: KubeClient,
        slurm: SlurmApi,
        temporal: Client,
        *,
        interval_seconds: float = 60.0,
        job_view: Callable[[float], tuple[Sequence[JobInfo], float] | None] | None = None,
    ) -> None:
        self.kube = kube
        self.slurm = slurm
        self.temporal = temporal
        self.job_view = job_view
        """Every job as the job watcher last saw it, and when that poll was asked, if it answered within the given
        seconds; else None."""
        self.lists = 0
        """Passes that listed Slurm's jobs themselves (the view was missing or stale)."""
        self.interval_seconds = interval_seconds
        self.soon_seconds = 2.0
        self._soon = asyncio.Event()
        self.jobs_cancelled = 0
        self.pods_deleted = 0
        self._running: set[str] = set()
        """The running lifecycles listed at the start of the pass."""
        self._missing: dict[str, tuple[int, float]] = {}
        """Lifecycles whose job the last job list lacked: the job id, and when that was first seen."""
        self.rechecks_sent = 0
        self._next_wait = min(interval_seconds, FIRST_PASS_SECONDS)
        """Until the next pass: the first comes soon after a (new) leader starts, which may be right after a crash."""
        self._signals = asyncio.Semaphore(8)

    async def _running_lifecycles(self) -> tuple[set[str], dict[str, int]]:
        """Every running lifecycle's id, from one visibility query per pass (pages of 1,000): a pass at 10,000
        pending workloads described each job's workflow, 10,000 RPCs a minute to Temporal. Visibility may lag a
        start by a moment, so an id missing here is described before anything is done (``_workflow_running``).
        An empty set when the query fails: every workflow is then described, as before.

        Also the job id (``SlinkySlurmJobId``) of each one that has a job (Pending, Binding, Running). Read from
        the service's answer as JSON (``WorkflowService``): the SDK's client decoded every search attribute of
        every row twice, typed and untyped, 1.8 s of the worker's CPU per pass at 10,000 (py-spy)."""
        running: set[str] = set()
        waiting: dict[str, int] = {}
        service = WorkflowService(self.temporal.service_client, self.temporal.namespace)
        try:
            for row in await service.list("WorkflowType = 'WorkloadWorkflow' AND ExecutionStatus = 'Running'"):
                running.add(row.id)
                job = row.value("SlinkySlurmJobId")
                if row.attribute("SlinkyPhase") in WAITING_PHASES and isinstance(job, int):
                    waiting[row.id] = job
        except RPCError as err:
            logger.warning("listing running lifecycles failed (%s); describing each instead", err)
            return set(), {}
        return running, waiting

    async def _workflow_running(self, workflow_id: str) -> bool:
        if workflow_id in self._running:
            return True
        try:
            desc = await self.temporal.get_workflow_handle(workflow_id).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return desc.status == WorkflowExecutionStatus.RUNNING

    async def _pod_exists(self, key: str) -> bool:
        namespace, name = key.split("/", 1)
        try:
            await self.kube.get(pod_path(namespace, name))
        except KubeNotFound:
            return False
        return True

    async def _jobs(self) -> tuple[Sequence[JobInfo], float]:
        """Every job, and when the list was asked for (``time.monotonic``): the watcher's view, or Slurm's list."""
        view = self.job_view(VIEW_SECONDS) if self.job_view is not None else None
        if view is not None:
            return view
        self.lists += 1
        asked = time.monotonic()
        return (await self.slurm.list_jobs()).jobs, asked

    async def _recheck_lost(self, waiting: dict[str, int], jobs: Sequence[JobInfo], asked: float) -> None:
        """Send ``recheck`` to each lifecycle of ``waiting`` (workflow id -> job id) whose job two job lists lacked,
        the second asked (``asked``) after the first was seen: the lifecycle reads Slurm itself, so a wrong guess
        costs one read."""
        owners = {job.job_id: job_owner_from_comment(job.comment) for job in jobs}
        now = time.monotonic()
        missing: dict[str, tuple[int, float]] = {}
        due = []
        for workflow_id, job_id in waiting.items():
            owner = owners.get(job_id)
            if owner is not None and owner.workflow_id == workflow_id:
                continue
            first = self._missing.get(workflow_id)
            if first is not None and first[0] == job_id and asked > first[1]:
                due.append(workflow_id)
            else:
                missing[workflow_id] = first if first is not None and first[0] == job_id else (job_id, now)
        self._missing = missing
        for workflow_id in due:
            logger.warning(
                "lifecycle %s waits on Slurm job %s, which Slurm no longer lists: asking it to re-check",
                workflow_id,
                waiting[workflow_id],
            )
            if await signal_lifecycle(self.temporal, workflow_id, "recheck", None, self._signals):
                self.rechecks_sent += 1
                telemetry.GC_ACTIONS.labels("recheck").inc()
        self._next_wait = MISSING_CONFIRM_SECONDS if 0 < len(missing) <= MISSING_CONFIRM_MAX else self.interval_seconds

    async def run_once(self) -> None:
        self._running, waiting = await self._running_lifecycles()
        # After the listing: a lifecycle listed with a job had submitted it before a list asked from now on.
        jobs, asked = await self._jobs()
        listing = await self.kube.get("/api/v1/pods", {"labelSelector": wellknown.LABEL_SLURM_JOB_ID})
        # A lifecycle whose pods are all deleting or gone is cleaning up: it cancelled its job itself (its phase
        # is published again only when it ends). 10,000 deleted at once sent 400 needless re-checks before this.
        # Publishing a CleaningUp phase would not close this gap: a search attribute leaves with the workflow
        # task's completion, after the cancel (a local activity in the same task) has already emptied Slurm.
        with_live_pods = _lifecycles_of_live_pods(listing["items"])
        await self._recheck_lost({w: j for w, j in waiting.items() if w in with_live_pods}, jobs, asked)
        live_by_workflow: dict[str, JobRef] = {}
        for job in jobs:
            owner = job_owner_from_comment(job.comment)
            if owner is None or job.is_finished:
                continue
            workflow_id = owner.workflow_id
            ref = live_by_workflow[workflow_id] = JobRef(
                job_id=job.job_id, workflow_id=workflow_id, submission=owner.submission
            )
            if await self._workflow_running(workflow_id):
                continue
            keys = pods_from_admin_comment(job.admin_comment) or []
            if not any([await self._pod_exists(p) for p in keys]) and await cancel_owned_job(self.slurm, ref):
                # Said only once done: the job list is as old as the pass, and a job its lifecycle cancelled
                # meanwhile is found gone by the owner check (at 10,000 jobs a pass takes minutes).
                logger.info(
                    "cancelled orphan Slurm job %s (pods %s gone, workflow %s closed)", job.job_id, keys, workflow_id
                )
                self.jobs_cancelled += 1
                telemetry.GC_ACTIONS.labels("cancel_job").inc()
        for pod in listing["items"]:
            await self._collect_pod(pod, live_by_workflow)

    async def _collect_pod(self, pod: dict[str, Any], live_by_workflow: dict[str, JobRef]) -> None:
        """A labelled pod whose lifecycle no longer runs (terminated by an operator, lost)."""
        meta = pod["metadata"]
        workflow_id = _lifecycle_of(pod)
        if await self._workflow_running(workflow_id):
            return
        path = pod_path(meta["namespace"], meta["name"])
        ref = live_by_workflow.get(workflow_id)
        stopped = pods.is_gone(pod) or pods.is_deleting(pod)
        if ref is not None and not stopped:
            # The listing is as old as the pass (minutes at thousands of pods): its lifecycle may have ended
            # since because the pod went. Look again before calling it a pod that runs without one.
            try:
                pod = await self.kube.get(path)
            except KubeNotFound:
                return
            if pod["metadata"]["uid"] != meta["uid"]:
                return
            meta = pod["metadata"]
            stopped = pods.is_gone(pod) or pods.is_deleting(pod)
        if ref is not None and not stopped:
            logger.warning(
                "pod %s/%s runs with Slurm job %s but no lifecycle; leaving both",
                meta["namespace"],
                meta["name"],
                ref.job_id,
            )
            return
        try:
            if ref is not None:
                # The pod stopped (or is being deleted) and nobody will cancel its job: do it now.
                logger.info("cancelling Slurm job %s of stopped pod %s/%s", ref.job_id, meta["namespace"], meta["name"])
                if await cancel_owned_job(self.slurm, ref):
                    self.jobs_cancelled += 1
                    telemetry.GC_ACTIONS.labels("cancel_job").inc()
            elif not meta.get("deletionTimestamp") and not pods.is_terminal(pod):
                logger.info(
                    "deleting pod %s/%s: its Slurm job is gone and no lifecycle runs", meta["namespace"], meta["name"]
                )
                await self.kube.delete(path, uid=meta["uid"])
                self.pods_deleted += 1
                telemetry.GC_ACTIONS.labels("delete_pod").inc()
            if wellknown.FINALIZER_SCHEDULER in (meta.get("finalizers") or []):
                await self.kube.remove_finalizer(path, meta["uid"], wellknown.FINALIZER_SCHEDULER)
        except KubeNotFound:
            return

    def collect_soon(self) -> None:
        """Run a pass in ``soon_seconds`` instead of at the next interval (several calls: one pass)."""
        self._soon.set()

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._soon.wait(), self._next_wait)
                await asyncio.sleep(self.soon_seconds)  # let the wave of events that called it settle
            self._soon.clear()
            started = time.monotonic()
            try:
                await self.run_once()
            except (SlurmError, KubeError, RPCError) as err:
                logger.warning("garbage collection pass failed: %s", err)
            took = time.monotonic() - started
            telemetry.GC_PASS_SECONDS.observe(took)
            if self._next_wait >= self.interval_seconds:
                self._next_wait = min(max(self.interval_seconds, PASS_SPACING * took), 10 * self.interval_seconds)


def _lifecycle_of(pod: dict[str, Any]) -> str:
    """The lifecycle that labelled the pod: written on it, else the single pod's own."""
    meta = pod["metadata"]
    annotations = meta.get("annotations") or {}
    return str(
        annotations.get(wellknown.ANNOTATION_WORKFLOW_ID) or workload_workflow_id(meta["namespace"], meta["uid"])
    )


def _lifecycles_of_live_pods(items: list[dict[str, Any]]) -> set[str]:
    """The lifecycles with at least one labelled pod that is neither deleting nor finished."""
    return {
        _lifecycle_of(pod) for pod in items if not (pods.is_deleting(pod) or pods.is_terminal(pod) or pods.is_gone(pod))
    }
