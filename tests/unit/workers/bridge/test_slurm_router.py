"""``workers.bridge.slurm_router``: which job changes become ``job_event`` signals to the owning workflow."""

from __future__ import annotations

import asyncio
from typing import Any

from activities import slurm as slurm_activities
from slinky.bridge.models.workload import JobRef, job_comment_for
from slinky.clients.slurm import JobDescMsg, JobInfo
from tests.unit.slurm.helpers import fake_cluster
from workers.bridge import slurm_router
from workers.bridge.slurm_router import SlurmJobRouter

WID = "workload/ns/uid"


class _Handle:
    def __init__(self, sent: list[tuple[str, str, Any]], workflow_id: str) -> None:
        self.sent, self.workflow_id = sent, workflow_id

    async def signal(self, name: str, arg: Any) -> None:
        self.sent.append((self.workflow_id, name, arg))


class _Temporal:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Any]] = []

    def get_workflow_handle(self, workflow_id: str) -> _Handle:
        return _Handle(self.sent, workflow_id)


def _job() -> JobDescMsg:
    return JobDescMsg(name="j", partition="p", flags=["EXTERNAL_JOB"], comment=job_comment_for(WID))


async def _poll(router: SlurmJobRouter) -> None:
    await router.watcher.poll_once()
    for task in list(router._tasks):
        await task


async def test_an_immediate_allocation_is_not_signalled_but_its_end_is() -> None:
    fake, temporal = fake_cluster(), _Temporal()
    router = SlurmJobRouter(fake, temporal)  # type: ignore[arg-type]
    await _poll(router)
    job_id = await fake.allocate_job(_job())
    router.expect(await fake.get_job(job_id))
    assert router.live_job_of(WID) is not None and router.live_job_of(WID).job_id == job_id  # type: ignore[union-attr]
    await _poll(router)
    assert temporal.sent == [], "the submit result gave the workflow its nodes"
    await fake.cancel_job(job_id)
    await _poll(router)
    assert [(w, n, e.state) for w, n, e in temporal.sent] == [(WID, "job_event", "CANCELLED")]
    assert router.live_job_of(WID) is None


async def test_a_queued_job_is_signalled_when_it_starts() -> None:
    fake, temporal = fake_cluster(), _Temporal()
    router = SlurmJobRouter(fake, temporal)  # type: ignore[arg-type]
    await _poll(router)
    job_id = await fake.submit_job(_job())
    router.expect(JobInfo(job_id=job_id, name="j", job_state=["PENDING"], comment=job_comment_for(WID)))
    await _poll(router)
    assert temporal.sent == [], "pending, not evaluated yet: nothing to tell"
    fake.tick()
    await _poll(router)
    assert [(n, e.state, e.nodes) for _, n, e in temporal.sent] == [("job_event", "RUNNING", ["n-1"])]


async def test_a_controller_restart_signals_each_lost_job_to_its_workflow_once_with_the_cause() -> None:
    fake, temporal = fake_cluster(nodes=4), _Temporal()
    router = SlurmJobRouter(fake, temporal, controller_check_seconds=0.0)  # type: ignore[arg-type]

    def job(wid: str, submission: int) -> JobDescMsg:
        return JobDescMsg(name="j", partition="p", flags=["EXTERNAL_JOB"], comment=job_comment_for(wid, submission))

    saved = await fake.allocate_job(job("workload/ns/saved", 1))
    lost = await fake.allocate_job(job("workload/ns/lost", 1))
    await _poll(router)
    unseen = await fake.allocate_job(job("workload/ns/unseen", 3))
    router.expect(await fake.get_job(unseen))
    temporal.sent.clear()
    fake.crash(keep_job_ids={saved})
    reused = await fake.submit_job(job("workload/ns/other", 1))
    assert reused == lost
    await _poll(router)
    signalled = sorted((w, e.job_id, e.state, e.submission, e.cause) for w, _, e in temporal.sent)
    assert signalled == [
        ("workload/ns/lost", lost, "VANISHED", 1, "controller restart"),
        ("workload/ns/unseen", unseen, "VANISHED", 3, "controller restart"),
    ]
    assert router.live_job_of("workload/ns/lost") is None
    assert router.live_job_of("workload/ns/other", 1) is not None
    assert router.live_job_of("workload/ns/saved", 2) is None, "submission 1 is not the one asked for"


