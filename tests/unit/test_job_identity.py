"""Job identity: a job is named by id AND owner (workflow, submission) before the bridge acts on it.

slurmctld reuses job ids after a crash (slurm.md §9): cancel, update and read check the job's ``comment`` on a
fresh read, and a job that became another workload's is spared, never cancelled.
"""

from __future__ import annotations

import pytest
from temporalio.testing import ActivityEnvironment

from activities.slurm import SlurmActivities, cancel_owned_job
from slinky import telemetry
from slinky.bridge.models.jobspec import SlurmJobSpec
from slinky.bridge.models.workload import (
    JobRef,
    SubmitInput,
    UpdateJobInput,
    job_comment_for,
    job_owner_from_comment,
    owns_job,
)
from slinky.clients.slurm import FakeSlurmClient, JobDescMsg, JobInfo
from tests.unit.slurm.helpers import fake_cluster
from tests.unit.test_submit_activity import Gate, Index

WID = "workload/ns/uid"
SPEC = SlurmJobSpec(pods=("ns/p",), partition="p", min_nodes=1, max_nodes=1)


def test_the_comment_names_workflow_and_submission_and_reads_back() -> None:
    assert job_comment_for(WID, 2) == '{"slinkyWorkflowId":"workload/ns/uid","slinkySubmission":2}'
    assert job_owner_from_comment(job_comment_for(WID, 2)) == (WID, 2)
    assert job_owner_from_comment(job_comment_for(WID)) == (WID, None)
    for junk in (None, "", "x", "[1]", '{"slinkyWorkflowId": 3}', '{"other": "a"}'):
        assert job_owner_from_comment(junk) is None


@pytest.mark.parametrize(
    ("comment", "submission", "owned"),
    [
        (job_comment_for(WID, 1), 1, True),
        (job_comment_for(WID, 1), 2, False),  # an earlier submission of the same workflow
        (job_comment_for("workload/ns/other", 1), 1, False),  # the id was reused by another workload
        (job_comment_for(WID), 2, True),  # submitted by a bridge that did not number submissions
        (None, 1, False),  # a job that is not the bridge's
    ],
)
def test_ownership(comment: str | None, submission: int, owned: bool) -> None:
    assert owns_job(comment, WID, submission) is owned


async def _job(fake: FakeSlurmClient, comment: str) -> int:
    return await fake.allocate_job(JobDescMsg(name="j", partition="p", flags=["EXTERNAL_JOB"], comment=comment))


async def test_a_job_of_ours_is_cancelled() -> None:
    fake = fake_cluster()
    job_id = await _job(fake, job_comment_for(WID, 1))
    assert await cancel_owned_job(fake, JobRef(job_id=job_id, workflow_id=WID, submission=1))
    assert (await fake.get_job(job_id)).state == "CANCELLED"


@pytest.mark.parametrize(
    "comment",
    [job_comment_for("workload/ns/other", 1), job_comment_for(WID, 2), ""],
    ids=["other-workload", "resubmitted", "not-a-bridge-job"],
)
async def test_a_reused_id_is_spared_and_counted(comment: str) -> None:
    fake = fake_cluster()
    mine = await _job(fake, job_comment_for(WID, 1))
    fake.crash(keep_job_ids=set())
    theirs = await _job(fake, comment)
    assert theirs == mine
    spared = telemetry.REGISTRY.get_sample_value("slinky_bridge_foreign_jobs_spared_total") or 0.0
    fake.calls.clear()
    assert not await cancel_owned_job(fake, JobRef(job_id=mine, workflow_id=WID, submission=1))
    assert fake.calls == ["get_job"], "read, never cancelled"
    assert (await fake.get_job(theirs)).state == "RUNNING"
    assert telemetry.REGISTRY.get_sample_value("slinky_bridge_foreign_jobs_spared_total") == spared + 1


async def test_a_gone_or_finished_job_needs_no_cancel() -> None:
    fake = fake_cluster()
    assert not await cancel_owned_job(fake, JobRef(job_id=99, workflow_id=WID))
    job_id = await _job(fake, job_comment_for(WID, 1))
    await fake.cancel_job(job_id)
    fake.calls.clear()
    assert not await cancel_owned_job(fake, JobRef(job_id=job_id, workflow_id=WID, submission=1))
    assert fake.calls == ["get_job"]


