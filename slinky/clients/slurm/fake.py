"""An in-memory Slurm with the :class:`~slinky.clients.slurm.client.SlurmApi` interface, for unit tests.

It is good enough to test pending, running, cancel, drain and delete:

* nodes have CPUs and memory, belong to partitions, and start ``IDLE+EXTERNAL+DYNAMIC_NORM``;
* a submitted job is PENDING; :meth:`FakeSlurmClient.tick` (the scheduler pass, about 1 s apart on the
  real controller) starts pending jobs in ID order on free nodes, whole node and exclusive, as
  ``shared:["none"]`` does;
* cancel frees the nodes at once (external nodes have no COMPLETING phase);
* drain, resume, delete (busy: 2016) and create (duplicate: 2168, bad state: 2028) behave as measured.

Errors are raised through the real client's :func:`~slinky.clients.slurm.client.map_error` with the HTTP
status, error number and texts recorded from slurmrestd 26.05, so callers see the same types and fields.
Failure hooks: ``fake.fail_next("submit_job", SlurmUnavailable("down"))``.
"""

from __future__ import annotations

import itertools
import re
import time
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from slinky.clients.errors import SlurmError, SlurmErrorEntry, SlurmNotFound
from slinky.clients.slurm import versions
from slinky.clients.slurm.client import JobsPage, NodesPage, map_error
from slinky.clients.slurm.models import (
    JOB_COUNTERS,
    ControllerPing,
    Diag,
    JobDescMsg,
    JobInfo,
    Node,
    NodeResourceLayout,
    NodeUpdate,
    Partition,
    Reservation,
    ReservationDesc,
    SlurmdbdDiag,
)
from slinky.hostlist import expand as expand_hostlist

__all__ = ["FakeSlurmClient", "compress_hostlist"]

_ALLOWED_CREATE_STATES = {"CLOUD", "EXTERNAL", "FUTURE"}


def compress_hostlist(names: list[str]) -> str:
    """Slurm's compact form of a node list: ``["n-1", "n-2", "n-3"]`` → ``"n-[1-3]"``."""
    if len(names) <= 1:
        return ",".join(names)
    groups: dict[str, list[int]] = {}
    plain: list[str] = []
    for name in names:
        match = re.fullmatch(r"(.*?)(\d+)", name)
        if match is None:
            plain.append(name)
        else:
            groups.setdefault(match.group(1), []).append(int(match.group(2)))
    parts: list[str] = list(plain)
    for prefix, numbers in groups.items():
        numbers.sort()
        ranges: list[str] = []
        for _, run in itertools.groupby(enumerate(numbers), lambda pair: pair[1] - pair[0]):
            values = [value for _, value in run]
            ranges.append(str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}")
        parts.append(f"{prefix}{ranges[0]}" if len(numbers) == 1 else f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts)


def _no_val(number: int | None) -> dict[str, Any]:
    return {"set": number is not None, "infinite": False, "number": number or 0}


@dataclass
class _FakeNode:
    name: str
    cpus: int
    real_memory: int
    features: list[str]
    partitions: list[str]
    address: str
    flags: set[str] = field(default_factory=lambda: {"EXTERNAL", "DYNAMIC_NORM"})
    down: bool = False
    reason: str = ""
    comment: str = ""
    extra: str = ""
    job_id: int | None = None
    stranded: bool = False
    """ALLOCATED with no job and nothing allocated (:meth:`FakeSlurmClient.strand_allocation`)."""


@dataclass
class _FakeJob:
    job_id: int
    desc: JobDescMsg
    submit_time: int
    state: str = "PENDING"
    reason: str = "None"
    nodes: list[str] = field(default_factory=list)
    start_time: int | None = None
    end_time: int | None = None
    node_count: int = 1
    cpus_per_node_needed: int = 1
    memory_needed: int = 0


