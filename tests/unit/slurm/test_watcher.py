"""The job watcher: one poll per interval for every subscriber, events, resync and job-ID reuse."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import pytest

from slinky import hostlist
from slinky.clients.errors import SlurmUnavailable
from slinky.clients.slurm.client import JobsPage
from slinky.clients.slurm.models import JobDescMsg, JobInfo
from slinky.clients.slurm.watcher import JobEvent, JobEventType, JobWatcher
from tests.unit.slurm.helpers import Router, fake_cluster, make_client, sample

A, C, F, VAN = JobEventType.ADDED, JobEventType.CHANGED, JobEventType.FINISHED, JobEventType.VANISHED


def _job(name: str = "j", **kwargs: object) -> JobDescMsg:
    return JobDescMsg(name=name, partition="p", flags=["EXTERNAL_JOB"], shared=["none"], **kwargs)  # type: ignore[arg-type]


def _kinds(events: list[JobEvent]) -> list[tuple[JobEventType, int]]:
    return [(e.type, e.job_id) for e in events]


async def test_lifecycle_events_added_changed_finished_vanished() -> None:
    fake = fake_cluster()
    watcher = JobWatcher(fake)
    assert await watcher.poll_once() == []  # empty cluster, first full list
    job_id = await fake.submit_job(_job())
    assert _kinds(await watcher.poll_once()) == [(A, job_id)]
    assert await watcher.poll_once() == []  # nothing changed: no events
    fake.tick()
    changed = await watcher.poll_once()
    assert _kinds(changed) == [(C, job_id)]
    assert changed[0].job.is_running and changed[0].previous is not None and changed[0].previous.is_pending
    await fake.cancel_job(job_id)
    finished = await watcher.poll_once()
    assert _kinds(finished) == [(F, job_id)] and finished[0].job.state == "CANCELLED"
    fake.purge_finished()
    assert _kinds(await watcher.poll_once()) == [(VAN, job_id)]
    assert watcher.jobs == {}


async def test_one_request_per_poll_whatever_the_number_of_jobs_and_subscribers() -> None:
    fake = fake_cluster(nodes=4)
    watcher = JobWatcher(fake)
    subs = [watcher.subscribe() for _ in range(50)]
    for index in range(300):
        await fake.submit_job(_job(f"j{index}"))
    fake.calls.clear()
    for _ in range(3):
        await watcher.poll_once()
        fake.tick()
    assert fake.calls == ["list_jobs"] * 3
    first = [await subs[0].__anext__() for _ in range(300)]
    assert {e.type for e in first} == {A}
    for sub in subs:
        sub.close()


async def test_already_finished_job_is_added_then_finished() -> None:
    fake = fake_cluster()
    job_id = await fake.submit_job(_job())
    await fake.cancel_job(job_id)
    assert _kinds(await JobWatcher(fake).poll_once()) == [(A, job_id), (F, job_id)]


async def test_error_triggers_a_full_resync_that_reports_what_changed_meanwhile() -> None:
    fake = fake_cluster()
    watcher = JobWatcher(fake)
    running = await fake.submit_job(_job("r"))
    fake.tick()
    await watcher.poll_once()
    first_update = watcher.last_update
    fake.stop_controller()
    with pytest.raises(SlurmUnavailable):
        await watcher.poll_once()
    # Meanwhile: the running job is cancelled, a new one arrives.
    fake.start_controller()
    await fake.cancel_job(running)
    added = await fake.submit_job(_job("new"))
    asked: list[int | None] = []
    real_list_jobs = fake.list_jobs

    async def spy(update_time: int | None = None) -> JobsPage:
        asked.append(update_time)
        return await real_list_jobs(update_time)

    fake.list_jobs = spy  # type: ignore[method-assign]
    events = await watcher.poll_once()
    assert _kinds(events) == [(F, running), (A, added)]
    assert asked == [None]  # one request, and a full list: a resync
    assert watcher.last_update is not None and first_update is not None
    assert watcher.last_update > first_update


async def test_job_id_reuse_after_a_ctld_crash_is_vanished_then_added() -> None:
    fake = fake_cluster()
    watcher = JobWatcher(fake, identity=lambda job: (job.submit_time, job.name, job.admin_comment))
    old = await fake.submit_job(_job("old", admin_comment='{"uid":"a"}'))
    await watcher.poll_once()
    fake.crash(keep_job_ids=set())
    new = await fake.submit_job(_job("old", admin_comment='{"uid":"b"}'))
    assert new == old  # the ID is reused
    events = await watcher.poll_once()
    assert _kinds(events) == [(VAN, old), (A, new)]
    assert events[0].job.admin_comment == '{"uid":"a"}' and events[1].job.admin_comment == '{"uid":"b"}'


async def test_default_identity_treats_an_admin_comment_update_as_a_change() -> None:
    fake = fake_cluster()
    watcher = JobWatcher(fake)
    job_id = await fake.submit_job(_job("pend", hold=True, admin_comment="a"))
    await watcher.poll_once()
    await fake.update_job(job_id, JobDescMsg(admin_comment="b"))
    assert _kinds(await watcher.poll_once()) == [(C, job_id)]


async def test_reverted_job_after_crash_is_a_change_not_a_reuse() -> None:
    fake = fake_cluster()
    watcher = JobWatcher(fake)
    job_id = await fake.submit_job(_job())
    fake.tick()
    await watcher.poll_once()
    # slurmctld came back with the early saved state: same job, PENDING again.
    fake._jobs[job_id].state = "PENDING"
    fake._release(fake._jobs[job_id])
    fake._touch()
    events = await watcher.poll_once()
    assert _kinds(events) == [(C, job_id)] and events[0].job.is_pending


async def test_watcher_over_http_keeps_update_time_when_server_answers_zero() -> None:
    no_change = {"jobs": [], "last_update": {"set": True, "infinite": False, "number": 0}}
    router = Router().add("GET", "/slurm/v0.0.44/jobs", (200, sample("get_job_running.json")), (200, no_change))
    async with make_client(router) as client:
        watcher = JobWatcher(client)
        assert _kinds(await watcher.poll_once()) == [(A, 1)]
        assert await watcher.poll_once() == []
        assert await watcher.poll_once() == []
    params = [r.url.params.get("update_time") for r in router.requests]
    # One second of overlap: slurmctld's last_update has one-second resolution.
    assert params == [None, "1795320018", "1795320018"]
    assert watcher.jobs[1].is_running  # the zero answer did not wipe the cache


async def test_running_loop_serves_iterators_and_callbacks_and_survives_a_bad_callback() -> None:
    fake = fake_cluster()
    watcher = JobWatcher(fake, interval_seconds=0.01)
    got: list[JobEvent] = []

    def broken(event: JobEvent) -> None:
        raise RuntimeError("subscriber bug")

    async def collect(event: JobEvent) -> None:
        got.append(event)

    watcher.add_callback(broken)
    watcher.add_callback(collect)
    async with watcher.running():
        await watcher.wait_synced(timeout=2)
        job_id = await fake.submit_job(_job())
        waiter = asyncio.create_task(watcher.wait_for(job_id, lambda j: j.is_running, timeout=2))
        await asyncio.sleep(0.05)
        fake.tick()
        job: JobInfo = await waiter
        assert job.is_running
        sub = watcher.subscribe()
    # stop() ended the subscription
    assert [e async for e in sub] == []
    assert [(e.type, e.job_id) for e in got][:2] == [(A, job_id), (C, job_id)]


async def test_running_loop_backs_off_and_resyncs_after_errors() -> None:
    fake = fake_cluster()
    watcher = JobWatcher(fake, interval_seconds=0.01, max_backoff_seconds=0.02)
    fake.fail_next("list_jobs", SlurmUnavailable("down"), times=3)
    async with watcher.running():
        await watcher.wait_synced(timeout=2)
    assert watcher.errors == 3 and watcher.consecutive_errors == 0
    assert watcher.polls >= 4


async def test_state_probe_reads_a_job_only_when_it_starts_running() -> None:
    """Probe mode: `jobs/state` per poll; an announced job costs no read; a start costs one read (its nodes)."""
    fake = fake_cluster()
    watcher = JobWatcher(fake, state_probe=True, full_poll_seconds=3600)
    assert await watcher.poll_once() == []  # the first poll is a full list
    job_id = await fake.submit_job(_job("announced", comment="mine"))
    watcher.expect(JobInfo(job_id=job_id, name="announced", job_state=["PENDING"], comment="mine"))
    fake.calls.clear()
    added = await watcher.poll_once()
    assert _kinds(added) == [(A, job_id)] and added[0].job.comment == "mine"
    assert fake.calls == ["job_states"], "an announced job is not read"
    fake.tick()
    fake.calls.clear()
    started = await watcher.poll_once()
    assert _kinds(started) == [(C, job_id)]
    assert started[0].job.is_running and started[0].job.nodes
    assert fake.calls == ["job_states", "get_job"], "one read, for the nodes"
    await fake.cancel_job(job_id)
    fake.calls.clear()
    finished = await watcher.poll_once()
    assert _kinds(finished) == [(F, job_id)] and finished[0].job.state == "CANCELLED"
    assert fake.calls == ["job_states"], "a state change needs no read"
    fake.purge_finished()
    assert _kinds(await watcher.poll_once()) == [(VAN, job_id)]


async def test_state_probe_reads_unannounced_jobs_and_refreshes_details_by_full_polls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stranger job is read once; the full list (pending reasons) is read every ``full_poll_seconds`` only
    while a job is pending, and otherwise every ``idle_full_poll_seconds``."""
    clock = [1000.0]
    monkeypatch.setattr("slinky.clients.slurm.watcher.time.monotonic", lambda: clock[0])
    fake = fake_cluster(nodes=1)
    watcher = JobWatcher(fake, state_probe=True, full_poll_seconds=2.0, idle_full_poll_seconds=30.0)
    await watcher.poll_once()
    job_id = await fake.submit_job(_job("stranger"))
    fake.calls.clear()
    assert _kinds(await watcher.poll_once()) == [(A, job_id)]
    assert fake.calls == ["job_states", "get_job"], "an unannounced job is read once"
    fake.tick()  # it starts: nothing pending any more
    await watcher.poll_once()
    clock[0] += 5
    fake.calls.clear()
    await watcher.poll_once()
    assert fake.calls == ["job_states"], "nothing pending: no full list after 5 s"
    waiting = await fake.submit_job(_job("waiting"))  # the only node is taken: stays pending
    await watcher.poll_once()
    assert watcher.jobs[waiting].is_pending
    clock[0] += 2.5
    fake.calls.clear()
    await watcher.poll_once()
    assert fake.calls == ["list_jobs"], "a job is pending: the full list every 2 s, for its reason"
    await fake.cancel_job(waiting)
    await watcher.poll_once()
    clock[0] += 2.5
    fake.calls.clear()
    await watcher.poll_once()
    assert fake.calls == ["job_states"]
    clock[0] += 30
    fake.calls.clear()
    await watcher.poll_once()
    assert fake.calls == ["list_jobs"], "idle: still a full list every 30 s, to catch any drift"