class Confirmed(Index):
    """The leader's index once its watcher confirmed a poll and a controller check: the view answers for a read."""

    def __init__(self, seen: dict[int, JobInfo], confirmed: bool = True) -> None:
        super().__init__()
        self.seen, self.is_confirmed = seen, confirmed

    async def confirmed(self, since: float, timeout: float, job_id: int | None = None) -> bool:
        return self.is_confirmed

    def job(self, job_id: int) -> JobInfo | None:
        return self.seen.get(job_id)

    def seen_within(self, seconds: float) -> bool:
        return self.is_confirmed


async def test_with_a_confirmed_view_the_cancel_reads_no_job() -> None:
    fake = fake_cluster()
    job_id = await _job(fake, job_comment_for(WID, 1))
    index = Confirmed({job_id: await fake.get_job(job_id)})
    fake.calls.clear()
    assert await cancel_owned_job(fake, JobRef(job_id=job_id, workflow_id=WID, submission=1), index)
    assert fake.calls == ["cancel_job"], "one job call: the cancel"
    assert (await fake.get_job(job_id)).state == "CANCELLED"


async def test_a_confirmed_view_spares_a_reused_id_and_skips_a_gone_job() -> None:
    fake = fake_cluster()
    mine = await _job(fake, job_comment_for(WID, 1))
    fake.crash(keep_job_ids=set())
    theirs = await _job(fake, job_comment_for("workload/ns/other", 1))
    index = Confirmed({theirs: await fake.get_job(theirs)})
    spared = telemetry.REGISTRY.get_sample_value("slinky_bridge_foreign_jobs_spared_total") or 0.0
    fake.calls.clear()
    assert not await cancel_owned_job(fake, JobRef(job_id=mine, workflow_id=WID, submission=1), index)
    assert not await cancel_owned_job(fake, JobRef(job_id=12345, workflow_id=WID, submission=1), index)
    assert fake.calls == [], "the view answered both: no read, no cancel"
    assert (await fake.get_job(theirs)).state == "RUNNING"
    assert telemetry.REGISTRY.get_sample_value("slinky_bridge_foreign_jobs_spared_total") == spared + 1


async def test_an_unconfirmed_view_is_not_trusted_the_job_is_read() -> None:
    fake = fake_cluster()
    job_id = await _job(fake, job_comment_for(WID, 1))
    stale = Confirmed({}, confirmed=False)  # the watcher is stuck: its view says nothing of the job
    fake.calls.clear()
    assert await cancel_owned_job(fake, JobRef(job_id=job_id, workflow_id=WID, submission=1), stale)
    assert fake.calls == ["get_job", "cancel_job"]


async def test_read_and_update_of_a_reused_id_say_the_job_is_gone() -> None:
    fake = fake_cluster()
    acts = SlurmActivities(fake, Index())
    mine = await fake.submit_job(
        JobDescMsg(name="j", partition="p", flags=["EXTERNAL_JOB"], comment=job_comment_for(WID, 1))
    )
    fake.crash(keep_job_ids=set())
    await fake.submit_job(
        JobDescMsg(name="j", partition="p", flags=["EXTERNAL_JOB"], comment=job_comment_for("w/x", 1))
    )
    ref = JobRef(job_id=mine, workflow_id=WID, submission=1)
    env = ActivityEnvironment()
    event = await env.run(acts.get_job, ref)
    assert (event.state, event.submission) == ("VANISHED", 1)
    update = await env.run(acts.update_pending_job, UpdateJobInput(job=ref, spec=SPEC))
    assert not update.updated and "another job" in update.error_message
    assert "update_job" not in fake.calls