async def test_the_index_forgets_a_vanished_submission_but_not_the_next_one_with_the_same_id() -> None:
    """A workflow's lost job and its resubmission can carry the same id: the late VANISHED of the first must not
    drop the second from the index (the submit would then create a third)."""
    fake, temporal = fake_cluster(), _Temporal()
    router = SlurmJobRouter(fake, temporal, controller_check_seconds=0.0)  # type: ignore[arg-type]
    first = await fake.submit_job(
        JobDescMsg(name="j", partition="p", flags=["EXTERNAL_JOB"], comment=job_comment_for(WID, 1))
    )
    await _poll(router)
    fake.crash(keep_job_ids=set())
    second = await fake.submit_job(
        JobDescMsg(name="j", partition="p", flags=["EXTERNAL_JOB"], comment=job_comment_for(WID, 2))
    )
    router.expect(await fake.get_job(second))
    assert second == first
    await _poll(router)
    live = router.live_job_of(WID, 2)
    assert live is not None and live.job_id == second
    assert [(e.state, e.submission) for _, _, e in temporal.sent] == [("VANISHED", 1)]


async def _poll_settled(router: SlurmJobRouter, between: Any = None) -> None:
    """Poll, then keep polling (as the watcher's loop does) until every signal it caused is done; ``between``
    runs once after the first poll (what happens in Slurm meanwhile)."""
    await router.watcher.poll_once()
    if between is not None:
        await between()
    for _ in range(500):
        if not router._tasks:
            return
        await asyncio.sleep(0.01)
        await router.watcher.poll_once()
    raise AssertionError("signals did not settle")


async def test_a_live_job_whose_lifecycle_has_ended_wakes_the_garbage_collector() -> None:
    """slurmctld saves cancels late: after a crash a job its owner cancelled comes back RUNNING, and the signal
    finds no lifecycle. The garbage collector is asked for a pass now instead of in a minute."""
    from temporalio.service import RPCError, RPCStatusCode

    class _Closed(_Temporal):
        def get_workflow_handle(self, workflow_id: str) -> Any:
            class _Gone:
                async def signal(self, name: str, arg: Any) -> None:
                    raise RPCError("workflow execution already completed", RPCStatusCode.NOT_FOUND, b"")

            return _Gone()

    fake, woken = fake_cluster(), []
    router = SlurmJobRouter(fake, _Closed(), request_gc=lambda: woken.append(1))  # type: ignore[arg-type]
    await _poll_settled(router)
    job_id = await fake.submit_job(_job())
    fake.tick()
    await _poll_settled(router)
    assert woken, "a RUNNING job nobody can be told of (still live at the next poll)"
    woken.clear()
    await fake.cancel_job(job_id)
    await _poll_settled(router)
    assert not woken, "a finished job needs nothing"
    # Seen RUNNING by a poll, cancelled by its lifecycle just after it, which then ended: no alarm.
    second = await fake.submit_job(_job())
    fake.tick()

    async def cancelled_meanwhile() -> None:
        await fake.cancel_job(second)

    await _poll_settled(router, cancelled_meanwhile)
    assert not woken, "the next poll shows it cancelled"


async def test_a_controller_restart_asks_the_garbage_collector_for_a_pass() -> None:
    """A job whose owner cancelled it just before a crash comes back while the owner finishes its cleanup."""
    fake, temporal, asked = fake_cluster(), _Temporal(), []
    router = SlurmJobRouter(fake, temporal, controller_check_seconds=0.0, request_gc=lambda: asked.append(1))  # type: ignore[arg-type]
    await fake.submit_job(_job())
    await _poll(router)
    assert asked == []
    fake.crash(keep_job_ids=set())
    await _poll(router)
    assert asked == [1]
    await fake.submit_job(_job())
    await _poll(router)
    assert asked == [1], "once per restart"


