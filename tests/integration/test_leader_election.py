"""Leader election (``slinky/clients/leader.py``) on the real apiserver's coordination.k8s.io/v1 Leases.

Short durations (lease 2 s, renew deadline 1.2 s, retry 0.2 s) keep the tests quick; the rules are the same as
with the production defaults (15 / 10 / 2 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from slinky import wellknown
from slinky.clients.errors import KubeNotFound
from slinky.clients.kube import KubeClient
from slinky.clients.leader import LeaderElector, LeadershipLost
from slinky.dev import stack
from tests.integration.devstack import REPO, worker_killed
from tests.integration.waiting import eventually

pytestmark = pytest.mark.integration

NAMESPACE = "default"
Replicas = dict[str, subprocess.Popen[bytes]]


@pytest.fixture
async def kube(dev_env: dict[str, str]) -> AsyncIterator[KubeClient]:
    async with KubeClient.from_kubeconfig(dev_env["KUBECONFIG"]) as client:
        yield client


@pytest.fixture
async def lease(kube: KubeClient) -> AsyncIterator[str]:
    name = f"le-test-{uuid.uuid4().hex[:6]}"
    yield name
    try:
        await kube.delete(f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{name}")
    except KubeNotFound:
        pass


def candidate(kube: KubeClient, lease: str, identity: str) -> LeaderElector:
    return LeaderElector(
        kube,
        namespace=NAMESPACE,
        name=lease,
        identity=identity,
        lease_seconds=2.0,
        renew_deadline_seconds=1.2,
        retry_seconds=0.2,
    )


async def spec_of(kube: KubeClient, lease: str) -> dict[str, object]:
    obj = await kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{lease}")
    spec: dict[str, object] = obj["spec"]
    return spec


async def test_one_leader_while_it_renews_then_a_graceful_handover(kube: KubeClient, lease: str) -> None:
    a, b = candidate(kube, lease, "a"), candidate(kube, lease, "b")
    assert await asyncio.wait_for(a.acquire(), 5)
    renewing = asyncio.create_task(a.hold())
    waiting = asyncio.create_task(b.acquire())
    await asyncio.sleep(3.0)  # longer than the lease: only renewals keep b out
    assert not waiting.done() and not renewing.done()
    assert (await spec_of(kube, lease))["holderIdentity"] == "a"

    renewing.cancel()
    await a.release()
    assert await asyncio.wait_for(waiting, 1.5), "a released: b takes over at its next try, before the lease ends"
    spec = await spec_of(kube, lease)
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)


async def test_a_silent_leader_is_replaced_after_the_lease_and_then_steps_down(kube: KubeClient, lease: str) -> None:
    a, b = candidate(kube, lease, "a"), candidate(kube, lease, "b")
    assert await a.acquire()
    # a stops renewing (a frozen or partitioned process): b waits one lease, then takes over.
    assert await asyncio.wait_for(b.acquire(), 6)
    assert (await spec_of(kube, lease))["holderIdentity"] == "b"
    # a wakes up: its next renewal finds b, and it must stop leading.
    with pytest.raises(LeadershipLost, match="held by b"):
        await asyncio.wait_for(a.hold(), 5)
    assert not a.is_leader


async def test_racing_candidates_never_both_win(kube: KubeClient, lease: str) -> None:
    candidates = [candidate(kube, lease, f"c{i}") for i in range(4)]
    won = await asyncio.gather(*(c._try_acquire_or_renew() for c in candidates))
    assert sum(won) == 1
    winner = candidates[won.index(True)]
    assert (await spec_of(kube, lease))["holderIdentity"] == winner.identity


async def test_acquire_returns_false_when_stopped(kube: KubeClient, lease: str) -> None:
    a, b = candidate(kube, lease, "a"), candidate(kube, lease, "b")
    assert await a.acquire()
    renewing = asyncio.create_task(a.hold())
    stop = asyncio.Event()
    waiting = asyncio.create_task(b.acquire(stop))
    await asyncio.sleep(0.5)
    stop.set()
    assert await asyncio.wait_for(waiting, 2) is False
    renewing.cancel()


async def test_a_standby_reads_the_leaders_annotations_while_it_leads(kube: KubeClient, lease: str) -> None:
    """The holder writes its annotations on the Lease; a standby's tries read them, and stop trusting them once the
    holder released the Lease or went silent for a whole lease."""
    key = wellknown.ANNOTATION_SUBMIT_RELAY
    a = candidate(kube, lease, "a")
    a.annotations = {key: "10.0.0.1:9000"}
    b = candidate(kube, lease, "b")
    assert await a.acquire()
    assert a.holder_annotation(key) is None, "never its own"
    assert not await b._try_acquire_or_renew()
    assert b.holder_annotation(key) == "10.0.0.1:9000"
    await a.release()
    assert await b._try_acquire_or_renew(), "released: b takes it at its next try"
    assert b.holder_annotation(key) is None
    c = candidate(kube, lease, "c")
    assert not await c._try_acquire_or_renew()
    assert (await kube.get(a.path))["metadata"]["annotations"][key] == "10.0.0.1:9000", "still on the Lease"
    assert c.holder_annotation(key) is None, "but written by a, not by b, the holder"
    b.annotations = {key: "10.0.0.2:9000"}
    assert await b._try_acquire_or_renew()
    assert not await c._try_acquire_or_renew()
    assert c.holder_annotation(key) == "10.0.0.2:9000"
    await asyncio.sleep(2.1)  # b never renews: after a whole lease c no longer trusts what it read
    assert c.holder_annotation(key) is None


# --------------------------------------------------------------------------- two bridge workers, one leader
def start_replica(lease: str, identity: str, log: Path, relay_port: int | None = None) -> subprocess.Popen[bytes]:
    """A bridge worker as the dev stack starts it, plus leader election (short durations), no metrics port; with
    ``relay_port``, the submit relay on 127.0.0.1 at that port."""
    env = {k: v for k, v in stack.env_values().items() if k != "PATH"}
    env.update({"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONUNBUFFERED": "1", "HOME": str(Path.home())})
    env.update(
        {
            "SLINKY_LEADER_ELECTION__ENABLED": "true",
            "SLINKY_LEADER_ELECTION__NAMESPACE": NAMESPACE,
            "SLINKY_LEADER_ELECTION__NAME": lease,
            "SLINKY_LEADER_ELECTION__IDENTITY": identity,
            "SLINKY_LEADER_ELECTION__LEASE_SECONDS": "3",
            "SLINKY_LEADER_ELECTION__RENEW_DEADLINE_SECONDS": "2",
            "SLINKY_LEADER_ELECTION__RETRY_SECONDS": "0.5",
        }
    )
    if relay_port is not None:
        env.update(
            {"SLINKY_WORKER__SUBMIT_RELAY_PORT": str(relay_port), "SLINKY_WORKER__SUBMIT_RELAY_HOST": "127.0.0.1"}
        )
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "workers"], cwd=REPO, env=env, stdout=out, stderr=out)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get_json(kubeconfig: str, *args: str) -> dict[str, Any]:
    """``kubectl get ARGS -o json``, or {} when the object does not exist."""
    out = subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, "get", *args, "-o", "json"], capture_output=True, text=True
    )
    return dict(json.loads(out.stdout)) if out.returncode == 0 else {}


def holder(kubeconfig: str, lease: str) -> str:
    return str(get_json(kubeconfig, "lease", "-n", NAMESPACE, lease).get("spec", {}).get("holderIdentity") or "")


def bound_node(kubeconfig: str, namespace: str, name: str) -> str:
    return str(get_json(kubeconfig, "pod", "-n", namespace, name).get("spec", {}).get("nodeName") or "")


def create_pod(kubeconfig: str, namespace: str, name: str, seconds: int | None = None) -> None:
    """A bridge pod; with ``seconds`` the node agent runs it that long, and it ends Succeeded."""
    annotations = f", annotations: {{{wellknown.ANNOTATION_SIM_RUN_SECONDS}: '{seconds}'}}" if seconds else ""
    manifest = f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}{annotations}}}
spec:
  schedulerName: {wellknown.SCHEDULER_NAME}
  restartPolicy: Never
  containers: [{{name: c, image: busybox}}]
"""
    kubectl = ["kubectl", "--kubeconfig", kubeconfig]
    subprocess.run([*kubectl, "apply", "-f", "-"], input=manifest, text=True, check=True, capture_output=True)