async def test_readoption_allocates_exactly_the_pods_nodes_at_once_without_the_gate() -> None:
    fake, gate = fake_cluster(nodes=3), Gate(open_=False)
    acts = SlurmActivities(fake, Index(), gate)
    result = await ActivityEnvironment().run(
        acts.submit_placeholder_job, SubmitInput(workflow_id=WID, spec=SPEC, submission=2, nodes=["n-3"])
    )
    assert result.job_id is not None and result.nodes == ["n-3"]
    assert fake.calls == ["allocate_job", "get_job"] and gate.asked == []
    job = await fake.get_job(result.job_id)
    assert job.is_running and job.comment == job_comment_for(WID, 2)


async def test_readoption_on_nodes_given_to_another_job_queues_for_exactly_those_nodes() -> None:
    fake = fake_cluster(nodes=2)
    holder = await fake.allocate_job(
        JobDescMsg(name="x", partition="p", flags=["EXTERNAL_JOB"], required_nodes=["n-2"])
    )
    fake.calls.clear()
    acts = SlurmActivities(fake, Index(), Gate(open_=True))
    result = await ActivityEnvironment().run(
        acts.submit_placeholder_job, SubmitInput(workflow_id=WID, spec=SPEC, submission=2, nodes=["n-2"])
    )
    assert result.job_id is not None and (result.nodes, result.error_number) == ([], 2016)
    assert fake.calls == ["allocate_job", "submit_job"]
    fake.tick()
    assert (await fake.get_job(result.job_id)).is_pending, "n-1 is free, but the job wants the pods' node"
    await fake.cancel_job(holder)
    fake.tick()
    job = await fake.get_job(result.job_id)
    assert job.is_running and job.nodes == "n-2"


async def test_readoption_outranks_a_waiting_job_as_on_the_real_slurm() -> None:
    """Measured on 26.05: with a job waiting for nodes, an immediate allocation of a free node is refused (2013)
    unless it has the top priority; the pods run there already, so the re-adoption asks for it."""
    fake = fake_cluster(nodes=2)
    await fake.allocate_job(JobDescMsg(name="x", partition="p", flags=["EXTERNAL_JOB"], required_nodes=["n-1"]))
    await fake.submit_job(JobDescMsg(name="waits", partition="p", flags=["EXTERNAL_JOB"], minimum_nodes=2))
    fake.calls.clear()
    result = await ActivityEnvironment().run(
        SlurmActivities(fake, Index()).submit_placeholder_job,
        SubmitInput(workflow_id=WID, spec=SPEC, submission=2, nodes=["n-2"]),
    )
    assert result.nodes == ["n-2"] and fake.calls == ["allocate_job", "get_job"]


async def test_the_recheck_reads_the_job_from_a_fresh_view_and_asks_slurm_only_otherwise() -> None:
    """The safety re-check of every lifecycle every few minutes: from the watcher's view when it is fresh and lists
    the job (no Slurm call), else a read; only Slurm says a job is gone."""
    fake = fake_cluster()
    mine = await _job(fake, job_comment_for(WID, 1))
    ref = JobRef(job_id=mine, workflow_id=WID, submission=1)
    fresh = SlurmActivities(fake, Confirmed({mine: await fake.get_job(mine)}))
    fake.calls.clear()
    event = await ActivityEnvironment().run(fresh.get_job, ref)
    assert (event.job_id, event.state, fake.calls) == (mine, "RUNNING", [])

    stale = SlurmActivities(fake, Confirmed({mine: await fake.get_job(mine)}, confirmed=False))
    await fake.cancel_job(mine)
    fake.calls.clear()
    event = await ActivityEnvironment().run(stale.get_job, ref)
    assert (event.state, fake.calls) == ("CANCELLED", ["get_job"]), "a stale view is not trusted"

    unlisted = SlurmActivities(fake, Confirmed({}))
    fake.calls.clear()
    gone = await ActivityEnvironment().run(unlisted.get_job, JobRef(job_id=4242, workflow_id=WID, submission=1))
    assert (gone.state, fake.calls) == ("VANISHED", ["get_job"]), "not in the view: Slurm is asked"

    theirs = JobInfo(job_id=mine, name="j", job_state=["RUNNING"], comment=job_comment_for("workload/ns/other", 1))
    reused = SlurmActivities(fake, Confirmed({mine: theirs}))
    assert (await ActivityEnvironment().run(reused.get_job, ref)).state == "VANISHED", "another workload's now"