async def test_a_restarted_worker_tells_no_lifecycle_its_job_is_still_pending() -> None:
    """The first list after a start: a running job is told (its lifecycle may wait for it), a pending one is not
    (5,000 such signals made a restarted worker replay 5,000 lifecycles at once); its start is told later."""
    fake = fake_cluster(nodes=2)
    running = await fake.submit_job(
        JobDescMsg(name="r", partition="p", flags=["EXTERNAL_JOB"], comment=job_comment_for("wf-running"),
                   minimum_nodes=2)
    )  # fmt: skip
    fake.tick()
    pending = await fake.submit_job(
        JobDescMsg(name="q", partition="p", flags=["EXTERNAL_JOB"], comment=job_comment_for("wf-pending"))
    )
    fake.tick()
    assert (await fake.get_job(pending)).state_reason == "Resources"
    temporal = _Temporal()
    router = SlurmJobRouter(fake, temporal)  # type: ignore[arg-type]
    await _poll(router)
    assert [(w, e.state) for w, _, e in temporal.sent] == [("wf-running", "RUNNING")]
    assert router.live_job_of("wf-pending") is not None, "the index knows it all the same"
    await fake.cancel_job(running)
    fake.tick()
    await _poll(router)
    assert ("wf-pending", "RUNNING") in [(w, e.state) for w, _, e in temporal.sent]
    # A job that arrives pending later (not in the first list) is still news when its reason says something.
    await fake.submit_job(
        JobDescMsg(name="q2", partition="p", flags=["EXTERNAL_JOB"], comment=job_comment_for("wf-later"),
                   minimum_nodes=2)
    )  # fmt: skip
    fake.tick()
    await _poll(router)
    assert ("wf-later", "PENDING") in [(w, e.state) for w, _, e in temporal.sent]


async def test_the_garbage_collectors_view_is_the_watchers_while_fresh() -> None:
    fake = fake_cluster()
    router = SlurmJobRouter(fake, _Temporal())  # type: ignore[arg-type]
    assert router.jobs_seen_within(30) is None, "no poll answered yet"
    job_id = await fake.submit_job(_job())
    await _poll(router)
    view = router.jobs_seen_within(30)
    assert view is not None
    jobs, asked = view
    assert [j.job_id for j in jobs] == [job_id] and jobs[0].comment == job_comment_for(WID)
    assert asked == router.watcher.answered_since, "with the time its poll was asked (the GC's lost-job check)"
    assert router.jobs_seen_within(0) is None, "older than asked: Slurm's own list instead"


async def test_a_job_its_lifecycle_cancels_ends_without_a_signal_but_a_users_cancel_is_told(monkeypatch: Any) -> None:
    # The lifecycle goes on without waiting for its own cancel's end; a signal of it arriving meanwhile only failed
    # the workflow task that completed the lifecycle (UnhandledCommand) and ran it again.
    monkeypatch.setattr(slurm_activities, "CONFIRM_SECONDS", 0.01)
    fake, temporal = fake_cluster(), _Temporal()
    router = SlurmJobRouter(fake, temporal)  # type: ignore[arg-type]
    await _poll(router)
    own, users = await fake.submit_job(_job()), await fake.submit_job(_job())
    await _poll(router)
    temporal.sent.clear()
    assert await slurm_activities.cancel_owned_job(fake, JobRef(job_id=own, workflow_id=WID, submission=None), router)
    await fake.cancel_job(users)  # scancel by someone else: the lifecycle must hear of it
    await _poll(router)
    assert [(e.job_id, e.state) for _, _, e in temporal.sent] == [(users, "CANCELLED")]
    assert router._cancelling == {}, "forgotten once its end was seen"


def test_a_cancel_whose_end_is_never_seen_is_forgotten_after_a_while(monkeypatch: Any) -> None:
    router = SlurmJobRouter(fake_cluster(), _Temporal())  # type: ignore[arg-type]
    clock = [1000.0]
    monkeypatch.setattr(slurm_router.time, "monotonic", lambda: clock[0])
    router.cancelling(JobRef(job_id=1, workflow_id=WID))
    clock[0] += slurm_router.CANCELLING_SECONDS + 1
    router.cancelling(JobRef(job_id=2, workflow_id=WID))
    assert list(router._cancelling) == [2]
