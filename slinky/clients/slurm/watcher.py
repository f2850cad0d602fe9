"""One incremental job poll for every subscriber.

slurmrestd has no watch API. :class:`JobWatcher` polls ``GET jobs?update_time=T`` once per interval
(0.25 s by default) whatever the number of jobs or subscribers, and turns the answers into events:

* ``ADDED``: a job ID seen for the first time (or again after it vanished or was reused);
* ``CHANGED``: a job's state, reason, nodes, comments, limits or times changed;
* ``FINISHED``: a job reached a terminal state (sent after ADDED when first seen finished);
* ``VANISHED``: a job is no longer listed (purged after ``MinJobAge``, or lost in a slurmctld crash).

When anything changed, slurmrestd answers with the **full** job list, not a delta, so every non-empty
answer is a snapshot to diff against. When nothing changed it answers ``last_update=0`` and the client
keeps the previous ``update_time``. ``last_update`` has one-second resolution and slurmctld answers
"no change" when it equals ``update_time``, so a change later in the same second would be missed; the
watcher therefore asks for changes since ``last_update - 1``, paying with full lists during the second
after a change. After any error the next poll asks for the full list again (a resync),
so an outage of slurmctld ends with one diff that reports whatever changed meanwhile.

Job-ID reuse: a slurmctld killed within a few seconds of submissions loses them, and new submissions get
the same IDs again. A job whose identity (by default its ``submit_time`` and ``name``) differs from the
cached job with the same ID is reported as ``VANISHED`` (the old one) then ``ADDED`` (the new one). The
``admin_comment`` is not in the default identity because the bridge legitimately rewrites it on pending
jobs; pass ``identity=`` to add a key the caller owns, e.g. a UID stored in the ``admin_comment``.

A quiet cluster with many jobs (``QUIET_JOBS``): the probe of every job waits for slurmctld's job counters in
``GET diag`` to move, at most ``QUIET_MAX_SECONDS`` (docs/slurm-client.md).

Controller restarts: with ``controller_check_seconds`` set, the watcher also reads ``GET diag`` that often
and takes a change of ``req_time_start`` (when slurmctld's statistics began: its start) as a restart. The next
poll is then a full list, and its diff is the reconcile of every job at once: jobs the restarted controller
lost are ``VANISHED`` with ``controller_restart`` set, and so are jobs announced with
:meth:`JobWatcher.expect` before that list was asked for and missing from it. A statistics reset
(``sdiag --reset``) looks the same; the reconcile then finds nothing to report.

The restart is looked for at once, not at the next ``controller_check_seconds``, whenever there is a hint:
a failed poll (then ``GET ping``, which slurmrestd answers in milliseconds while slurmctld is down, is asked
every interval until a controller responds, instead of a job poll that waits 10 s for a dead controller); a
poll answered after over a second (slurmrestd waited for a controller that came back: that answer is not
diffed, lest the jobs a restart lost look merely gone); a job that went back to
PENDING or came back from a finished state (read to compare its identity); and a job id announced by a
submitter that the watcher knows as another job (ids only repeat after a controller lost its state). Nodes
of jobs a restarted controller lost look free to it until their owners re-adopt them, so these seconds count.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import enum
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from slinky import hostlist, wellknown
from slinky.clients.errors import SlurmError, SlurmNotFound
from slinky.clients.slurm.client import SlurmApi
from slinky.clients.slurm.models import JOB_COUNTERS, Diag, JobInfo

__all__ = ["JobEvent", "JobEventType", "JobWatcher", "Subscription", "default_identity"]

logger = logging.getLogger(__name__)
T = TypeVar("T")
HINT_SECONDS = 60.0
"""How long an announced job may stay unseen before the watcher forgets the announcement."""


class JobEventType(enum.StrEnum):
    """What happened to a job."""

    ADDED = "ADDED"
    CHANGED = "CHANGED"
    FINISHED = "FINISHED"
    VANISHED = "VANISHED"


@dataclass(frozen=True)
class JobEvent:
    """One job event.

    Attributes:
        type: What happened.
        job_id: The Slurm job ID.
        job: The job as now seen; for VANISHED, the last job seen.
        previous: The job as seen before (CHANGED, FINISHED), or None.
        observed_at: ``time.monotonic()`` when the poll that saw it returned.
        announced_at: ``time.monotonic()`` of :meth:`JobWatcher.expect` for a job this process submitted,
            on its events up to and including the first one that is no longer PENDING; else None.
        announced: The job as :meth:`JobWatcher.expect` announced it, on the same events (RUNNING for an
            immediate allocation, whose submitter knows its nodes already); else None.
    """

    type: JobEventType
    job_id: int
    job: JobInfo
    previous: JobInfo | None = None
    observed_at: float = 0.0
    announced_at: float | None = None
    announced: JobInfo | None = None
    controller_restart: bool = False
    """Seen by the first full list after a detected slurmctld restart (a VANISHED job was lost by it)."""
    initial: bool = False
    """From the watcher's first list, when it knew no job yet (this process just started): an ADDED job may be
    old news to whoever owns it."""


FULL_POLL_SPACING = 10.0
"""Between two full lists, at least this many times what the last one took."""

POLL_SPACING = 2.0
"""Between two regular polls (the probe, or the list without state-probe mode), at least this many times what the
last one took: the poll then takes at most a third of slurmrestd's time and of the watcher's, at any number of
jobs. With 2,000 pending jobs the fast interval (0.05 s) had the worker's main thread polling back to back, most
of its CPU parsing ``jobs/state``. Four times cost the freed-node start 3.0 s at 2,000 jobs, twice 1.8 s, against
0.95 s polling back to back (docs/benchmarks.md, "Many open workloads")."""

CONFIRM_MAX_INTERVAL = 0.3
"""``confirmed`` says no at once when polls are further apart than this (thousands of jobs make them slow, see
``POLL_SPACING``): a read of the one job is then quicker than waiting for the next poll."""

COMPLETE_PROBE_SECONDS = 5.0
"""With ``tracked``: a probe of every job (new jobs of others, the state of the untracked ones) at least this often;
the probes between ask only for the tracked jobs."""

COMPLETE_SPACING = 10.0
"""Between two probes of every job, at least this many times what the last one took."""

MAX_PROBE_IDS = 2000
"""More tracked jobs than this are probed with every job (2,000 ids make a 26 KB URL, answered in 44 ms)."""

READS_BEFORE_LIST = 64
LIST_SHARE = 0.2
"""A probe that finds more new jobs than ``READS_BEFORE_LIST``, and than ``LIST_SHARE`` of every job it lists, reads
the full job list instead of each new job. Measured on 26.05 with 4,500 jobs: a read costs slurmrestd 1.15 ms and the
watcher 2.3 ms (the HTTP request); the list costs 0.6 ms and 0.06 ms per job listed. So one list is the cheaper from
about a fifth, and 2,000 other users' jobs submitted at once no longer make 2,000 reads (7 s of CPU)."""