async def test_a_burst_of_unannounced_jobs_is_listed_once_not_read_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``READS_BEFORE_LIST`` new jobs (and a fifth of every job) one full list replaces the reads; fewer are
    still read one by one. Either way each new job is ADDED once, with its details."""
    monkeypatch.setattr("slinky.clients.slurm.watcher.READS_BEFORE_LIST", 4)
    fake = fake_cluster(nodes=1)
    watcher = JobWatcher(fake, state_probe=True, full_poll_seconds=3600, idle_full_poll_seconds=3600)
    await watcher.poll_once()
    few = [await fake.submit_job(_job(f"few-{i}")) for i in range(4)]
    fake.calls.clear()
    assert sorted(_kinds(await watcher.poll_once())) == [(A, j) for j in few]
    assert fake.calls == ["job_states", *["get_job"] * 4], "four new jobs: read each"
    burst = [await fake.submit_job(_job(f"burst-{i}")) for i in range(5)]
    await fake.cancel_job(few[0])  # a change of a known job in the same answer is reported by the list
    fake.calls.clear()
    asked: list[int | None] = []
    listing = fake.list_jobs

    async def list_jobs(update_time: int | None = None) -> JobsPage:
        asked.append(update_time)
        return await listing(update_time)

    monkeypatch.setattr(fake, "list_jobs", list_jobs)
    events = await watcher.poll_once()
    assert fake.calls == ["job_states", "list_jobs"], "five new jobs: one list, no read"
    assert asked == [None], "the whole list: the probe saw the new jobs, whatever slurmctld's last update says"
    assert sorted(_kinds(events)) == sorted([(F, few[0]), *((A, j) for j in burst)])
    assert {watcher.jobs[j].name for j in burst} == {f"burst-{i}" for i in range(5)}
    fake.calls.clear()
    assert await watcher.poll_once() == [] and fake.calls == ["job_states"], "then probes again"


async def test_only_wanted_pending_jobs_bring_the_full_list_every_few_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a shared cluster thousands of users' jobs wait: their reasons are nobody's business here, so they do not
    make the watcher read the whole list every ``full_poll_seconds`` (at 10,000 jobs: 33 MB); a wanted one does."""
    clock = [1000.0]
    monkeypatch.setattr("slinky.clients.slurm.watcher.time.monotonic", lambda: clock[0])
    fake = fake_cluster(nodes=1)
    watcher = JobWatcher(
        fake, state_probe=True, full_poll_seconds=2.0, idle_full_poll_seconds=30.0,
        reasons_wanted=lambda job: job.name == "ours",
    )  # fmt: skip
    await watcher.poll_once()
    await fake.submit_job(_job("busy"))
    fake.tick()
    await fake.submit_job(_job("theirs"))  # the only node is taken: stays pending
    await watcher.poll_once()
    clock[0] += 2.5
    fake.calls.clear()
    await watcher.poll_once()
    assert fake.calls == ["job_states"], "another's pending job: no full list"
    ours = await fake.submit_job(_job("ours"))
    await watcher.poll_once()
    assert watcher.jobs[ours].is_pending
    clock[0] += 2.5
    fake.calls.clear()
    await watcher.poll_once()
    assert fake.calls == ["list_jobs"], "ours pending: the full list every 2 s, for its reason"