class FakeSlurmClient:
    """In-memory Slurm; same methods as :class:`~slinky.clients.slurm.client.SlurmClient`.

    Args:
        api_version: Version whose feature checks apply.
        user_name: Reported as the jobs' ``user_name``.
        min_job_age_seconds: Finished jobs disappear from listings after this long (``MinJobAge``);
            None keeps them until :meth:`purge_finished`.

    Attributes:
        calls: The name of every method called, in order (e.g. to count watcher polls).
    """

    def __init__(
        self,
        *,
        api_version: str = versions.DEFAULT_API_VERSION,
        user_name: str = "slurm",
        min_job_age_seconds: float | None = None,
    ) -> None:
        self.api_version = versions.validate_version(api_version)
        self.user_name = user_name
        self.min_job_age_seconds = min_job_age_seconds
        self.controller_up = True
        self.database_down = False
        """slurmdbd's database is unreachable: ``slurmdbd_diag`` fails as slurmrestd does then."""
        self.calls: list[str] = []
        self._nodes: dict[str, _FakeNode] = {}
        self._partitions: dict[str, list[str]] = {}
        self._reservations: dict[str, Reservation] = {}
        self._jobs: dict[int, _FakeJob] = {}
        self._next_job_id = 1
        self._jobs_changed = int(time.time())
        self.started = int(time.time())
        """slurmctld's start time, as ``diag`` reports it (``req_time_start``); a crash restarts it."""
        self.counters: dict[str, int] = dict.fromkeys(JOB_COUNTERS, 0)
        """``diag``'s job counters as slurmctld 26.05 moves them (measured): ``jobs_submitted`` at each submit and
        allocation, ``jobs_started`` at each start; a cancel through slurmrestd moves none. Reset with ``started``."""
        self._hooks: dict[str, deque[BaseException]] = {}
        self.closed = False

    # --- set-up and test controls -----------------------------------------------------------------------

    def add_partition(self, name: str) -> None:
        """Add an empty partition; nodes join it through :meth:`add_node` or their ``Feature=``."""
        self._partitions.setdefault(name, [])

    def add_node(
        self,
        name: str,
        *,
        cpus: int = 8,
        real_memory: int = 16384,
        partitions: list[str] | None = None,
        features: list[str] | None = None,
        address: str | None = None,
    ) -> None:
        """Add an idle external node (like a ``State=EXTERNAL`` line in slurm.conf)."""
        feats = list(features if features is not None else (partitions or []))
        parts = list(partitions if partitions is not None else [f for f in feats if f in self._partitions])
        for part in parts:
            self.add_partition(part)
            self._partitions[part].append(name)
        self._nodes[name] = _FakeNode(name, cpus, real_memory, feats, parts, address or name)

    def strand_allocation(self, name: str) -> None:
        """Leave an idle node ALLOCATED with no job on it and ``alloc_cpus`` 0, as slurmctld 26.05 did after four
        crashes within a minute (docs/bridge.md, 'Phantom allocations'): no job is placed there until ``DOWN``."""
        node = self._nodes[name]
        assert node.job_id is None, f"{name} holds job {node.job_id}"
        node.stranded = True

    def fail_next(self, method: str, error: BaseException, times: int = 1) -> None:
        """Make the next ``times`` calls of ``method`` (e.g. "submit_job") raise ``error``."""
        self._hooks.setdefault(method, deque()).extend([error] * times)

    def stop_controller(self) -> None:
        """Make every call fail as slurmrestd does while slurmctld is down (500 on GET, 502 on POST)."""
        self.controller_up = False

    def start_controller(self) -> None:
        """Undo :meth:`stop_controller`."""
        self.controller_up = True
        self._touch()

    def crash(self, keep_job_ids: set[int] | None = None) -> None:
        """Simulate ``kill -9`` of slurmctld: unsaved jobs are lost and their IDs get reused.

        Args:
            keep_job_ids: Jobs whose state had been saved; all others vanish.
        """
        keep = keep_job_ids or set()
        for job_id in list(self._jobs):
            if job_id not in keep:
                job = self._jobs.pop(job_id)
                self._release(job)
        self._next_job_id = max(keep, default=0) + 1
        self.started = max(int(time.time()), self.started + 1)
        self.counters = dict.fromkeys(JOB_COUNTERS, 0)
        self._touch()

    def purge_finished(self) -> None:
        """Drop finished jobs, as slurmctld does ``MinJobAge`` seconds after they end."""
        for job_id, job in list(self._jobs.items()):
            if job.state not in ("PENDING", "RUNNING"):
                del self._jobs[job_id]
        self._touch()

    def tick(self) -> list[int]:
        """One scheduler pass: start pending jobs, in ID order, on free nodes of their partition.

        Returns:
            The IDs of the jobs that started.
        """
        started: list[int] = []
        for job in sorted(self._jobs.values(), key=lambda j: j.job_id):
            if job.state == "PENDING" and not job.desc.hold and self._start(job):
                started.append(job.job_id)
        if started:
            self._touch()
        return started

    def _start(self, job: _FakeJob) -> bool:
        """Start ``job`` on free nodes of its partition if enough are free; else set its pending reason."""
        members = self._partitions.get(job.desc.partition or "", [])
        if job.node_count > len(members):
            job.reason = "PartitionConfig"
            return False
        wanted = job.desc.required_nodes or members
        free = [
            self._nodes[name]
            for name in members
            if name in wanted
            and self._node_free(self._nodes[name])
            and self._nodes[name].cpus >= job.cpus_per_node_needed
            and self._nodes[name].real_memory >= job.memory_needed
        ]
        if len(free) < job.node_count:
            job.reason = "Resources"
            return False
        job.state, job.reason, job.start_time = "RUNNING", "None", int(time.time())
        self.counters["jobs_started"] += 1
        job.nodes = [node.name for node in free[: job.node_count]]
        for node in free[: job.node_count]:
            node.job_id = job.job_id
        return True

    # --- plumbing ---------------------------------------------------------------------------------------

    def _touch(self) -> None:
        # last_update has one-second resolution on the real server; a counter keeps it strictly moving.
        self._jobs_changed = max(self._jobs_changed + 1, int(time.time()))

    def _enter(self, method: str, http_method: str = "GET") -> None:
        self.calls.append(method)
        queue = self._hooks.get(method)
        if queue:
            raise queue.popleft()
        if not self.controller_up:
            if http_method == "GET":
                raise self._error(
                    http_method, method, 500, -1, "Unspecified error", "Unable to query", "_handle_job_get"
                )
            raise self._error(
                http_method,
                method,
                502,
                1800,
                "Unable to contact slurm controller (connect failure)",
                "Batch job submission failed",
                "slurm_submit_batch_job()",
            )
        if self.min_job_age_seconds is not None:
            cutoff = time.time() - self.min_job_age_seconds
            for job_id, job in list(self._jobs.items()):
                if job.end_time is not None and job.end_time < cutoff:
                    del self._jobs[job_id]

    def _error(
        self, method: str, path: str, status: int, number: int, error: str, description: str, source: str
    ) -> SlurmError:
        entry = SlurmErrorEntry(error_number=number, error=error, description=description, source=source)
        return map_error(method, f"/slurm/{self.api_version}/{path}", status, [entry])

    def _node_free(self, node: _FakeNode) -> bool:
        return node.job_id is None and not node.stranded and "DRAIN" not in node.flags and not node.down

    def _node_failed(self, node: _FakeNode) -> None:
        """``DOWN`` kills the job on the node, as slurmctld 26.05 does: NODE_FAIL, reason NodeDown, and no job counter
        moves (measured)."""
        job = self._jobs.get(node.job_id) if node.job_id is not None else None
        if job is not None and job.state == "RUNNING":
            job.state, job.reason, job.end_time = "NODE_FAIL", "NodeDown", int(time.time())
            self._release(job)
            self._touch()

    def _release(self, job: _FakeJob) -> None:
        for name in job.nodes:
            node = self._nodes.get(name)
            if node is not None and node.job_id == job.job_id:
                node.job_id = None

    def _job_info(self, job: _FakeJob) -> JobInfo:
        desc = job.desc
        node_cpus = sum(self._nodes[n].cpus for n in job.nodes if n in self._nodes)
        raw: dict[str, Any] = {
            "job_id": job.job_id,
            "name": desc.name or "",
            "job_state": [job.state],
            "state_reason": job.reason,
            "nodes": compress_hostlist(job.nodes),
            "batch_host": job.nodes[0] if job.nodes else "",
            "batch_flag": False,
            "partition": desc.partition or "",
            "account": desc.account or "",
            "qos": desc.qos or "",
            "user_name": self.user_name,
            "admin_comment": desc.admin_comment or "",
            "comment": desc.comment or "",
            "mcs_label": desc.mcs_label or "",
            "flags": [*(desc.flags or []), "USING_DEFAULT_ACCOUNT", "USING_DEFAULT_QOS"],
            "shared": desc.shared or [],
            "submit_time": _no_val(job.submit_time),
            "start_time": _no_val(job.start_time or 0),
            "end_time": _no_val(job.end_time or 0),
            "time_limit": _no_val(desc.time_limit),
            "node_count": _no_val(job.node_count),
            "cpus": _no_val(node_cpus or job.cpus_per_node_needed * job.node_count),
            "cpus_per_task": _no_val(desc.cpus_per_task or 1),
            "memory_per_node": _no_val(desc.memory_per_node),
            "tasks": _no_val(desc.tasks or job.node_count * (desc.tasks_per_node or 1)),
        }
        if job.state == "RUNNING":
            raw["job_resources"] = {
                "select_type": ["CORE"],
                "nodes": {
                    "count": len(job.nodes),
                    "select_type": ["ONE_ROW"],
                    "list": compress_hostlist(job.nodes),
                    "whole": True,
                    "allocation": [
                        {
                            "index": index,
                            "name": name,
                            "cpus": {"count": self._nodes[name].cpus, "used": 0},
                            "memory": {"used": 0, "allocated": desc.memory_per_node or 0},
                        }
                        for index, name in enumerate(job.nodes)
                        if name in self._nodes
                    ],
                },
                "cpus": (desc.cpus_per_task or 1) * len(job.nodes),
            }
        return JobInfo.model_validate(raw)

    def _active_reservation(self, node: str) -> Reservation | None:
        now = time.time()
        for res in self._reservations.values():
            if node in expand_hostlist(res.node_list) and (res.start_time or 0) <= now < (res.end_time or 0):
                return res
        return None

    def _node_info(self, node: _FakeNode) -> Node:
        base = "DOWN" if node.down else ("ALLOCATED" if node.job_id is not None or node.stranded else "IDLE")
        res = self._active_reservation(node.name)
        flags = set(node.flags)
        if res is not None:  # slurmctld 26.05's order: ['IDLE', 'RESERVED', 'MAINTENANCE', 'DYNAMIC_NORM']
            flags |= {"RESERVED", "MAINTENANCE"} if "MAINT" in res.flags else {"RESERVED"}
        order = ["EXTERNAL", "RESERVED", "MAINTENANCE", "DRAIN", "DYNAMIC_NORM"]
        state = [base, *[flag for flag in order if flag in flags]]
        return Node.model_validate(
            {
                "name": node.name,
                "state": state,
                "reason": node.reason,
                "comment": node.comment,
                "extra": node.extra,
                "features": node.features,
                "active_features": node.features,
                "partitions": node.partitions,
                "cpus": node.cpus,
                "alloc_cpus": node.cpus if node.job_id is not None else 0,
                "real_memory": node.real_memory,
                "address": node.address,
                "hostname": node.name,
                "port": 6818,
                "slurmd_start_time": _no_val(0),
                "reservation": res.name if res is not None else "",
            }
        )

    @staticmethod
    def _node_count(desc: JobDescMsg) -> int:
        if desc.minimum_nodes:
            return desc.minimum_nodes
        if desc.nodes:
            head = desc.nodes.split("-")[0].split(":")[0]
            if head.isdigit():
                return int(head)
        return 1

    # --- SlurmApi ---------------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Nothing to close; kept for interface parity."""
        self.closed = True

    async def ping(self) -> list[ControllerPing]:
        """One primary controller; ``responding`` follows :meth:`stop_controller`."""
        self.calls.append("ping")
        pinged = "UP" if self.controller_up else "DOWN"
        return [
            ControllerPing(
                hostname="fake-ctld",
                pinged=pinged,
                responding=self.controller_up,
                latency=100,
                mode="primary",
                primary=True,
            )
        ]

    async def reconfigure(self) -> None:
        """As slurmctld 26.05 does: it re-executes in place, so its statistics start again now."""
        self._enter("reconfigure")
        self.started = int(time.time())
        self.counters = dict.fromkeys(JOB_COUNTERS, 0)

    async def diag(self) -> Diag:
        """A few counters."""
        self._enter("diag")
        states = [job.state for job in self._jobs.values()]
        return Diag(
            server_thread_count=1,
            **self.counters,
            jobs_pending=states.count("PENDING"),
            jobs_running=states.count("RUNNING"),
            req_time_start=self.started,
        )

    async def slurmdbd_diag(self) -> SlurmdbdDiag:
        """As slurmrestd's slurmdbd plugin: 502 with error 7000 while ``database_down`` is set."""
        self._enter("slurmdbd_diag")
        if self.database_down:
            entry = SlurmErrorEntry(
                error_number=7000,
                error="Unable to connect to database",
                description="Failed to open slurmdbd connection",
                source="openapi_get_db_conn",
            )
            raise map_error("GET", f"/slurmdb/{self.api_version}/diag", 502, [entry])
        return SlurmdbdDiag(time_start=self.started)

    async def submit_job(self, job: JobDescMsg, *, script: str | None = None) -> int:
        """Queue a job as PENDING; validated as slurmctld does."""
        self._enter("submit_job", "POST")
        return self._queue(job, script, "job/submit", "Batch job submission failed", "slurm_submit_batch_job()")

    async def allocate_job(self, job: JobDescMsg) -> int:
        """Start a job now or refuse, as ``job/allocate`` with ``immediate`` does (measured on 26.05).

        Refused (a FAILED record stays, reason BadConstraints): 2013 when an older job of the partition is
        pending (the fake's priority is FIFO, unless the job sets a higher ``priority``), 2016 when too few
        nodes are free.
        """
        self._enter("allocate_job", "POST")
        job_id = self._queue(
            job, None, "job/allocate", "Job allocation request failed", "slurm_allocate_resources_blocking()"
        )
        fake = self._jobs[job_id]
        # FIFO among jobs without an explicit priority; an explicit (operator-set) one outranks them.
        older_pending = any(
            j.state == "PENDING"
            and j.job_id < job_id
            and j.desc.partition == job.partition
            and (j.desc.priority or 0) >= (job.priority or 0)
            for j in self._jobs.values()
        )
        if older_pending or not self._start(fake):
            fake.state, fake.reason, fake.end_time = "FAILED", "BadConstraints", int(time.time())
            self._touch()
            number, text = (
                (2013, "Immediate execution impossible, insufficient priority")
                if older_pending
                else (2016, "Requested nodes are busy")
            )
            raise self._error(
                "POST",
                "job/allocate",
                422,
                number,
                text,
                "Job allocation request failed",
                "slurm_allocate_resources_blocking()",
            )
        self._touch()
        return job_id

    def _queue(self, job: JobDescMsg, script: str | None, path: str, description: str, source: str) -> int:
        external = bool(job.flags and "EXTERNAL_JOB" in job.flags)
        if external:
            versions.require(self.api_version, versions.Feature.EXTERNAL_JOB)
        if not external and not script and not job.script:
            raise self._error(
                "POST",
                path,
                422,
                9000,
                "Query empty or not RFC7320 compliant",
                'Populated "script" field is required for job submission',
                "_job_post",
            )
        if job.partition not in self._partitions:
            raise self._error("POST", path, 422, 2000, "Invalid partition name specified", description, source)
        cpus = (job.cpus_per_task or 1) * (job.tasks_per_node or 1)
        memory = job.memory_per_node or 0
        members = [self._nodes[name] for name in self._partitions[job.partition]]
        if members and not any(n.cpus >= cpus and n.real_memory >= memory for n in members):
            raise self._error(
                "POST", path, 422, 2014, "Requested node configuration is not available", description, source
            )
        job_id = self._next_job_id
        self._next_job_id += 1
        self.counters["jobs_submitted"] += 1
        count = self._node_count(job)
        self._jobs[job_id] = _FakeJob(
            job_id=job_id,
            desc=job.model_copy(deep=True),
            submit_time=int(time.time()),
            node_count=count,
            cpus_per_node_needed=cpus,
            memory_needed=memory,
            # A job submitted held says so (measured on 26.05: "JobHeldUser", priority 0).
            reason="PartitionConfig" if count > len(members) else "JobHeldUser" if job.hold else "None",
        )
        self._touch()
        return job_id

    def _job(self, job_id: int, method: str) -> _FakeJob:
        job = self._jobs.get(job_id)
        if job is None:
            raise self._error(
                method,
                f"job/{job_id}",
                404,
                2017,
                "Invalid job id specified",
                f"Unable to query JobId={job_id}",
                "_handle_job_get",
            )
        return job

    async def get_job(self, job_id: int) -> JobInfo:
        """Read one job; unknown IDs give :class:`~slinky.clients.errors.SlurmNotFound` (404, 2017)."""
        self._enter("get_job")
        return self._job_info(self._job(job_id, "GET"))

    async def list_jobs(self, update_time: int | None = None) -> JobsPage:
        """The full list, or nothing when nothing changed since ``update_time``. As slurmctld's, the answer's
        ``last_update`` is the time it was made (not the last change's): asked again from a second before it,
        nothing comes back once nothing changed (measured on 26.05)."""
        self._enter("list_jobs")
        if update_time is not None and self._jobs_changed <= update_time:
            return JobsPage(jobs=[], last_update=update_time, changed=False)
        jobs = [self._job_info(job) for job in sorted(self._jobs.values(), key=lambda j: j.job_id)]
        return JobsPage(jobs=jobs, last_update=max(self._jobs_changed, int(time.time())), changed=True)

    async def job_states(self, job_ids: Collection[int] | None = None) -> dict[int, list[str]]:
        """Every job's state (or these jobs', unknown ids left out), as ``GET jobs/state`` answers."""
        if job_ids is not None and not job_ids:
            return {}
        self._enter("job_states")
        wanted = None if job_ids is None else set(job_ids)
        return {
            job_id: self._job_info(job).job_state
            for job_id, job in sorted(self._jobs.items())
            if wanted is None or job_id in wanted
        }

    async def update_job(self, job_id: int, update: JobDescMsg) -> None:
        """Apply the fields set in ``update`` (pending or running jobs alike, as slurmctld does)."""
        self._enter("update_job", "POST")
        job = self._job(job_id, "POST")
        fields = {key: getattr(update, key) for key in update.model_fields_set}
        job.desc = job.desc.model_copy(update={k: v for k, v in fields.items() if v is not None})
        if job.reason == "JobHeldUser" and not job.desc.hold:
            job.reason = "None"  # released
        elif job.desc.hold and job.state == "PENDING":
            job.reason = "JobHeldUser"  # held, as a job submitted held says
        self._touch()

    async def cancel_job(self, job_id: int, *, signal: str | None = None) -> None:
        """Cancel; unknown or finished jobs succeed silently (slurmrestd answers 200)."""
        self._enter("cancel_job", "DELETE")
        job = self._jobs.get(job_id)
        if job is None or job.state not in ("PENDING", "RUNNING"):
            return
        if signal is not None and signal not in ("SIGKILL", "KILL", "9"):
            return
        job.state, job.reason, job.end_time = "CANCELLED", "None", int(time.time())
        self._release(job)  # no counter moves: slurmctld 26.05 counts no cancel made through slurmrestd (measured)
        self._touch()

    async def get_job_resources(self, job_id: int) -> list[NodeResourceLayout]:
        """Per-node layout of a running job (v0.0.44+)."""
        versions.require(self.api_version, versions.Feature.JOB_RESOURCES)
        self._enter("get_job_resources")
        job = self._job(job_id, "GET")
        return [
            NodeResourceLayout(
                node=name,
                sockets_per_node=self._nodes[name].cpus,
                cores_per_socket=1,
                mem_alloc=job.desc.memory_per_node or 0,
                core_bitmap=f"0x{(1 << self._nodes[name].cpus) - 1:X}",
            )
            for name in job.nodes
            if name in self._nodes
        ]

    async def list_nodes(self, update_time: int | None = None) -> list[Node]:
        """Every node."""
        self._enter("list_nodes")
        return [self._node_info(node) for node in self._nodes.values()]

    async def list_nodes_since(self, update_time: int | None) -> NodesPage:
        """Every node when any changed since ``update_time`` (the fake's change counter), else an unchanged page."""
        self._enter("list_nodes")
        nodes = [self._node_info(node) for node in self._nodes.values()]
        version = hash(tuple(n.model_dump_json() for n in nodes)) & 0x7FFFFFFF  # changes whenever a node does
        if update_time is not None and update_time == version:
            return NodesPage(last_update=update_time, changed=False)
        return NodesPage(nodes=nodes, last_update=version)

    async def get_node(self, name: str) -> Node:
        """One node; unknown names are :class:`~slinky.clients.errors.SlurmNotFound` (200 + error)."""
        self._enter("get_node")
        node = self._nodes.get(name)
        if node is None:
            raise self._error("GET", f"node/{name}", 200, 0, "No error", f"Failure to query node {name}", "_dump_nodes")
        return self._node_info(node)

    async def update_node(self, name: str, update: NodeUpdate) -> None:
        """Apply DRAIN/RESUME/DOWN, reason, comment, extra and features."""
        self._enter("update_node", "POST")
        node = self._nodes.get(name)
        if node is None:
            raise self._error(
                "POST", f"node/{name}", 422, 2018, "Invalid node name specified",
                f"Failure to update node {name}", "_update_node",
            )  # fmt: skip
        for state in update.state or []:
            if state == "DRAIN":
                node.flags.add("DRAIN")
            elif state == "RESUME" and not node.down and "DRAIN" not in node.flags:
                raise self._error(
                    "POST", f"node/{name}", 422, 2180, "Invalid node state transition",
                    f"Failure to update node {name}", "_update_node",
                )  # fmt: skip  # 26.05 refuses to resume a node that is neither down nor draining (measured)
            elif state in ("RESUME", "UNDRAIN"):
                node.flags.discard("DRAIN")
                node.down = False
                node.reason = ""
            elif state == "DOWN":
                node.down, node.stranded = True, False
                self._node_failed(node)
            else:
                raise self._error(
                    "POST", f"node/{name}", 422, 2180, "Invalid node state transition",
                    f"Failure to update node {name}", "_update_node",
                )  # fmt: skip
        if update.reason is not None:
            node.reason = update.reason
        if update.comment is not None:
            node.comment = update.comment
        if update.extra is not None:
            node.extra = update.extra
        if update.features is not None:
            node.features = list(update.features)

    async def drain_node(self, name: str, reason: str) -> None:
        """Set DRAIN with a reason."""
        await self.update_node(name, NodeUpdate(state=["DRAIN"], reason=reason))

    async def resume_node(self, name: str) -> None:
        """Clear DRAIN and DOWN."""
        await self.update_node(name, NodeUpdate(state=["RESUME"]))

    async def create_node(self, node_conf: str) -> None:
        """Parse a ``NodeName=... CPUs=... RealMemory=... State=EXTERNAL Feature=...`` line."""
        versions.require(self.api_version, versions.Feature.NEW_NODE)
        self._enter("create_node", "POST")
        conf: dict[str, str] = {}
        for token in node_conf.split():
            key, _, value = token.partition("=")
            conf[key.lower()] = value.strip('"')
        name = conf.get("nodename", "")
        if conf.get("state", "").upper() not in _ALLOWED_CREATE_STATES:
            raise self._error(
                "POST", "new/node", 422, 2028, "Invalid node state specified",
                "Failure to create node", "_create_node",
            )  # fmt: skip
        if name in self._nodes:
            raise self._error(
                "POST", "new/node", 422, 2168, "Node already exists in the node table",
                "Failure to create node", "_create_node",
            )  # fmt: skip
        features = [f for f in conf.get("feature", conf.get("features", "")).split(",") if f]
        self.add_node(
            name,
            cpus=int(conf.get("cpus", "1")),
            real_memory=int(conf.get("realmemory", "1")),
            features=features,
            partitions=[f for f in features if f in self._partitions],
            address=conf.get("nodeaddr"),
        )

    async def delete_node(self, name: str) -> None:
        """Delete an idle or drained node; busy gives 2016, unknown 2018."""
        self._enter("delete_node", "DELETE")
        node = self._nodes.get(name)
        if node is None:
            raise self._error(
                "DELETE", f"node/{name}", 422, 2018, "Invalid node name specified",
                f"Failure to delete node {name}", "op_handler_node",
            )  # fmt: skip
        if node.job_id is not None:
            raise self._error(
                "DELETE", f"node/{name}", 422, 2016, "Requested nodes are busy",
                f"Failure to delete node {name}", "op_handler_node",
            )  # fmt: skip
        del self._nodes[name]
        for members in self._partitions.values():
            if name in members:
                members.remove(name)

    async def list_partitions(self) -> list[Partition]:
        """Every partition."""
        self._enter("list_partitions")
        return [
            Partition.model_validate(
                {
                    "name": name,
                    "nodes": {"configured": compress_hostlist(members), "total": len(members)},
                    "cpus": {"total": sum(self._nodes[m].cpus for m in members)},
                    "partition": {"state": ["UP"]},
                }
            )
            for name, members in self._partitions.items()
        ]

    async def list_reservations(self) -> list[Reservation]:
        """The reservations made through :meth:`upsert_reservation`."""
        self._enter("list_reservations")
        return [r.model_copy() for r in self._reservations.values()]

    async def get_reservation(self, name: str) -> Reservation:
        """One reservation; unknown gives SlurmNotFound as slurmrestd's error 9000 does."""
        self._enter("get_reservation")
        if name not in self._reservations:
            raise SlurmNotFound(f"GET reservation/{name} -> Unable to find reservation {name}")
        return self._reservations[name].model_copy()

    async def upsert_reservation(self, desc: ReservationDesc) -> None:
        """Create or update, as ``POST reservation``: an unknown node gives 2018; an update keeps unset fields;
        Slurm adds SPEC_NODES when nodes are named."""
        self._enter("upsert_reservation", "POST")
        for name in desc.node_list or []:
            if name not in self._nodes:
                raise self._error(
                    "POST", "reservation", 422, 2018, "Invalid node name specified",
                    f"Error creating reservation {desc.name}", "slurm_create_reservation",
                )  # fmt: skip
        old = self._reservations.get(desc.name)
        start = desc.start_time or (old.start_time if old else None) or int(time.time())
        if desc.duration is not None:
            end = start + desc.duration * 60
        else:
            end = old.end_time if old and old.end_time is not None else start + 365 * 86400
        flags = list(desc.flags) if desc.flags is not None else (list(old.flags) if old else [])
        nodes = list(desc.node_list) if desc.node_list is not None else expand_hostlist(old.node_list if old else "")
        if nodes and "SPEC_NODES" not in flags:
            flags.append("SPEC_NODES")
        users = ",".join(desc.users) if desc.users is not None else (old.users if old else "")
        self._reservations[desc.name] = Reservation(
            name=desc.name, node_list=compress_hostlist(nodes), node_count=len(nodes), users=users, flags=flags,
            start_time=start, end_time=end,
        )  # fmt: skip

    async def delete_reservation(self, name: str) -> None:
        """Delete; unknown gives 2053 "Requested reservation is invalid" (as SlurmNotFound, like the client)."""
        self._enter("delete_reservation", "DELETE")
        if self._reservations.pop(name, None) is None:
            raise SlurmNotFound(f"DELETE reservation/{name} -> Requested reservation is invalid (2053)")