QUIET_JOBS = 2000
"""The default of ``quiet_jobs`` (the bridge's ``SLINKY_SLURM__WATCH_QUIET_JOBS``): from this many jobs on (the last
probe of every job), a probe of every job is made only when slurmctld's job counters moved (``GET diag``: submitted,
started, completed, cancelled, failed) or ``QUIET_MAX_SECONDS`` passed. With 10,000 pending jobs and nothing
happening, the probes (1.5 a second, 0.8 MB each) kept the worker's event loop and slurmrestd busy: a fifth of a core
each, measured."""

REASONS_BACKOFF_MAX = 4
"""From ``quiet_jobs`` jobs on, each full list that brought no news of a pending job (no reason changed, no pending
job came or went, no job announced since the one before) doubles the wait before the next one that pending reasons
ask for, up to ``2 ** REASONS_BACKOFF_MAX`` times ``full_poll_seconds`` and never beyond ``idle_full_poll_seconds``.
With 3,000 pending jobs and nothing happening, a full list (25 MB, about 1.8 s of slurmrestd's CPU) every 13 s kept
slurmrestd at 160 ms of CPU a second, measured; the jobs' states are probed as before, so only a pending reason can
be up to ``idle_full_poll_seconds`` old then."""

QUIET_MAX_SECONDS = 2.0
"""A probe of every job at least this often however quiet the counters: changes no counter follows are seen within
this. slurmctld 26.05 does not count a cancel through slurmrestd (6,000 cancelled jobs left ``jobs_canceled`` at 0,
measured) nor an external job's ``TIMEOUT``, nor a job held, released or requeued: a job's end is seen within this."""

SLOW_POLL_SECONDS = 1.0
"""A poll slower than this hints at a controller restart (slurmrestd retries a dead controller for 10 s)."""


def _went_back(old: JobInfo, state: list[str]) -> bool:
    """A state change no job makes by itself (RUNNING back to PENDING, a finished job live again): after a
    slurmctld crash it is an earlier saved state or another job with the same id, so the job is read."""
    pending = "PENDING" in state
    live = pending or "RUNNING" in state
    return (old.is_running and pending) or (old.is_finished and live)


def _shapes_views(job: JobInfo) -> bool:
    """Whether ``has_waiting_jobs`` or ``running_nodes`` depend on this job: running, or pending for nodes. The
    probe keeps asking for it by id, whoever owns it: a job of another user that ends or stops waiting frees
    nodes for the bridge at once, not at the next probe of every job (measured: 5 s later, the bridge queued the
    pods it could have started)."""
    return job.is_running or (job.is_pending and job.state_reason in wellknown.WAITING_REASONS)


def default_identity(job: JobInfo) -> Hashable:
    """What must stay equal for two sightings of a job ID to be the same job."""
    return (job.submit_time, job.name)


def _fingerprint(job: JobInfo) -> tuple[Any, ...]:
    # Fields whose change is news for a subscriber; last_sched_evaluation and priority move on every
    # scheduler pass and would flood subscribers with CHANGED events.
    return (
        tuple(job.job_state),
        job.state_reason,
        job.nodes,
        job.admin_comment,
        job.comment,
        job.partition,
        job.time_limit,
        job.node_count,
        job.start_time,
        job.end_time,
        tuple(job.flags),
    )


_Callback = Callable[[JobEvent], Awaitable[None] | None]
_END = object()