async def test_fast_interval_while_an_announced_job_is_young_and_pending(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod waits while its job is pending: poll fast for a few seconds after the submit, then slow down,
    and at once when the job starts (or nothing was announced)."""
    clock = [1000.0]
    monkeypatch.setattr("slinky.clients.slurm.watcher.time.monotonic", lambda: clock[0])
    fake = fake_cluster()
    watcher = JobWatcher(
        fake, state_probe=True, full_poll_seconds=3600, fast_interval_seconds=0.05, fast_window_seconds=3.0
    )
    await watcher.poll_once()
    assert watcher.current_interval() == 0.25, "nothing announced: the normal interval"
    first = await fake.submit_job(_job("first", comment="mine"))
    watcher.expect(JobInfo(job_id=first, name="first", job_state=["PENDING"], comment="mine"))
    assert watcher.current_interval() == 0.05, "announced and not yet seen: fast"
    await watcher.poll_once()
    assert watcher.current_interval() == 0.05, "seen pending: still fast"
    fake.tick()
    clock[0] += 0.4
    started = await watcher.poll_once()
    assert watcher.jobs[first].is_running
    assert [e.announced_at for e in started] == [1000.0], "the start carries the submit time (for the metric)"
    assert started[0].observed_at - 1000.0 == pytest.approx(0.4)
    assert watcher.current_interval() == 0.25, "started: back to the normal interval"
    await fake.cancel_job(first)
    assert [e.announced_at for e in await watcher.poll_once()] == [None], "only up to the first non-pending event"

    allocated = await fake.allocate_job(_job("allocated", comment="mine"))
    watcher.expect(await fake.get_job(allocated))
    assert watcher.current_interval() == 0.25, "an immediate allocation has nothing to wait for: no fast polls"

    second = await fake.submit_job(_job("second", comment="mine", minimum_nodes=10_000))  # cannot start
    watcher.expect(JobInfo(job_id=second, name="second", job_state=["PENDING"], comment="mine"))
    await watcher.poll_once()
    assert watcher.current_interval() == 0.05
    clock[0] += 3.5
    assert watcher.current_interval() == 0.25, "pending longer than the window: the normal interval"

    slow = JobWatcher(fake, state_probe=True)
    slow.expect(JobInfo(job_id=second, name="second", job_state=["PENDING"], comment="mine"))
    assert slow.current_interval() == 0.25, "no fast interval configured"


async def test_only_young_announcements_are_looked_at_for_the_fast_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thousands of announced jobs that stay pending do not make each ``current_interval`` look at every one."""
    clock = [1000.0]
    monkeypatch.setattr("slinky.clients.slurm.watcher.time.monotonic", lambda: clock[0])
    watcher = JobWatcher(
        fake_cluster(), state_probe=True, fast_interval_seconds=0.05, fast_window_seconds=3.0
    )  # fmt: skip
    for job_id in range(1, 2001):
        watcher.expect(JobInfo(job_id=job_id, name="old", job_state=["PENDING"], comment="mine"))
    assert watcher.current_interval() == 0.05
    clock[0] += 5
    looked: list[int] = []
    pending = JobInfo.is_pending
    monkeypatch.setattr(JobInfo, "is_pending", property(lambda job: looked.append(job.job_id) or pending.fget(job)))
    assert watcher.current_interval() == 0.25, "2,000 announcements, all older than the window: the normal interval"
    watcher.expect(JobInfo(job_id=5000, name="young", job_state=["PENDING"], comment="mine"))
    assert watcher.current_interval() == 0.05
    assert looked == [5000], "only the young announcement was looked at"
    watcher.expect(JobInfo(job_id=5000, name="young", job_state=["RUNNING"], comment="mine"))
    assert watcher.current_interval() == 0.25, "announced again as running: nothing to wait for"


async def test_without_a_fast_interval_announcements_are_not_kept_for_it() -> None:
    watcher = JobWatcher(fake_cluster(), state_probe=True)
    for job_id in range(1, 1001):
        watcher.expect(JobInfo(job_id=job_id, name="j", job_state=["PENDING"], comment="mine"))
    assert watcher.current_interval() == 0.25
    assert len(watcher._young) == 0, "nothing would ever trim them"


async def test_state_probe_does_not_read_a_job_announced_running() -> None:
    """An immediate allocation is announced with its nodes: its first sighting costs no read."""
    fake = fake_cluster()
    watcher = JobWatcher(fake, state_probe=True, full_poll_seconds=3600)
    await watcher.poll_once()
    job_id = await fake.allocate_job(_job("now", comment="mine"))
    watcher.expect(await fake.get_job(job_id))
    assert watcher.running_nodes() == {"n-1"}, "busy from the announcement on"
    fake.calls.clear()
    [added] = await watcher.poll_once()
    assert (added.type, added.job.nodes, added.announced_at is not None) == (A, "n-1", True)
    assert added.announced is not None and added.announced.is_running, "the router knows the submitter has it"
    assert fake.calls == ["job_states"]


async def test_waiting_jobs_and_running_nodes_follow_the_jobs() -> None:
    fake = fake_cluster(nodes=1)
    watcher = JobWatcher(fake)
    first = await fake.submit_job(_job("first"))
    fake.tick()
    await watcher.poll_once()
    assert not watcher.has_waiting_jobs() and watcher.running_nodes() == {"n-1"}
    waiting = await fake.submit_job(_job("waiting"))
    fake.tick()
    await watcher.poll_once()
    assert watcher.jobs[waiting].state_reason == "Resources" and watcher.has_waiting_jobs()
    await fake.cancel_job(first)
    await fake.cancel_job(waiting)
    await watcher.poll_once()
    assert watcher.running_nodes() == set() and not watcher.has_waiting_jobs()


async def test_a_controller_restart_is_seen_from_diag_and_reconciles_every_job_at_once() -> None:
    """kill -9 of slurmctld: the state-probe poll alone would miss a reused id; the start time in ``diag`` makes
    the next poll a full list whose diff marks every lost job, announced ones included."""
    fake = fake_cluster()
    watcher = JobWatcher(fake, state_probe=True, controller_check_seconds=0.0)
    saved = await fake.submit_job(_job("saved"))
    lost = await fake.submit_job(_job("lost"))
    await watcher.poll_once()
    unseen = await fake.submit_job(_job("unseen"))  # submitted, announced, never polled: lost too
    watcher.expect(await fake.get_job(unseen))
    assert watcher.controller_restarts == 0
    fake.crash(keep_job_ids={saved})
    reused = await fake.submit_job(_job("new owner"))
    assert reused == lost, "the restarted controller hands out the lost id again"
    events = await watcher.poll_once()
    assert watcher.controller_restarts == 1
    assert sorted((e.type, e.job_id, e.job.name, e.controller_restart) for e in events) == sorted(
        [(VAN, lost, "lost", True), (A, reused, "new owner", False), (VAN, unseen, "unseen", True)]
    )
    assert _kinds(await watcher.poll_once()) == [], "one reconcile per restart"
    assert watcher.controller_restarts == 1


async def test_no_restart_no_reconcile_and_a_failed_poll_checks_the_controller_at_once() -> None:
    fake = fake_cluster()
    watcher = JobWatcher(fake, state_probe=True, controller_check_seconds=3600.0)
    await fake.submit_job(_job())
    await watcher.poll_once()
    fake.calls.clear()
    await watcher.poll_once()
    assert "diag" not in fake.calls and "list_jobs" not in fake.calls, "not due: the cheap probe only"
    fake.stop_controller()
    with pytest.raises(SlurmUnavailable):
        await watcher.poll_once()
    fake.crash(keep_job_ids=set())
    fake.start_controller()
    fake.calls.clear()
    events = await watcher.poll_once()
    assert fake.calls[:2] == ["diag", "list_jobs"], "after an outage: the start time first, then a full list"
    assert watcher.controller_restarts == 1 and [e.controller_restart for e in events] == [True]


async def test_state_probe_reads_a_job_that_went_back_to_pending_and_finds_another_job() -> None:
    """The probe alone sees "job 13 PENDING"; the job it cached as 13 was RUNNING and announced by the bridge,
    so it has no submit_time. Going back to PENDING is read, and the read shows another owner: a reuse."""
    fake = fake_cluster()
    watcher = JobWatcher(fake, state_probe=True, full_poll_seconds=3600, identity=lambda j: (j.name, j.comment))
    await watcher.poll_once()
    mine = await fake.allocate_job(_job("mine", comment="w1"))
    watcher.expect((await fake.get_job(mine)).model_copy(update={"submit_time": None}))
    await watcher.poll_once()
    fake.crash(keep_job_ids=set())
    theirs = await fake.submit_job(_job("theirs", comment="w2", hold=True))
    assert theirs == mine
    fake.calls.clear()
    events = await watcher.poll_once()
    assert fake.calls == ["job_states", "get_job"], "went back to PENDING: read"
    assert [(e.type, e.job.comment, e.controller_restart) for e in events] == [(VAN, "w1", True), (A, "w2", False)]


async def test_an_announced_id_that_the_watcher_knows_as_another_job_makes_the_next_poll_a_reconcile() -> None:
    fake = fake_cluster()
    watcher = JobWatcher(fake, state_probe=True, full_poll_seconds=3600, controller_check_seconds=3600.0)
    first = await fake.submit_job(_job("first"))
    await watcher.poll_once()
    fake.crash(keep_job_ids=set())
    again = await fake.submit_job(_job("second"))
    assert again == first
    watcher.expect(await fake.get_job(again))
    fake.calls.clear()
    events = await watcher.poll_once()
    assert fake.calls[:2] == ["diag", "list_jobs"], "not due for an hour, but the submit proved a restart"
    assert watcher.controller_restarts == 1
    assert [(e.type, e.job.name, e.controller_restart) for e in events] == [(VAN, "first", True), (A, "second", False)]


async def test_during_an_outage_the_loop_pings_and_reconciles_as_soon_as_a_controller_answers() -> None:
    fake = fake_cluster()
    watcher = JobWatcher(fake, state_probe=True, interval_seconds=0.01, controller_check_seconds=3600.0)
    job_id = await fake.submit_job(_job("lost"))
    vanished = asyncio.Event()
    watcher.add_callback(lambda e: vanished.set() if e.type is VAN and e.controller_restart else None)
    async with watcher.running():
        await watcher.wait_synced(timeout=5)
        fake.stop_controller()
        await asyncio.sleep(0.1)
        assert "ping" in fake.calls, "a dead controller is watched with ping, not with job polls"
        polls = fake.calls.count("job_states") + fake.calls.count("list_jobs")
        await asyncio.sleep(0.1)
        assert fake.calls.count("job_states") + fake.calls.count("list_jobs") == polls
        fake.crash(keep_job_ids=set())
        fake.start_controller()
        await asyncio.wait_for(vanished.wait(), 2)
    assert watcher.controller_restarts == 1 and job_id not in watcher.jobs


async def test_a_starting_controller_answering_zero_is_asked_again_not_taken_for_a_restart() -> None:
    fake = fake_cluster()
    watcher = JobWatcher(fake, state_probe=True, full_poll_seconds=3600, controller_check_seconds=3600.0)
    await watcher.poll_once()
    started = fake.started
    fake.started = 0  # measured on 26.05: diag during slurmctld's start-up says req_time_start 0
    watcher.suspect_restart()
    fake.calls.clear()
    assert await watcher.poll_once() == []
    assert fake.calls == ["diag"], "no job poll of a controller still starting"
    assert watcher.controller_restarts == 0
    fake.started = started
    fake.calls.clear()
    await watcher.poll_once()
    assert fake.calls[0] == "diag", "asked again at the next poll"
    assert watcher.controller_restarts == 0, "the same start time: no restart"


async def test_a_poll_answered_late_is_not_diffed_and_the_restart_is_looked_for_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """slurmrestd holds a poll up to 10 s while slurmctld is down and answers from the restarted one: its list
    lacks the lost jobs, which must come out flagged as lost in a restart, not as merely gone."""
    fake = fake_cluster()
    watcher = JobWatcher(fake, state_probe=True, full_poll_seconds=3600, controller_check_seconds=3600.0)
    await fake.submit_job(_job("lost"))
    await watcher.poll_once()
    fake.crash(keep_job_ids=set())
    monkeypatch.setattr("slinky.clients.slurm.watcher.SLOW_POLL_SECONDS", 0.05)
    quick = fake.job_states

    async def held(job_ids: object = None) -> dict[int, list[str]]:
        await asyncio.sleep(0.1)
        return await quick()

    monkeypatch.setattr(fake, "job_states", held)
    assert await watcher.poll_once() == []
    monkeypatch.setattr(fake, "job_states", quick)
    events = await watcher.poll_once()
    assert [(e.type, e.job.name, e.controller_restart) for e in events] == [(VAN, "lost", True)]


def _slow_full_lists(monkeypatch: pytest.MonkeyPatch, fake: Any) -> None:
    """Every full list answers after 0.1 s, and an answer after 0.05 s counts as slow."""
    monkeypatch.setattr("slinky.clients.slurm.watcher.SLOW_POLL_SECONDS", 0.05)
    quick = fake.list_jobs

    async def slow(update_time: int | None = None) -> Any:
        await asyncio.sleep(0.1)
        return await quick(update_time)

    monkeypatch.setattr(fake, "list_jobs", slow)


async def test_a_slow_answer_from_the_same_controller_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full list of thousands of jobs takes seconds (4,000 jobs: 33 MB, 4.6 s, measured): slow, not a restart.
    Dropping every slow answer left the watcher never synced, and every submit waiting for it, at 4,000 jobs."""
    fake = fake_cluster()
    watcher = JobWatcher(fake, state_probe=True, full_poll_seconds=3600, controller_check_seconds=3600.0)
    await fake.submit_job(_job("big"))
    _slow_full_lists(monkeypatch, fake)
    events = await watcher.poll_once()
    assert [e.job.name for e in events] == ["big"], "the slow first list is diffed"
    await asyncio.wait_for(watcher.wait_synced(), 1)
    assert watcher.controller_restarts == 0


async def test_a_restart_seen_while_every_full_list_is_slow_is_still_reconciled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At 3,000 jobs a full list takes over a second. Once a restart was seen (or slurmctld's statistics reset at
    midnight, which looks the same), every such list was dropped as "maybe from a restarted controller", because
    the restart it was asked to reconcile was still marked unreconciled: the watcher went blind, and queued pods
    whose jobs Slurm started were not bound (bench.scale run at 00:00, 0 of 8 in 120 s). A slow answer is dropped
    only when the controller check after it finds a new restart."""
    fake = fake_cluster(nodes=1)
    watcher = JobWatcher(fake, state_probe=True, controller_check_seconds=0.0)
    running = await fake.submit_job(_job("running"))
    fake.tick()
    queued = await fake.submit_job(_job("queued"))
    await watcher.poll_once()
    fake.crash(keep_job_ids={running, queued})  # no job lost: only the start time changed
    _slow_full_lists(monkeypatch, fake)
    assert await watcher.poll_once() == [], "the reconciling list: nothing was lost"
    assert watcher.controller_restarts == 1
    await fake.cancel_job(running)
    assert fake.tick() == [queued]
    seen: list[JobEvent] = []
    for _ in range(3):
        seen += await watcher.poll_once()
    assert [(e.job.name, e.job.state) for e in seen if e.job_id == queued] == [("queued", "RUNNING")]
    assert watcher.controller_restarts == 1


async def test_a_list_that_took_seconds_is_read_again_only_ten_times_later() -> None:
    fake = fake_cluster()
    watcher = JobWatcher(fake, state_probe=True, full_poll_seconds=2.0, idle_full_poll_seconds=30.0)
    await fake.submit_job(_job("pending"))
    await watcher.poll_once()
    assert any(j.is_pending for j in watcher.jobs.values())
    watcher._last_full -= 3.0
    assert watcher._full_poll_due(), "a quick list: every 2 s while a job is pending"
    watcher._last_full_seconds = 4.6  # 4,000 jobs
    assert not watcher._full_poll_due(), "a 4.6 s list: not again within 46 s"
    watcher._last_full -= 44.0
    assert watcher._full_poll_due()


async def test_caught_up_waits_for_a_poll_asked_after_the_moment() -> None:
    """A retried submit asks the index, after the next poll, for a job its earlier attempt may have made."""
    fake = fake_cluster()
    watcher = JobWatcher(fake, state_probe=True, interval_seconds=0.02)
    assert not await watcher.caught_up(time.monotonic(), 0.1), "no poll runs: False after the timeout"
    async with watcher.running():
        await watcher.wait_synced(1)
        await fake.submit_job(_job("made-by-an-earlier-attempt"))
        assert await watcher.caught_up(time.monotonic(), 2)
        assert "made-by-an-earlier-attempt" in {j.name for j in watcher.jobs.values()}


async def test_caught_up_only_once_the_poll_delivered_the_job_it_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe sees a new job id, then reads the job: ``caught_up`` must wait for that read and its delivery,
    or a retried submit would find no job and submit a second one."""
    fake = fake_cluster()
    watcher = JobWatcher(fake, state_probe=True, interval_seconds=0.02)
    async with watcher.running():
        await watcher.wait_synced(1)
        quick = fake.get_job

        async def slow_read(job_id: int) -> Any:
            await asyncio.sleep(0.3)
            return await quick(job_id)

        monkeypatch.setattr(fake, "get_job", slow_read)
        await fake.submit_job(_job("made-by-an-earlier-attempt"))
        assert await watcher.caught_up(time.monotonic(), 3)
        assert "made-by-an-earlier-attempt" in {j.name for j in watcher.jobs.values()}


async def test_confirmed_waits_for_a_controller_check_and_a_poll_asked_after_it() -> None:
    """A cancel trusts the view instead of reading the job: only after a poll and a start-time read that were
    asked after it began, so that a restart (the one way an id names another job) is always seen first."""
    fake = fake_cluster()
    watcher = JobWatcher(fake, state_probe=True, interval_seconds=0.01, controller_check_seconds=3600.0)
    mine = await fake.submit_job(_job("mine"))
    async with watcher.running():
        await watcher.wait_synced(timeout=5)
        fake.calls.clear()
        assert await watcher.confirmed(time.monotonic(), 2)
        assert "diag" in fake.calls, "the start time was read again although the next check is an hour away"
        seen = watcher.job(mine)
        assert seen is not None and seen.name == "mine"
        fake.crash(keep_job_ids=set())
        theirs = await fake.submit_job(_job("theirs"))
        assert theirs == mine, "the id was handed out again"
        assert await watcher.confirmed(time.monotonic(), 2)
        seen = watcher.job(mine)
        assert seen is not None and seen.name == "theirs", "the view names the job the id names now"
        assert watcher.controller_restarts == 1


async def test_confirmed_is_false_without_restart_detection_or_without_a_poll() -> None:
    fake = fake_cluster()
    unchecked = JobWatcher(fake, state_probe=True, interval_seconds=0.01)
    async with unchecked.running():
        await unchecked.wait_synced(timeout=5)
        assert not await unchecked.confirmed(time.monotonic(), 0.2), "ids could be reused unseen"
    idle = JobWatcher(fake, state_probe=True, controller_check_seconds=3600.0)
    assert not await idle.confirmed(time.monotonic(), 0.2), "no poll ran"


async def test_polls_are_spaced_by_what_the_last_one_took(monkeypatch: pytest.MonkeyPatch) -> None:
    """With thousands of jobs a probe takes long: the next waits at least twice as long, fast or not, so that
    the watcher never polls back to back (issue 16: 2,000 pending jobs kept the worker busy parsing probes)."""
    clock = [1000.0]
    monkeypatch.setattr("slinky.clients.slurm.watcher.time.monotonic", lambda: clock[0])
    fake = fake_cluster()
    probe = fake.job_states

    async def slow_probe(job_ids: object = None) -> dict[int, list[str]]:
        clock[0] += 0.2  # slurmrestd renders a big answer
        return await probe()

    monkeypatch.setattr(fake, "job_states", slow_probe)
    watcher = JobWatcher(
        fake, state_probe=True, full_poll_seconds=3600, fast_interval_seconds=0.05, fast_window_seconds=3.0
    )
    await watcher.poll_once()  # the first poll is a full list: its time does not space probes
    assert watcher.current_interval() == 0.25
    await watcher.poll_once()
    assert watcher.current_interval() == pytest.approx(0.4), "a 0.2 s probe: 0.4 s before the next"
    job_id = await fake.submit_job(_job("waits", comment="mine", minimum_nodes=10_000))
    watcher.expect(JobInfo(job_id=job_id, name="waits", job_state=["PENDING"], comment="mine"))
    assert watcher.current_interval() == pytest.approx(0.4), "the fast interval too"


async def test_confirmed_says_no_at_once_when_polls_are_slow(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thousands of jobs space the polls out: the caller reads its one job rather than wait for the next poll."""
    fake = fake_cluster()
    watcher = JobWatcher(fake, state_probe=True, controller_check_seconds=3600.0)
    monkeypatch.setattr(watcher, "_last_poll_seconds", 0.2)  # 0.4 s to the next poll
    started = time.monotonic()
    assert not await watcher.confirmed(time.monotonic(), 2)
    assert time.monotonic() - started < 0.1


async def test_an_announced_job_is_folded_into_the_views_without_recomputing_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The submit asks for the free-node views once per workload: an announcement adds its one job to them, and
    only a poll recomputes them over every job."""
    fake = fake_cluster(nodes=2)
    watcher = JobWatcher(fake)
    first = await fake.submit_job(_job("first"))
    fake.tick()
    await watcher.poll_once()
    assert watcher.running_nodes() == {"n-1"} and not watcher.has_waiting_jobs()
    recomputed = 0
    expand = hostlist.expand

    def counting(nodes: str) -> list[str]:
        nonlocal recomputed
        recomputed += 1
        return expand(nodes)

    monkeypatch.setattr("slinky.clients.slurm.watcher.hostlist.expand", counting)
    allocated = await fake.allocate_job(_job("allocated"))
    watcher.expect(await fake.get_job(allocated))
    waiting = JobInfo(job_id=999, name="w", job_state=["PENDING"], state_reason="Resources")
    watcher.expect(waiting)
    assert watcher.running_nodes() == {"n-1", "n-2"} and watcher.has_waiting_jobs()
    assert recomputed == 1, "only the announced job's nodes were expanded"
    await fake.cancel_job(first)
    await watcher.poll_once()
    assert watcher.running_nodes() == {"n-2"}, "a poll recomputes from every job"
    assert first not in watcher.jobs or watcher.jobs[first].is_finished


@pytest.mark.parametrize(
    ("announced_again", "check_seconds"),
    [(True, 3600.0), (False, 0.0)],
    ids=["id-announced-again-by-this-process", "id-listed-as-another-after-the-restart"],
)
async def test_an_announced_job_lost_before_any_poll_saw_it_is_reported(
    announced_again: bool, check_seconds: float
) -> None:
    """make test's slurmctld crash: a job submitted, slurmctld killed before a poll saw it, its id handed out again.
    Its owner must hear VANISHED, or it waits forever: whether this process announces the next job under that id
    (no restart check due for an hour: the announcement proves the loss), or another submitter got it (the
    reconcile compares the announced job with the one listed under its id, not the id alone)."""
    fake = fake_cluster(nodes=0)
    watcher = JobWatcher(fake, state_probe=True, controller_check_seconds=check_seconds)
    await watcher.poll_once()
    first = await fake.submit_job(_job("first"))
    watcher.expect(JobInfo(job_id=first, name="first", job_state=["PENDING"]))
    fake.crash(keep_job_ids=set())
    second = await fake.submit_job(_job("second"))
    assert second == first, "the id was handed out again"
    if announced_again:
        watcher.expect(JobInfo(job_id=second, name="second", job_state=["PENDING"]))
    seen = [(e.type, e.job.name, e.controller_restart) for e in await watcher.poll_once()]
    assert (VAN, "first", True) in seen, seen
    assert [name for kind, name, _ in seen if kind is A] == ["second"], seen


def _ours(job: JobInfo) -> bool:
    return job.comment == "ours"


async def _shared_cluster(monkeypatch: pytest.MonkeyPatch, others: int = 6) -> tuple[Any, JobWatcher, list[float]]:
    """A cluster where other users' jobs outnumber ours, watched with ``tracked``; a clock the test moves."""
    clock = [1000.0]
    monkeypatch.setattr("slinky.clients.slurm.watcher.time.monotonic", lambda: clock[0])
    fake = fake_cluster(nodes=2)
    for index in range(others):
        await fake.submit_job(_job(f"theirs-{index}", hold=True))
    watcher = JobWatcher(
        fake, state_probe=True, tracked=_ours, full_poll_seconds=3600, idle_full_poll_seconds=3600,
        controller_check_seconds=3600.0,
    )  # fmt: skip
    await watcher.poll_once()  # the first poll: a full list
    return fake, watcher, clock


async def test_while_other_jobs_outnumber_ours_the_probe_asks_for_ours_by_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a shared cluster the probe every interval asks only for the tracked jobs (10,000 other jobs made each
    probe of all of them cost slurmrestd 540 ms); every job's state comes every ``complete_probe_seconds``."""
    fake, watcher, clock = await _shared_cluster(monkeypatch)
    ours = await fake.submit_job(_job("mine", comment="ours"))
    watcher.expect(JobInfo(job_id=ours, name="mine", job_state=["PENDING"], comment="ours"))
    asked: list[object] = []
    probe = fake.job_states

    async def spy(job_ids: Any = None) -> dict[int, list[str]]:
        asked.append(None if job_ids is None else sorted(job_ids))
        return await probe(job_ids)

    monkeypatch.setattr(fake, "job_states", spy)
    clock[0] += 1
    assert _kinds(await watcher.poll_once()) == [(A, ours)]
    fake.tick()
    clock[0] += 1
    started = await watcher.poll_once()
    assert _kinds(started) == [(C, ours)] and started[0].job.is_running
    assert asked == [[ours], [ours]], "ours only, by id"
    stranger = await fake.submit_job(_job("stranger", hold=True))
    clock[0] += 1
    await watcher.poll_once()
    assert stranger not in watcher.jobs, "another user's new job waits for the next complete probe"
    clock[0] += 5
    assert _kinds(await watcher.poll_once()) == [(A, stranger)]
    assert asked[-1] is None, "every 5 s: every job"
    await fake.cancel_job(ours)
    fake.purge_finished()
    clock[0] += 1
    assert _kinds(await watcher.poll_once()) == [(VAN, ours)], "asked for by id and not listed: gone"
    assert watcher.job(ours) is None


async def test_with_no_job_of_ours_the_probe_asks_nothing_between_complete_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake, watcher, clock = await _shared_cluster(monkeypatch)
    fake.calls.clear()
    for _ in range(6):
        clock[0] += 1
        await watcher.poll_once()
    assert fake.calls == ["job_states"], "one complete probe in 6 s (every 5 s); nothing to ask in between"


async def test_caught_up_and_confirmed_on_a_shared_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """``caught_up`` (a retried submit looks for a job its earlier attempt may have made, unannounced) needs a
    probe of every job; ``confirmed`` (the cancel's owner check) trusts only polls that cover the job."""
    fake, watcher, _ = await _shared_cluster(monkeypatch)
    monkeypatch.undo()  # real time for the waits below
    watcher.interval_seconds = 0.01
    unannounced = await fake.submit_job(_job("earlier-attempt", comment="ours"))
    async with watcher.running():
        assert not watcher.covers(unannounced), "not seen yet: a cancel must read it, not trust the view"
        assert not await watcher.confirmed(time.monotonic(), 0.5, unannounced)
        assert await watcher.caught_up(time.monotonic(), 3), "a complete probe was asked for at once"
        assert watcher.job(unannounced) is not None and watcher.covers(unannounced)
        assert await watcher.confirmed(time.monotonic(), 3, unannounced)


async def test_other_users_running_or_waiting_jobs_are_probed_with_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    """``has_waiting_jobs`` and ``running_nodes`` follow every job: another user's job that waits for nodes or
    runs is asked for by id too, so its end frees nodes for the estimate at once (held jobs are left out)."""
    fake, watcher, clock = await _shared_cluster(monkeypatch, others=8)
    theirs = await fake.submit_job(_job("theirs-running"))
    fake.tick()
    clock[0] += 5
    await watcher.poll_once()  # the complete probe finds it running
    assert watcher.jobs[theirs].is_running and watcher.running_nodes()
    await fake.cancel_job(theirs)
    clock[0] += 1
    assert _kinds(await watcher.poll_once()) == [(F, theirs)], "seen ending by the next probe, not in 5 s"
    assert not watcher.running_nodes()


async def _quiet_cluster(monkeypatch: pytest.MonkeyPatch) -> tuple[list[float], Any, JobWatcher, list[int]]:
    """A clock the test moves, one node, 6 pending jobs, and a watcher for which they are many (``quiet_jobs`` 5)."""
    clock = [1000.0]
    monkeypatch.setattr("slinky.clients.slurm.watcher.time.monotonic", lambda: clock[0])
    fake = fake_cluster(nodes=1)
    watcher = JobWatcher(
        fake,
        state_probe=True,
        full_poll_seconds=3600,
        idle_full_poll_seconds=3600,
        controller_check_seconds=1.0,
        quiet_jobs=5,
    )
    return clock, fake, watcher, [await fake.submit_job(_job(f"j-{i}")) for i in range(6)]


async def _poll_later(clock: list[float], fake: Any, watcher: JobWatcher) -> list[JobEvent]:
    """Half a second on, one poll, with only its own calls in ``fake.calls``."""
    clock[0] += 0.5
    fake.calls.clear()
    return await watcher.poll_once()


async def test_with_many_jobs_a_probe_of_every_job_waits_for_slurmctlds_job_counters_to_move(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """From ``QUIET_JOBS`` on, an idle cluster is not probed job by job at every interval: ``GET diag`` first, and
    the probe only when a counter moved (a start, a submit) or ``QUIET_MAX_SECONDS`` passed (a cancel through
    slurmrestd moves no counter on 26.05: seen then)."""
    clock, fake, watcher, jobs = await _quiet_cluster(monkeypatch)
    await watcher.poll_once()  # the first poll: a full list
    fake.calls.clear()
    await watcher.poll_once()
    assert fake.calls == ["diag", "job_states"], "the first probe marks the counters it came after"

    def poll() -> Any:
        return _poll_later(clock, fake, watcher)

    assert await poll() == [] and fake.calls == ["diag"], "nothing moved: no probe"
    assert watcher.requests["probe_skipped"] == 1
    fake.tick()  # the first job starts on the only node
    started = await poll()
    assert _kinds(started) == [(C, jobs[0])] and started[0].job.is_running
    assert fake.calls == ["diag", "job_states", "get_job"], "jobs_started moved: probed at once"
    assert await poll() == [] and fake.calls == ["diag"]
    new = await fake.submit_job(_job("new"))
    assert _kinds(await poll()) == [(A, new)], "jobs_submitted moved"
    await fake.cancel_job(jobs[1])
    for _ in range(3):
        assert await poll() == [] and fake.calls == ["diag"], "a cancel moves no counter"
    cancelled = await poll()  # QUIET_MAX_SECONDS after the last probe: probed anyway
    assert _kinds(cancelled) == [(F, jobs[1])]
    assert fake.calls == ["diag", "job_states"]


async def test_a_waiter_or_a_restart_is_never_answered_by_a_skipped_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """``caught_up`` and ``confirmed`` want a probe asked after them: the counters do not stand in for one. A
    restart seen in ``diag`` (its counters start again) is reconciled with a full list, not skipped."""
    clock, fake, watcher, jobs = await _quiet_cluster(monkeypatch)
    await watcher.poll_once()
    await watcher.poll_once()
    assert await _poll_later(clock, fake, watcher) == [] and fake.calls == ["diag"]
    waiter = asyncio.ensure_future(watcher.caught_up(clock[0], timeout=5))
    await asyncio.sleep(0)
    await _poll_later(clock, fake, watcher)
    assert fake.calls == ["diag", "job_states"], "a waiter: probed"
    assert await waiter
    # A cancel's owner check waits in ``confirmed``; the cancel moved no counter, and the probe is made all the same.
    await fake.cancel_job(jobs[4])
    assert await _poll_later(clock, fake, watcher) == [] and fake.calls == ["diag"]
    confirming = asyncio.ensure_future(watcher.confirmed(clock[0], timeout=5))
    await asyncio.sleep(0)
    assert _kinds(await _poll_later(clock, fake, watcher)) == [(F, jobs[4])]
    assert fake.calls == ["diag", "job_states"], "a confirmation waits: probed"
    assert await confirming
    fake.crash(keep_job_ids=set(jobs[:3]))
    events = await _poll_later(clock, fake, watcher)
    assert fake.calls == ["diag", "list_jobs"], "a restart: the full list at once"
    assert watcher.controller_restarts == 1
    assert sorted(e.job_id for e in events if e.type is VAN and e.controller_restart) == jobs[3:]


async def _full_list_gaps(clock: list[float], fake: Any, watcher: JobWatcher, seconds: float) -> list[float]:
    """Poll every half second for ``seconds``; the seconds between the full lists made meanwhile."""
    times: list[float] = []
    for _ in range(int(seconds * 2)):
        before = watcher.requests["full_list"]
        await _poll_later(clock, fake, watcher)
        if watcher.requests["full_list"] > before:
            times.append(clock[0])
    return [b - a for a, b in itertools.pairwise(times)]


async def test_with_many_jobs_full_lists_for_pending_reasons_back_off_while_they_bring_no_news(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """From ``quiet_jobs`` on, a full list that brought nothing about a pending job doubles the wait for the next one
    that pending reasons ask for, up to ``idle_full_poll_seconds``; news of a pending job, or a job announced, brings
    the wait back to ``full_poll_seconds``."""
    clock, fake, watcher, jobs = await _quiet_cluster(monkeypatch)
    watcher.full_poll_seconds, watcher.idle_full_poll_seconds = 2.0, 30.0
    await watcher.poll_once()  # the first full list: every job is news
    assert await _full_list_gaps(clock, fake, watcher, 95) == [4.0, 8.0, 16.0, 30.0, 30.0]
    await fake.update_job(jobs[2], JobDescMsg(hold=True))  # a pending job's reason changes (JobHeldUser)
    gaps = await _full_list_gaps(clock, fake, watcher, 70)
    assert gaps[:3] == [2.0, 4.0, 8.0], "the list that saw the hold set the wait back to 2 s"
    watcher.expect(await fake.get_job(await fake.submit_job(_job("announced"))))
    assert (await _full_list_gaps(clock, fake, watcher, 10))[:2] == [2.0, 4.0]


async def test_below_quiet_jobs_pending_reasons_are_listed_every_full_poll_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock, fake, watcher, _ = await _quiet_cluster(monkeypatch)
    watcher.full_poll_seconds, watcher.idle_full_poll_seconds, watcher.quiet_jobs = 2.0, 30.0, 50
    await watcher.poll_once()
    assert set(await _full_list_gaps(clock, fake, watcher, 30)) == {2.0}