def create_pods(kubeconfig: str, namespace: str, names: list[str], seconds: int) -> None:
    """Bridge pods in one request each, sent together (a burst), that run ``seconds`` and end Succeeded."""
    kubectl = ["kubectl", "--kubeconfig", kubeconfig, "apply", "-f", "-"]
    procs = []
    for name in names:
        manifest = f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}, annotations: {{{wellknown.ANNOTATION_SIM_RUN_SECONDS}: '{seconds}'}}}}
spec:
  schedulerName: {wellknown.SCHEDULER_NAME}
  restartPolicy: Never
  containers: [{{name: c, image: busybox}}]
"""
        proc = subprocess.Popen(kubectl, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        assert proc.stdin is not None
        proc.stdin.write(manifest)
        proc.stdin.close()
        procs.append(proc)
    assert all(proc.wait(60) == 0 for proc in procs)


def test_a_standby_replica_takes_over_when_the_leader_is_killed(
    dev_env: dict[str, str], lease: str, tmp_path: Path
) -> None:
    """Two bridge replicas with leader election: only the leader binds; kill -9 it and the standby leads."""
    kubeconfig = dev_env["KUBECONFIG"]
    namespace = f"le-{uuid.uuid4().hex[:6]}"
    kubectl = ["kubectl", "--kubeconfig", kubeconfig]
    subprocess.run([*kubectl, "create", "namespace", namespace], check=True, capture_output=True)
    replicas: list[subprocess.Popen[bytes]] = []
    try:
        with worker_killed():  # the dev stack's own worker (no leader election) steps aside meanwhile
            first = start_replica(lease, "first", tmp_path / "first.log")
            replicas.append(first)
            eventually(lambda: holder(kubeconfig, lease) == "first", 30, "the first replica leads")
            replicas.append(start_replica(lease, "second", tmp_path / "second.log"))
            create_pod(kubeconfig, namespace, "before")
            eventually(lambda: bound_node(kubeconfig, namespace, "before"), 30, "bound by the leader")
            assert holder(kubeconfig, lease) == "first", "the standby never took the lease while the leader renewed"

            first.kill()  # SIGKILL: no release; the standby waits one lease (3 s) and takes over
            first.wait(10)
            eventually(lambda: holder(kubeconfig, lease) == "second", 30, "the standby leads")
            create_pod(kubeconfig, namespace, "after")
            eventually(lambda: bound_node(kubeconfig, namespace, "after"), 60, "bound by the new leader")
            subprocess.run([*kubectl, "delete", "pod", "-n", namespace, "before", "after", "--wait=false"], check=True)
            eventually(
                lambda: (
                    not bound_node(kubeconfig, namespace, "before") and not bound_node(kubeconfig, namespace, "after")
                ),
                60,
                "both lifecycles cleaned up by the new leader (finalizers removed, pods gone)",
            )
            second = replicas[1]
            second.send_signal(signal.SIGTERM)  # graceful: it releases the lease
            assert second.wait(30) == 0
            assert holder(kubeconfig, lease) == ""
    finally:
        for proc in replicas:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        subprocess.run([*kubectl, "delete", "namespace", namespace, "--wait=false"], capture_output=True)


def pods_json(kubeconfig: str, namespace: str) -> list[dict[str, Any]]:
    return list(get_json(kubeconfig, "pods", "-n", namespace).get("items", []))


def phases(kubeconfig: str, namespace: str) -> list[str]:
    return [p["status"].get("phase", "") for p in pods_json(kubeconfig, namespace)]


async def lifecycle_workers(address: str, namespace: str) -> dict[str, set[str]]:
    """Per lifecycle of the namespace, the identities (``pid@host``) of the workers that completed its tasks."""
    temporal = await Client.connect(address)
    out: dict[str, set[str]] = {}
    async for wf in temporal.list_workflows(f"WorkflowType = 'WorkloadWorkflow' AND SlinkyNamespace = '{namespace}'"):
        history = await temporal.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
        out[wf.id] = {
            e.workflow_task_completed_event_attributes.identity
            for e in history.events
            if e.HasField("workflow_task_completed_event_attributes")
        }
    return out


@contextlib.contextmanager
def two_replicas(kubeconfig: str, lease: str, tmp_path: Path) -> Iterator[tuple[str, Replicas, dict[str, Path]]]:
    """A fresh namespace and two bridge replicas with the submit relay (the stack's own worker steps aside):
    "first" leads, "second" follows and has read the Lease. Yields the namespace, the processes and their logs;
    kills what still runs and deletes the namespace afterwards."""
    namespace = f"le-{uuid.uuid4().hex[:6]}"
    kubectl = ["kubectl", "--kubeconfig", kubeconfig]
    subprocess.run([*kubectl, "create", "namespace", namespace], check=True, capture_output=True)
    logs = {name: tmp_path / f"{name}.log" for name in ("first", "second")}
    replicas: Replicas = {}
    try:
        with worker_killed():
            replicas["first"] = start_replica(lease, "first", logs["first"], relay_port=free_port())
            eventually(lambda: holder(kubeconfig, lease) == "first", 30, "the first replica leads")
            replicas["second"] = start_replica(lease, "second", logs["second"], relay_port=free_port())
            eventually(lambda: "bridge worker running" in logs["second"].read_text(), 30, "the follower polls")
            time.sleep(1.0)  # the follower's elector has read the Lease (every 0.5 s)
            yield namespace, replicas, logs
    finally:
        for proc in replicas.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        subprocess.run([*kubectl, "delete", "namespace", namespace, "--wait=false"], capture_output=True)


@pytest.mark.timeout(300)
async def test_replicas_share_the_lifecycles_and_only_the_leader_watches(
    dev_env: dict[str, str], lease: str, tmp_path: Path
) -> None:
    """Two replicas: both run lifecycles from the one task queue (issue 16), only the leader runs the watchers,
    the follower's submits go through the leader's submit relay, and every pod runs and ends as with one
    replica."""
    kubeconfig = dev_env["KUBECONFIG"]
    with two_replicas(kubeconfig, lease, tmp_path) as (namespace, replicas, logs):
        lease_obj = get_json(kubeconfig, "lease", "-n", NAMESPACE, lease)
        relay = lease_obj["metadata"]["annotations"][wellknown.ANNOTATION_SUBMIT_RELAY]
        assert relay.startswith("127.0.0.1:"), lease_obj
        for i in range(16):
            create_pod(kubeconfig, namespace, f"p{i}", seconds=2)
        eventually(lambda: phases(kubeconfig, namespace) == ["Succeeded"] * 16, 120, "every pod ran and succeeded")
        workers = await lifecycle_workers(dev_env["TEMPORAL_ADDRESS"], namespace)
        pids = {name: f"{proc.pid}@" for name, proc in replicas.items()}
        ran = {
            name: [wid for wid, ids in workers.items() if any(i.startswith(pid) for i in ids)]
            for name, pid in pids.items()
        }
        assert len(workers) == 16, workers
        assert ran["first"] and ran["second"], f"both replicas ran lifecycles: {ran}"
        assert "bridge replica leads" in logs["first"].read_text()
        assert "bridge replica leads" not in logs["second"].read_text(), "the follower ran no watcher"
        relayed = logs["first"].read_text()
        only_second = [wid for wid, ids in workers.items() if all(i.startswith(pids["second"]) for i in ids)]
        assert only_second, f"some lifecycles ran on the follower alone: {workers}"
        for wid in only_second:
            assert f"submit relay: submitted for {wid}:" in relayed, f"{wid} was submitted by the leader"
        assert "submitting here" not in logs["second"].read_text()
        eventually(
            lambda: not [p for p in pods_json(kubeconfig, namespace) if p["metadata"].get("finalizers")],
            60,
            "every lifecycle cleaned up (no finalizer left)",
        )
        for proc in replicas.values():
            proc.send_signal(signal.SIGTERM)
        for name, proc in replicas.items():
            code = proc.wait(30)
            assert code == 0, f"{name} exited {code}: {logs[name].read_text()[-3000:]}"


def _jobs_of(namespace: str) -> dict[tuple[str, int | None], list[str]]:
    """Slurm's jobs of the namespace's lifecycles (finished ones stay listed for MinJobAge): their states, by owner
    and submission."""
    from slinky.bridge.models.workload import job_owner_from_comment
    from slinky.clients.slurm import SlurmClient
    from slinky.config import SlurmSettings

    env = stack.env_values()

    async def listed() -> dict[tuple[str, int | None], list[str]]:
        settings = SlurmSettings(rest_url=env["SLURM_REST_URL"], jwt_file=env["SLURM_JWT_FILE"])
        async with SlurmClient.from_settings(settings) as slurm:
            page = await slurm.list_jobs()
        out: dict[tuple[str, int | None], list[str]] = {}
        for job in page.jobs:
            owner = job_owner_from_comment(job.comment)
            if owner is not None and f"/{namespace}/" in owner.workflow_id:
                out.setdefault((owner.workflow_id, owner.submission), []).append("/".join(job.job_state))
        return out

    return asyncio.run(listed())


@pytest.mark.timeout(300)
def test_a_leader_killed_while_it_submits_for_the_follower_leaves_one_job_per_submission(
    dev_env: dict[str, str], lease: str, tmp_path: Path
) -> None:
    """Two replicas with the submit relay; the leader freezes (SIGSTOP) as soon as it relayed a submit of a burst,
    then is killed: the follower's submits sent meanwhile are taken by its kernel and never answered, so they time
    out and are retried (the retry reads Slurm's job list first), the follower takes over, and every pod runs with
    exactly one job per submission: none lost, none doubled."""
    kubeconfig = dev_env["KUBECONFIG"]
    with two_replicas(kubeconfig, lease, tmp_path) as (namespace, replicas, logs):
        create_pods(kubeconfig, namespace, [f"p{i}" for i in range(12)], seconds=2)  # one burst
        relaying = logs["first"]
        eventually(lambda: "submit relay: submitted" in relaying.read_text(), 30, "relaying", interval=0.01)
        replicas["first"].send_signal(signal.SIGSTOP)
        eventually(lambda: holder(kubeconfig, lease) == "second", 30, "the follower leads")
        replicas["first"].kill()
        replicas["first"].wait(10)
        eventually(lambda: phases(kubeconfig, namespace) == ["Succeeded"] * 12, 180, "every pod ran and succeeded")
        eventually(
            lambda: not [p for p in pods_json(kubeconfig, namespace) if p["metadata"].get("finalizers")],
            60,
            "every lifecycle cleaned up (no finalizer left)",
        )
        jobs = _jobs_of(namespace)
        assert len({wid for wid, _ in jobs}) == 12, jobs
        assert "did not answer" in logs["second"].read_text(), "a submit was in flight at the freeze"
        doubled = {owner: states for owner, states in jobs.items() if len(states) > 1}
        assert not doubled, f"more than one job for one submission: {doubled}"
        live = {owner: s for owner, s in jobs.items() if any(x in ("PENDING", "RUNNING") for x in s)}
        assert not live, f"jobs left running: {live}"