class Subscription:
    """An async iterator over job events; close it (or leave ``async with``) to unsubscribe."""

    def __init__(self, watcher: JobWatcher) -> None:
        self._watcher = watcher
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self.closed = False

    def _put(self, event: JobEvent) -> None:
        if not self.closed:
            self._queue.put_nowait(event)

    def close(self) -> None:
        """Unsubscribe; a pending ``__anext__`` ends the iteration."""
        if not self.closed:
            self.closed = True
            self._watcher._subscriptions.discard(self)
            self._queue.put_nowait(_END)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> JobEvent:
        item = await self._queue.get()
        if item is _END:
            raise StopAsyncIteration
        assert isinstance(item, JobEvent)
        return item

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class JobWatcher:
    """Polls ``jobs?update_time=`` once per interval and fans events out to every subscriber.

    Args:
        client: A :class:`~slinky.clients.slurm.SlurmClient` or the fake.
        interval_seconds: Time between polls.
        max_backoff_seconds: Longest wait between polls after repeated errors.
        identity: Key that tells a reused job ID from the same job; see the module docstring.

    Example::

        watcher = JobWatcher(client)
        async with watcher.running(), watcher.subscribe() as events:
            async for event in events:
                ...
    """

    def __init__(
        self,
        client: SlurmApi,
        *,
        interval_seconds: float = 0.25,
        max_backoff_seconds: float = 5.0,
        identity: Callable[[JobInfo], Hashable] = default_identity,
        reasons_wanted: Callable[[JobInfo], bool] | None = None,
        tracked: Callable[[JobInfo], bool] | None = None,
        complete_probe_seconds: float = COMPLETE_PROBE_SECONDS,
        state_probe: bool = False,
        full_poll_seconds: float = 2.0,
        idle_full_poll_seconds: float = 30.0,
        fast_interval_seconds: float | None = None,
        fast_window_seconds: float = 3.0,
        controller_check_seconds: float | None = None,
        quiet_jobs: int = QUIET_JOBS,
    ) -> None:
        self._client = client
        self.controller_check_seconds = controller_check_seconds
        self.quiet_jobs = quiet_jobs
        """From this many jobs, probes of every job wait for slurmctld's job counters (``QUIET_JOBS``)."""
        self._controller_started: int | None = None
        self._controller_checked = -float("inf")
        self._check_controller_now = False
        self._restart_seen = False
        """A restart was detected and the full list that reconciles it has not been diffed yet."""
        self._wake = asyncio.Event()
        """Set to cut the wait before the next poll short (a restart hint arrived)."""
        self.controller_restarts = 0
        self.interval_seconds = interval_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self._identity = identity
        self._reasons_wanted = reasons_wanted
        """State-probe mode: the pending jobs whose reasons make the full list come every ``full_poll_seconds``
        (None: every pending job). Others' reasons wait for the idle full list: on a shared cluster, thousands
        of users' pending jobs then do not make the watcher read the whole list every few seconds."""
        self._tracked = tracked
        """State-probe mode: the jobs the subscribers act on (with the announced ones). While other jobs outnumber
        them (and the running or node-waiting jobs, which ``has_waiting_jobs`` and ``running_nodes`` follow), the
        probe asks for these by id, and for every job only every ``complete_probe_seconds``: on a shared cluster
        with 10,000 held jobs in Slurm, a probe of every job cost slurmrestd 540 ms of work."""
        self.complete_probe_seconds = complete_probe_seconds
        self._tracked_jobs: set[int] = set()
        """The ids in ``_jobs`` the probe asks for while filtering: the jobs ``tracked`` accepts, and the others
        the watcher's own views depend on (:func:`_shapes_views`)."""
        self._complete_wanted = False
        """The next probe asks for every job (``caught_up`` waits for a complete view)."""
        self._last_complete = 0.0
        self._last_complete_seconds = 0.0
        self._last_complete_jobs = 0
        """Jobs listed by the last probe of every job (or full list)."""
        self._quiet_mark: tuple[int | None, ...] | None = None
        """slurmctld's job counters read before the last probe of every job was asked (``QUIET_JOBS``)."""
        self._quiet_seen: tuple[int | None, ...] | None = None
        self._probe_wanted = False
        """Someone waits in ``confirmed``: the next probe is made whatever the counters say."""
        self.tracked_since = -float("inf")
        """When the last poll whose answer covered every tracked job (and was delivered) was asked."""
        self.state_probe = state_probe
        self.full_poll_seconds = full_poll_seconds
        self.idle_full_poll_seconds = idle_full_poll_seconds
        self.fast_interval_seconds = fast_interval_seconds
        self.fast_window_seconds = fast_window_seconds
        self._reasons_quiet = 0
        """Full lists in a row that brought no news of a pending job (``REASONS_BACKOFF_MAX``)."""
        self._announced_since_list = False
        self._lost: list[JobInfo] = []
        """Announced jobs a reused id proved lost before any poll saw them; reported at the next delivery."""
        self._announced: dict[int, tuple[JobInfo, float]] = {}
        """Jobs announced by expect(): what was submitted and when; kept until seen no longer pending."""
        self._young: collections.deque[tuple[float, int]] = collections.deque()
        """(when, job id) of the announcements of the last ``fast_window_seconds``, oldest first: the fast interval
        looks at these only. Thousands of announced jobs may stay pending for minutes, and scanning them all at each
        poll and each cancel's ``confirmed`` took 6 % of the worker while 3,000 workloads were deleted (py-spy)."""
        self._version = 0
        """Bumped whenever the jobs or the announcements change: the derived views below are cached by it."""
        self._view: tuple[int, bool, frozenset[str]] | None = None
        self._last_full = 0.0
        self._last_full_seconds = 0.0
        self._last_poll_seconds = 0.0
        """What the last regular poll took (see ``POLL_SPACING``)."""
        self.answered_since = -float("inf")
        """When the last poll whose answer was used and delivered was asked (``time.monotonic``): every job made
        before then is in the subscribers' views."""
        self.details_read = 0
        self.requests: dict[str, int] = {"full_list": 0, "probe_all": 0, "probe_tracked": 0, "probe_skipped": 0}
        """Poll requests by kind (``details_read`` counts the job reads)."""
        self._jobs: dict[int, JobInfo] = {}
        self._last_update: int | None = None
        self._need_resync = True
        self._synced_once = False
        self._subscriptions: set[Subscription] = set()
        self._callbacks: list[_Callback] = []
        self._task: asyncio.Task[None] | None = None
        self._synced = asyncio.Event()
        self.polls = 0
        self.errors = 0
        self.consecutive_errors = 0

    # --- subscribers ------------------------------------------------------------------------------------

    def subscribe(self) -> Subscription:
        """A new subscription that sees every event from now on."""
        subscription = Subscription(self)
        self._subscriptions.add(subscription)
        return subscription

    def add_callback(self, callback: _Callback) -> None:
        """Call ``callback(event)`` (sync or async) for every event, in order, from the poll loop."""
        self._callbacks.append(callback)

    def remove_callback(self, callback: _Callback) -> None:
        """Stop calling ``callback``."""
        self._callbacks.remove(callback)

    @property
    def jobs(self) -> dict[int, JobInfo]:
        """The jobs as last seen, by ID (a copy)."""
        return dict(self._jobs)

    @property
    def last_update(self) -> int | None:
        """The ``update_time`` the next poll sends."""
        return self._last_update

    def has_waiting_jobs(self) -> bool:
        """Whether a job, as last seen or just announced, is pending only for nodes (``WAITING_REASONS``)."""
        return self._derived()[1]

    def running_nodes(self) -> frozenset[str]:
        """The nodes of every job seen (or announced) RUNNING: busy until the watcher sees the job end."""
        return self._derived()[2]

    def _derived(self) -> tuple[int, bool, frozenset[str]]:
        """Both views, computed once per change (the submit asks per workload; jobs change per poll)."""
        if self._view is None or self._view[0] != self._version:
            jobs = [*self._jobs.values(), *(job for job, _ in self._announced.values())]
            waiting = any(job.is_pending and job.state_reason in wellknown.WAITING_REASONS for job in jobs)
            busy = frozenset(node for job in jobs if job.is_running for node in hostlist.expand(job.nodes))
            self._view = (self._version, waiting, busy)
        return self._view

    def expect(self, job: JobInfo) -> None:
        """Announce a job this process just submitted: in state-probe mode its first sighting needs no extra
        read (its name, comments and limits are known; the probe supplies its state), the poll runs at
        ``fast_interval_seconds`` while it is young and pending, and its events carry ``announced_at``.

        A new job with the id of a job the watcher knows as another one proves that slurmctld lost state:
        the restart is looked for at once."""
        known = self._jobs.get(job.job_id)
        if known is not None and self._identity(known) != self._identity(job) and not known.is_finished:
            logger.warning("Slurm handed out job id %s again: looking for a controller restart now", job.job_id)
            self.suspect_restart()
        prior = self._announced.get(job.job_id)
        if known is None and prior is not None and self._identity(prior[0]) != self._identity(job):
            # An announced job no poll has seen yet, and now another job with its id: the controller lost the
            # first one (ids repeat only after a restart). It is reported VANISHED at the next delivery, or its
            # owner would wait for it forever (seen in make test: slurmctld killed 3 s after 4 submits).
            logger.warning("Slurm handed out job id %s again before a poll saw the first: it was lost", job.job_id)
            self._lost.append(prior[0])
            self.suspect_restart()
        now = time.monotonic()
        self._announced[job.job_id] = (job, now)
        self._announced_since_list = True
        if self.fast_interval_seconds is not None:  # only current_interval trims it
            self._young.append((now, job.job_id))
        view = self._view
        self._version += 1
        if view is not None and view[0] == self._version - 1:
            # Fold the one job into the views instead of recomputing them over every job: the submit asks them
            # for every workload, and with 5,000 pending jobs the recomputation per submit was 8 % of the
            # worker's CPU (py-spy). A job announced again keeps its old contribution until the next poll.
            waiting = view[1] or (job.is_pending and job.state_reason in wellknown.WAITING_REASONS)
            busy = view[2] | frozenset(hostlist.expand(job.nodes)) if job.is_running else view[2]
            self._view = (self._version, waiting, busy)

    def suspect_restart(self) -> None:
        """A hint that slurmctld restarted: check its start time and poll the full list now."""
        if self.controller_check_seconds is not None:
            self._check_controller_now = True
            self._need_resync = True
            self._wake.set()

    def current_interval(self) -> float:
        """The wait before the next poll: ``fast_interval_seconds`` while a job announced by :meth:`expect`
        less than ``fast_window_seconds`` ago is still pending (the moment its start matters most: a pod
        waits to be bound), else ``interval_seconds``; never less than ``POLL_SPACING`` times the last poll."""
        floor = POLL_SPACING * self._last_poll_seconds
        if self.fast_interval_seconds is not None:
            now = time.monotonic()
            young = self._young
            while young and now - young[0][0] > self.fast_window_seconds:
                young.popleft()
            for since, job_id in young:
                announced = self._announced.get(job_id)
                if announced is not None and announced[1] == since and announced[0].is_pending:
                    return max(self.fast_interval_seconds, floor)
        return max(self.interval_seconds, floor)

    async def _counted(self, call: Awaitable[T]) -> T:
        """One poll request: counted, and any failure makes the next poll a full resync."""
        try:
            return await call
        except SlurmError:
            self._need_resync = True
            self._check_controller_now = True
            raise
        finally:
            self.polls += 1

    def request_resync(self) -> None:
        """Make the next poll fetch and diff the full list (e.g. after a known controller restart)."""
        self._need_resync = True

    async def caught_up(self, since: float, timeout: float, *, complete: bool = True) -> bool:
        """Wait until a poll of every job (``complete=False``: of every job it covers, see :meth:`covers`) asked
        after ``since`` was answered (and delivered); False after ``timeout``."""
        self._wake.set()  # no need to wait for the next interval
        if not complete:
            return await self._wait_for(lambda: self.tracked_since >= since, timeout)

        def answered() -> bool:
            if self.answered_since >= since:
                return True
            self._complete_wanted = True  # set again while waiting: a complete probe in flight clears it
            return False

        return await self._wait_for(answered, timeout)

    def covers(self, job_id: int) -> bool:
        """Whether every poll from now on reports this job's state (or its absence): always, unless the probe asks
        for the tracked jobs only and this is not one of them."""
        return self._tracked is None or job_id in self._announced or job_id in self._tracked_jobs

    async def confirmed(self, since: float, timeout: float, job_id: int | None = None) -> bool:
        """Wait until a poll asked after ``since`` was delivered AND slurmctld's start time was read after
        ``since``; False after ``timeout``, without restart detection, when polls are slow
        (``CONFIRM_MAX_INTERVAL``), or when the polls do not cover ``job_id`` (:meth:`covers`).

        Job ids repeat only after a controller lost its state, i.e. restarted. With no restart seen by a check
        made after ``since``, a job in :attr:`jobs` is the job its id named when that poll was answered: the view
        then answers "whose job is this, and is it still live?" as a read of the job would, for every caller
        at once (the bridge's cancel reads no job first).
        """
        if self.controller_check_seconds is None or self.current_interval() > CONFIRM_MAX_INTERVAL:
            return False
        if job_id is not None and not self.covers(job_id):
            return False
        self._wake.set()  # once per call: cancels waiting together still share the poll that answers them

        def answered() -> bool:
            if self._controller_checked < since:
                # The next poll reads the start time first; set again while waiting, since a check in flight when
                # this began clears the flag.
                self._check_controller_now = True
                return False
            if self.tracked_since >= since:
                return True
            self._probe_wanted = True  # a cancel moves no counter: the probe that answers it is not left out
            return False

        return await self._wait_for(answered, timeout)

    async def _wait_for(self, done: Callable[[], bool], timeout: float) -> bool:
        """Poll ``done`` every 50 ms (or the interval, if shorter) until it holds; False after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(min(0.05, self.interval_seconds))
        return True

    def job(self, job_id: int) -> JobInfo | None:
        """The job with this id as last seen, or None when the last poll did not list it."""
        return self._jobs.get(job_id)

    def seen_within(self, seconds: float) -> bool:
        """Whether a poll asked less than ``seconds`` ago was answered and delivered."""
        return time.monotonic() - self.answered_since < seconds

    async def wait_synced(self, timeout: float | None = None) -> None:
        """Wait until the first full list has been read."""
        await asyncio.wait_for(self._synced.wait(), timeout)

    # --- polling ----------------------------------------------------------------------------------------

    async def poll_once(self) -> list[JobEvent]:
        """Run one poll and deliver its events; exposed for tests and for callers with their own loop.

        Returns:
            The events of this poll.

        Raises:
            SlurmError: The poll failed; the next poll resyncs.
        """
        checked = await self._check_controller()
        if self._check_controller_now and self.controller_check_seconds is not None:
            return []  # the controller is still starting (its start time reads 0): what it lists may be partial
        if self.state_probe and self._synced_once and not self._need_resync and not self._full_poll_due():
            if self._probe_ids(time.monotonic()) is None:
                if await self._quiet(checked):
                    self.requests["probe_skipped"] += 1
                    return []
                if self._check_controller_now:
                    return []  # the controller is starting (see above)
                if self._need_resync:
                    return await self._list_once()  # its counters said it restarted
            return await self._probe_once()
        return await self._list_once()

    async def _quiet(self, diag: Diag | None) -> bool:
        """Whether a probe of every job can be left out (``quiet_jobs``): slurmctld's job counters are the ones
        read before the last such probe, which is less than ``QUIET_MAX_SECONDS`` old, and nobody waits for one.
        The counters are read anyway from ``quiet_jobs`` on: they become the mark once the probe they came before is
        applied. A skipped probe answers nothing; ``caught_up`` and ``confirmed`` ask for a real one. ``diag``: the
        controller check's answer in this poll, if it asked."""
        if self.controller_check_seconds is None or self._last_complete_jobs < self.quiet_jobs:
            self._quiet_seen = None
            return False
        diag = diag or await self._read_diag()
        if self._need_resync or self._check_controller_now:
            self._quiet_seen = None  # a restart (or a controller still starting): the next poll lists everything
            return False
        seen = (diag.req_time_start, *(getattr(diag, name) for name in JOB_COUNTERS))
        self._quiet_seen = seen
        return (
            seen == self._quiet_mark
            and not self._complete_wanted
            and not self._probe_wanted
            and time.monotonic() - self._last_complete < QUIET_MAX_SECONDS
        )

    async def _list_once(self, *, whole: bool = False) -> list[JobEvent]:
        """``GET jobs?update_time=`` (the full list when anything changed), diffed against the cache; ``whole``: the
        full list whatever slurmctld's last update (a probe just saw the new jobs it must bring)."""
        fresh = whole or self._need_resync or self._last_update is None
        update_time = None if fresh or self._last_update is None else self._last_update - 1
        asked = time.monotonic()
        self.requests["full_list"] += 1
        page = await self._counted(self._client.list_jobs(update_time))
        now = time.monotonic()
        if await self._answered_late(asked, now):
            return []
        self._need_resync = False
        self._last_full = now
        self._last_full_seconds = now - asked
        self._last_complete, self._complete_wanted = now, False
        self._quiet_mark = None  # the next probe of every job is made, and marks the counters again
        if not self.state_probe:
            self._last_poll_seconds = now - asked
        # An announced job no poll has seen (cancelled at once) is forgotten after HINT_SECONDS.
        self._announced = {k: v for k, v in self._announced.items() if k in self._jobs or now - v[1] < HINT_SECONDS}
        self._version += 1
        if page.changed and page.last_update is not None:
            self._last_update = page.last_update
        news, self._announced_since_list = self._announced_since_list, False
        if not page.changed:
            self._reasons_quiet = 0 if news else self._reasons_quiet + 1
            self.answered_since = self.tracked_since = asked
            return []
        events = self._diff(page.jobs, now)
        news = news or any(
            event.job.is_pending or (event.previous is not None and event.previous.is_pending) for event in events
        )
        self._reasons_quiet = 0 if news else self._reasons_quiet + 1
        self._last_complete_jobs = len(page.jobs)
        if not self._synced_once:
            events = [dataclasses.replace(event, initial=True) for event in events]
        if self._restart_seen:
            self._restart_seen = False
            events = self._after_restart(events, page.jobs, asked, now)
        self._synced_once = True
        self._synced.set()
        delivered = await self._deliver(events)
        self.answered_since = self.tracked_since = asked
        return delivered

    async def _answered_late(self, asked: float, now: float) -> bool:
        """Whether to drop a poll's answer: it came after more than a second, AND slurmctld restarted meanwhile.

        A slow answer may mean slurmrestd waited for a controller (it retries a dead one for 10 s) that came
        back restarted, with jobs lost. So the controller's start time is read at once: a restart (or a
        controller still starting) drops the answer, and the next poll is a full list that marks what the
        restart lost. The same controller means the answer was merely slow (a full list of thousands of jobs
        takes seconds: 33 MB for 4,000 jobs, 4.6 s), and it is used, also when it is the list that reconciles a
        restart seen before it was asked (dropping those too left the watcher blind for as long as full lists took
        over a second: at 3,000 jobs, after slurmctld's statistics reset at midnight). Without restart detection,
        False.
        """
        if self.controller_check_seconds is None or now - asked <= SLOW_POLL_SECONDS:
            return False
        resync_before, restarts_before = self._need_resync, self.controller_restarts
        self.suspect_restart()
        try:
            await self._check_controller()
        except SlurmError:
            return True
        if self.controller_restarts != restarts_before or self._check_controller_now:
            return True
        self._need_resync = resync_before  # the same controller: nothing more to reconcile than before
        return False

    async def _check_controller(self) -> Diag | None:
        """Read slurmctld's start time when due (or after a failed poll); a change is a restart. The answer, if
        it asked."""
        if self.controller_check_seconds is None:
            return None
        now = time.monotonic()
        if not self._check_controller_now and now - self._controller_checked < self.controller_check_seconds:
            return None
        return await self._read_diag()

    async def _read_diag(self) -> Diag:
        """``GET diag``: slurmctld's start time (a change is a restart) and its job counters."""
        now = time.monotonic()
        diag = await self._counted(self._client.diag())
        self._controller_checked, self._check_controller_now = now, False
        started = diag.req_time_start
        if not started:
            self._check_controller_now = True  # a controller still starting answers 0 (measured): ask again
            return diag
        if self._controller_started is not None and started != self._controller_started:
            logger.warning(
                "slurmctld restarted (statistics since %s, before %s): reconciling every job",
                started,
                self._controller_started,
            )
            self.controller_restarts += 1
            self._restart_seen = True
            self._need_resync = True
        self._controller_started = started
        return diag

    def _after_restart(self, events: list[JobEvent], jobs: list[JobInfo], asked: float, now: float) -> list[JobEvent]:
        """Mark what the restart lost, including jobs announced before the list was asked for and not in it (or
        listed under their id, but as another job: the id was handed out again)."""
        listed = {job.job_id: job for job in jobs}
        vanished = {e.job_id for e in events if e.type is JobEventType.VANISHED}

        def lost_announcement(job_id: int, job: JobInfo) -> bool:
            if job_id in vanished:
                return False
            other = listed.get(job_id)
            if other is None:
                return True
            # An announcement has no submit_time: compare the rest of its identity, as _diff_one does.
            return self._identity(job.model_copy(update={"submit_time": other.submit_time})) != self._identity(other)

        lost = [
            JobEvent(JobEventType.VANISHED, job_id, job, None, now)
            for job_id, (job, since) in self._announced.items()
            if since < asked and lost_announcement(job_id, job)
        ]
        return [
            replace(event, controller_restart=True) if event.type is JobEventType.VANISHED else event
            for event in [*events, *lost]
        ]

    def _diff(self, jobs: list[JobInfo], now: float) -> list[JobEvent]:
        events: list[JobEvent] = []
        previous = set(self._jobs)
        listed = set()
        for job in jobs:
            listed.add(job.job_id)
            self._diff_one(job, now, events)
        for job_id in previous - listed:
            events.append(JobEvent(JobEventType.VANISHED, job_id, self._forget(job_id), None, now))
        return events

    def _diff_one(self, job: JobInfo, now: float, events: list[JobEvent]) -> None:
        """Compare one sighting with the cache, append its events, and cache it."""
        old = self._jobs.get(job.job_id)
        if old is not None and old.submit_time is None:
            # An announced job (see expect) has no submit_time yet: compare everything else of its identity.
            old_key = self._identity(old.model_copy(update={"submit_time": job.submit_time}))
        else:
            old_key = self._identity(old) if old is not None else None
        if old is not None and old_key != self._identity(job):
            logger.info(
                "Slurm job ID %s was reused (slurmctld lost the old job)",
                job.job_id,
                extra={"job_id": job.job_id},
            )
            events.append(JobEvent(JobEventType.VANISHED, job.job_id, old, None, now, controller_restart=True))
            self.suspect_restart()
            old = None
        if old is None:
            events.append(JobEvent(JobEventType.ADDED, job.job_id, job, None, now))
            if job.is_finished:
                events.append(JobEvent(JobEventType.FINISHED, job.job_id, job, None, now))
        elif _fingerprint(old) != _fingerprint(job):
            kind = JobEventType.FINISHED if job.is_finished and not old.is_finished else JobEventType.CHANGED
            events.append(JobEvent(kind, job.job_id, job, old, now))
        self._jobs[job.job_id] = job
        if self._tracked is not None:
            if self._tracked(job) or _shapes_views(job):
                self._tracked_jobs.add(job.job_id)
            else:
                self._tracked_jobs.discard(job.job_id)

    def _forget(self, job_id: int) -> JobInfo:
        """Drop a job no longer listed; return it as last seen."""
        self._tracked_jobs.discard(job_id)
        return self._jobs.pop(job_id)

    def _full_poll_due(self) -> bool:
        """State-probe mode reads the full list every ``full_poll_seconds`` while a job is pending (its
        reason is what users wait on), else only every ``idle_full_poll_seconds``: the probe already
        sees every state change, and a full list of a busy cluster is the costliest read there is."""
        since = time.monotonic() - self._last_full
        # A big list is read less often: it never takes more than a tenth of the time (4,000 jobs: 4.6 s).
        floor = FULL_POLL_SPACING * self._last_full_seconds
        if since >= max(self.idle_full_poll_seconds, floor):
            return True
        wanted = self._reasons_wanted
        return since >= max(self._reasons_seconds(), floor) and any(
            job.is_pending and (wanted is None or wanted(job)) for job in self._jobs.values()
        )

    def _reasons_seconds(self) -> float:
        """The wait between full lists for pending reasons: ``full_poll_seconds``, doubled for each full list in a
        row that brought no news of a pending job once the cluster holds ``quiet_jobs`` jobs
        (``REASONS_BACKOFF_MAX``); ``full_poll_seconds`` again as soon as a job is announced (its pods wait on its
        reason)."""
        if self._last_complete_jobs < self.quiet_jobs or self._announced_since_list:
            return self.full_poll_seconds
        backoff = self.full_poll_seconds * float(2 ** min(self._reasons_quiet, REASONS_BACKOFF_MAX))
        return min(backoff, max(self.full_poll_seconds, self.idle_full_poll_seconds))

    async def _probe_once(self) -> list[JobEvent]:
        """State-probe mode: ``GET jobs/state`` (cheap), then read only the jobs whose details matter now.

        A job that starts running is read (its nodes); a new job is read unless :meth:`expect` announced
        it; any other state change is applied to the cached job. Pending reasons and other details are
        refreshed by the full poll every ``full_poll_seconds``.
        """
        asked = time.monotonic()
        ids = self._probe_ids(asked)
        if ids == []:
            states: dict[int, list[str]] = {}  # nothing tracked: nothing to ask until the next probe of every job
        else:
            self.requests["probe_all" if ids is None else "probe_tracked"] += 1
            states = await self._counted(self._client.job_states(ids))
        now = time.monotonic()
        if ids is None:
            self._last_complete, self._last_complete_seconds, self._complete_wanted = now, now - asked, False
            self._last_complete_jobs = len(states)
        if ids is not None or not self._filtering():
            self._last_poll_seconds = now - asked  # a complete probe between filtered ones keeps its own spacing
        if await self._answered_late(asked, now):
            return []
        # Most jobs, most probes: the state is the cached one, nothing to look at (10 % of the worker at 3,000 jobs
        # when every job went through the checks below).
        changed = [(job_id, state) for job_id, state in states.items() if self._state_of(job_id) != state]
        new = sum(1 for job_id, state in changed if job_id not in self._jobs and not self._announced_as(job_id, state))
        if new > max(READS_BEFORE_LIST, LIST_SHARE * len(states)):
            # A burst of jobs no one announced (other users', or a follower replica's): one list costs less. Decided
            # before anything of this answer is applied, so the list's diff reports every change.
            logger.info("%d new jobs among %d: reading the job list instead of each job", new, len(states))
            return await self._list_once(whole=True)
        events: list[JobEvent] = []
        to_read: list[int] = []
        for job_id, state in changed:
            old = self._jobs.get(job_id)
            hint = self._announced_as(job_id, state) if old is None else None
            if hint is not None:
                self._diff_one(hint.model_copy(update={"job_state": state}), now, events)
            elif old is None or ("RUNNING" in state and not old.is_running) or _went_back(old, state):
                to_read.append(job_id)
            else:
                self._diff_one(old.model_copy(update={"job_state": state}), now, events)
        for job in await asyncio.gather(*(self._read(job_id) for job_id in to_read)):
            if job is not None:
                self._diff_one(job, now, events)
        asked_for = self._jobs if ids is None else [j for j in ids if j in self._jobs]
        for job_id in [j for j in asked_for if j not in states]:
            events.append(JobEvent(JobEventType.VANISHED, job_id, self._forget(job_id), None, now))
        delivered = await self._deliver(events)
        # Only now: the new jobs it read are in the subscribers' views.
        self.tracked_since = asked
        self._probe_wanted = False
        if ids is None:
            self.answered_since = asked
            self._quiet_mark = self._quiet_seen  # read before this probe was asked (None: not read)
        return delivered

    def _state_of(self, job_id: int) -> list[str] | None:
        job = self._jobs.get(job_id)
        return job.job_state if job is not None else None

    def _announced_as(self, job_id: int, state: list[str]) -> JobInfo | None:
        """The announcement of a job no poll has seen yet, when it tells all but the state: a job announced
        pending that is now running is read instead (its nodes)."""
        hint = self._announced.get(job_id)
        if hint is None or ("RUNNING" in state and not hint[0].is_running):
            return None
        return hint[0]

    def _filtering(self) -> bool:
        """Whether the probe asks for the tracked jobs only: other jobs outnumber them (else a probe of every job
        costs little more), and they are few enough for one request."""
        if self._tracked is None:
            return False
        tracked = self._tracked_ids()
        return len(tracked) <= MAX_PROBE_IDS and 2 * len(tracked) < len(self._jobs)

    def _tracked_ids(self) -> set[int]:
        return self._tracked_jobs | self._announced.keys()

    def _probe_ids(self, now: float) -> list[int] | None:
        """The jobs this probe asks for: the tracked ones (:meth:`_filtering`), or None for every job: when a
        complete view is due (``complete_probe_seconds``, spaced by its cost) or wanted (``caught_up``)."""
        if not self._filtering() or self._complete_wanted:
            return None
        due = max(self.complete_probe_seconds, COMPLETE_SPACING * self._last_complete_seconds)
        if now - self._last_complete >= due:
            return None
        return sorted(self._tracked_ids())

    async def _read(self, job_id: int) -> JobInfo | None:
        try:
            job = await self._client.get_job(job_id)
        except SlurmNotFound:
            return None
        except SlurmError:
            self._need_resync = True
            raise
        self.details_read += 1
        return job

    def _with_announcement(self, event: JobEvent) -> JobEvent:
        """Stamp an announced job's event with its announce time; stop tracking it once it left PENDING."""
        announced = self._announced.get(event.job_id)
        if announced is None:
            return event
        if event.type is JobEventType.VANISHED or not event.job.is_pending:
            del self._announced[event.job_id]
        return replace(event, announced_at=announced[1], announced=announced[0])

    async def _deliver(self, events: list[JobEvent]) -> list[JobEvent]:
        """Fan the events out to every subscriber and callback, in order; return them as delivered."""
        self._version += 1
        events = [self._with_announcement(event) for event in events]
        if self._lost:
            # Announced jobs whose ids were handed out again before any poll saw them (see expect). Not passed
            # through _with_announcement: the announcement under their id is the new job's.
            now = time.monotonic()
            events = [
                *(
                    JobEvent(JobEventType.VANISHED, job.job_id, job, None, now, controller_restart=True)
                    for job in self._lost
                ),
                *events,
            ]
            self._lost = []
        for event in events:
            for subscription in list(self._subscriptions):
                subscription._put(event)
            for callback in list(self._callbacks):
                try:
                    result = callback(event)
                    if result is not None:
                        await result
                except Exception:
                    # One broken subscriber must not stop the others or the loop.
                    logger.exception("job watcher callback failed", extra={"job_id": event.job_id})
        return events

    async def run(self) -> None:
        """Poll until cancelled. Errors are logged, back off, and cause a resync."""
        delay = self.interval_seconds
        while True:
            started = time.monotonic()
            try:
                await self.poll_once()
            except SlurmError as exc:
                self.errors += 1
                self.consecutive_errors += 1
                delay = min(max(delay * 2, self.interval_seconds), self.max_backoff_seconds)
                logger.warning("job watcher poll failed (%s); resyncing in %.2f s", type(exc).__name__, delay)
                await self._await_controller(delay)
                continue
            self.consecutive_errors = 0
            delay = self.interval_seconds
            # Keep the period fixed: one request per interval, however long the poll took.
            await self._sleep(max(0.0, self.current_interval() - (time.monotonic() - started)))

    async def _sleep(self, seconds: float) -> None:
        """Wait before the next poll; a restart hint (:meth:`suspect_restart`) ends the wait at once."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
        self._wake.clear()

    async def _await_controller(self, backoff: float) -> None:
        """After a failed poll: wait for a responding controller with ``GET ping`` (answered in milliseconds
        while slurmctld is down, where a job poll waits 10 s), one per interval; ``backoff`` when slurmrestd
        itself fails. Without restart detection, just wait ``backoff``."""
        if self.controller_check_seconds is None:
            await asyncio.sleep(backoff)
            return
        while True:
            try:
                pings = await self._client.ping()
            except SlurmError:
                await asyncio.sleep(backoff)
                return
            if any(p.responding for p in pings):
                return
            await asyncio.sleep(self.interval_seconds)

    def start(self) -> asyncio.Task[None]:
        """Start :meth:`run` as a background task (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self.run(), name="slurm-job-watcher")
        return self._task

    async def stop(self) -> None:
        """Stop the background task and end every subscription."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for subscription in list(self._subscriptions):
            subscription.close()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[JobWatcher]:
        """``async with watcher.running():`` starts the loop and stops it on exit."""
        self.start()
        try:
            yield self
        finally:
            await self.stop()

    async def wait_for(
        self, job_id: int, predicate: Callable[[JobInfo], bool], timeout: float | None = None
    ) -> JobInfo:
        """Wait until the watcher sees ``job_id`` in a state that satisfies ``predicate``.

        The watcher must be running. Returns at once if the cached job already matches.

        Raises:
            TimeoutError: Not seen within ``timeout`` seconds.
        """
        async with self.subscribe() as events:
            current = self._jobs.get(job_id)
            if current is not None and predicate(current):
                return current

            async def _wait() -> JobInfo:
                async for event in events:
                    if event.job_id == job_id and event.type is not JobEventType.VANISHED:
                        if predicate(event.job):
                            return event.job
                raise TimeoutError(f"job watcher stopped before job {job_id} matched")

            return await asyncio.wait_for(_wait(), timeout)
